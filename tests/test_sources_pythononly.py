"""The precompiled mode's Python-only rule, on real git: a local upstream with a release tag,
PRs and cherry-picks resolved by ``prepare_sources`` into the host mirror, then compared."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgevllm.sources.prepare import SourceRequest, prepare_sources
from edgevllm.sources.pythononly import compiled_paths, python_only_change
from support.gitfixtures import add_pr, commit_to_branch, make_upstream_repo

TREE = {
    "setup.py": "# setup\n",
    "pyproject.toml": "[build-system]\nrequires = ['setuptools']\n",
    "CMakeLists.txt": "project(vllm)\n",
    "cmake/utils.cmake": "# utils\n",
    "csrc/ops.cu": "// kernels\n",
    "rust/Cargo.toml": "[workspace]\n",
    "vllm/__init__.py": "",
    "vllm/_custom_ops.py": "OPS = 1\n",
    "vllm/engine.py": "ENGINE = 1\n",
    "docs/index.md": "# docs\n",
}
PR_PY, PR_CSRC, PR_RUST, PR_OPS, PR_CMAKE, PR_PYPROJECT, PR_RENAME, PR_NESTED = range(1, 9)


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm-like")
    (root / "tree").mkdir()
    for path, text in TREE.items():
        (root / "tree" / path).parent.mkdir(parents=True, exist_ok=True)
        (root / "tree" / path).write_text(text)
    up = make_upstream_repo(root, root / "tree")   # main + annotated tag v0.1.0
    add_pr(up, PR_PY, {"vllm/engine.py": "ENGINE = 2\n", "docs/index.md": "# new docs\n",
                       "vllm/new_module.py": "NEW = 1\n"}, base="v0.1.0")
    add_pr(up, PR_CSRC, {"csrc/ops.cu": "// faster kernels\n"}, base="v0.1.0")
    add_pr(up, PR_RUST, {"rust/src/main.rs": "fn main() {}\n"}, base="v0.1.0")
    add_pr(up, PR_OPS, {"vllm/_custom_ops.py": "OPS = 2\n"}, base="v0.1.0")
    add_pr(up, PR_CMAKE, {"CMakeLists.txt": "project(vllm2)\n"}, base="v0.1.0")
    add_pr(up, PR_PYPROJECT, {"pyproject.toml": "[build-system]\nrequires = []\n"}, base="v0.1.0")
    # A kernel moved out of csrc/: the deletion under csrc/ counts, not only the new Python path.
    add_pr(up, PR_RENAME, {"csrc/ops.cu": None, "vllm/ops_moved.cu": "// kernels\n"},
           base="v0.1.0")
    # A nested CMakeLists.txt outside csrc/ is not vLLM's build file (upstream's rule agrees).
    add_pr(up, PR_NESTED, {"vllm/plugins/CMakeLists.txt": "# plugin\n"}, base="v0.1.0")
    return up


def check(upstream, tmp_path, **request):
    cache = tmp_path / "cache"
    req = SourceRequest.from_cli(repo=upstream.url, **request)
    prepared = prepare_sources(req, tmp_path / "tree", cache_root=cache)
    return python_only_change(prepared.repo, prepared.base_sha, prepared.commit, cache_root=cache)


def test_python_only_pr_applies_and_names_the_release(upstream, tmp_path):
    result = check(upstream, tmp_path, pr=PR_PY)
    assert result.applies and result.release == "0.1.0" and result.release_tag == "v0.1.0"
    assert result.changed == ["docs/index.md", "vllm/engine.py", "vllm/new_module.py"]
    assert result.release_commit == upstream.shas["c1"]


@pytest.mark.parametrize("pr, blocking", [
    (PR_CSRC, ["csrc/ops.cu"]),
    (PR_RUST, ["rust/src/main.rs"]),
    (PR_OPS, ["vllm/_custom_ops.py"]),
    (PR_CMAKE, ["CMakeLists.txt"]),
    (PR_PYPROJECT, ["pyproject.toml"]),
    (PR_RENAME, ["csrc/ops.cu"]),
])
def test_compiled_changes_block(upstream, tmp_path, pr, blocking):
    result = check(upstream, tmp_path, pr=pr)
    assert not result.applies and result.blocking == blocking
    assert "compiled sources changed since v0.1.0" in result.reason()


def test_nested_cmakelists_outside_csrc_is_python_side(upstream, tmp_path):
    assert check(upstream, tmp_path, pr=PR_NESTED).applies


def test_cherry_picks_are_judged_together(upstream, tmp_path):
    one = check(upstream, tmp_path / "a", ref="v0.1.0", cherry_picks=[str(PR_PY)])
    assert one.applies
    both = check(upstream, tmp_path / "b", ref="v0.1.0", cherry_picks=[str(PR_PY), str(PR_CSRC)])
    assert not both.applies and both.blocking == ["csrc/ops.cu"]


def test_the_release_itself_has_no_change(upstream, tmp_path):
    result = check(upstream, tmp_path, ref="v0.1.0")
    assert not result.applies and result.changed == []
    assert "is release 0.1.0 itself" in result.reason()


def test_main_past_the_release_counts_in_the_combined_diff(tmp_path):
    """A PR on a main that changed kernels since the release: its own diff is Python, but the
    tree is not the release plus Python, so it must compile."""
    root = tmp_path / "up"
    (root / "tree" / "csrc").mkdir(parents=True)
    (root / "tree" / "csrc" / "a.cu").write_text("// a\n")
    (root / "tree" / "vllm").mkdir()
    (root / "tree" / "vllm" / "x.py").write_text("X = 1\n")
    up = make_upstream_repo(root, root / "tree")
    commit_to_branch(up, "main", {"csrc/a.cu": "// a, changed on main\n"}, "main: kernels")
    add_pr(up, 7, {"vllm/x.py": "X = 2\n"}, base="main")
    result = check(up, tmp_path, pr=7)
    assert result.blocking == ["csrc/a.cu"] and not result.applies


def test_prerelease_tags_are_not_releases(tmp_path):
    """v0.2.0rc1 has no wheel on PyPI: the diff is taken against v0.1.0 below it."""
    root = tmp_path / "up"
    (root / "tree").mkdir(parents=True)
    (root / "tree" / "a.py").write_text("A = 1\n")
    up = make_upstream_repo(root, root / "tree")
    rc = commit_to_branch(up, "main", {"b.py": "B = 1\n"}, "main: work")
    up.git("update-ref", "refs/tags/v0.2.0rc1", rc)
    add_pr(up, 4, {"a.py": "A = 2\n"}, base="main")
    result = check(up, tmp_path, pr=4)
    assert result.release_tag == "v0.1.0" and result.changed == ["a.py", "b.py"]


def test_no_release_tag_below(tmp_path):
    from support.gitfixtures import git

    root = tmp_path / "up"
    (root / "tree").mkdir(parents=True)
    (root / "tree" / "a.py").write_text("A = 1\n")
    up = make_upstream_repo(root, root / "tree")
    git(up.path, "tag", "-d", "v0.1.0")
    add_pr(up, 3, {"a.py": "A = 2\n"}, base="main")
    result = check(up, tmp_path, pr=3)
    assert result.release_tag is None and not result.applies
    assert "no release tag" in result.reason()


def test_compiled_paths_rule():
    changed = ["csrc/x.cu", "csrcs/y.py", "cmake/a.cmake", "cmakefile.py", "rust/src/m.rs",
               "rusty.py", "CMakeLists.txt", "vllm/CMakeLists.txt", "pyproject.toml",
               "vllm/_custom_ops.py", "vllm/_custom_ops_extra.py", "setup.py"]
    assert compiled_paths(changed) == ["csrc/x.cu", "cmake/a.cmake", "rust/src/m.rs",
                                       "CMakeLists.txt", "pyproject.toml", "vllm/_custom_ops.py"]


def test_the_mode_rule_says_why(upstream, tmp_path):
    """specs.moderule.choose_mode, the one mode rule, fed the real check of a prepared tree."""
    from edgevllm.specs.buildspec import choose_mode, load_spec

    spec = load_spec("spark", overrides={"vllm": {"repo": upstream.url, "pr": PR_PY}})
    python_only = check(upstream, tmp_path / "a", pr=PR_PY)
    assert choose_mode(spec, python_only) == (
        "precompiled", "Python-only change: reusing the compiled kernels of vllm 0.1.0; "
                       "--compile to compile")
    forced = spec.model_copy(update={"mode": "compile"})
    assert choose_mode(forced, python_only) == ("compile", "mode compile asked for")
    kernels = check(upstream, tmp_path / "b", pr=PR_CSRC)
    assert choose_mode(spec, kernels)[0] == "compile"
