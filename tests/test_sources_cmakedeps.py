"""What vLLM 0.33.0's CMake would clone, fetched on the host by commit (no GitHub here).

The real sdist's CMake files are used with each GitHub URL replaced by a local repository served
by ``git daemon`` on 127.0.0.1 (real git transport) and each pinned SHA by the stand-in's commit;
tags (cutlass v4.7.1, triton v3.5.1) are created in the stand-ins. The proof that the build needs
no network: with the tree's own ``*_SRC_DIR`` overrides pointing at the exported folders, the
tree's CMake declares no clone at all.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from edgevllm.common.errors import LockError, RefNotFoundError, SourceError
from edgevllm.sources.cmakedeps import ENV_FILE, env_file_text, fetch_cmake_deps
from edgevllm.sources.plan import CMakeDep, evaluate_plan
from support.gitfixtures import (  # noqa: F401
    add_submodule,
    git_cache,
    git_daemon,
    make_upstream_repo,
    vanish_unreachable,
)
from support.sdists import sdist_tree_cached

TAGGED = {"cutlass": "v4.7.1", "triton_kernels": "v3.5.1"}


def plan(tree: Path):
    return evaluate_plan(tree, "12.1a", cuda_version="13.0.2", device_arch="12.1a")


@pytest.fixture(scope="module")
def real_tree() -> Path:
    if shutil.which("cmake") is None:
        pytest.fail("cmake is missing: install cmake >= 3.25 (apt-get install cmake)")
    return sdist_tree_cached("vllm", "0.33.0", ["CMakeLists.txt", "cmake/"])


def _stand_in(root: Path, name: str, files: dict[str, str]):
    folder = root / "src" / name
    folder.mkdir(parents=True)
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return make_upstream_repo(root / "repos", folder, name=f"{name}.git")


@pytest.fixture()
def offline_world(real_tree, tmp_path):
    """(tree, {dep: upstream}, base URL): the tree's clones point at local stand-ins."""
    tree = tmp_path / "vllm"
    shutil.copytree(real_tree, tree)
    deps = plan(tree).deps
    cutlass = _stand_in(tmp_path, "cutlass", {"include/cutlass/cutlass.h": "// stand-in\n"})
    upstreams = {"cutlass": cutlass}
    for dep in deps:
        if dep.name != "cutlass":
            upstreams[dep.name] = _stand_in(tmp_path, dep.name, {"README": f"{dep.name}\n"})
    # As upstream FA has (its .gitmodules names a remote: here beside it on the git daemon).
    add_submodule(upstreams["vllm-flash-attn"], "csrc/cutlass", cutlass, url="../cutlass.git")
    for name, tag in TAGGED.items():
        upstreams[name].git("update-ref", f"refs/tags/{tag}", upstreams[name].git("rev-parse",
                                                                                  "main"))
    with git_daemon(tmp_path / "repos") as base:
        _point_tree_at(tree, deps, upstreams, base)
        yield tree, upstreams, base


def _point_tree_at(tree: Path, deps: list[CMakeDep], upstreams: dict, base: str) -> None:
    files = [tree / "CMakeLists.txt", *sorted((tree / "cmake").rglob("*.cmake"))]
    for path in files:
        text = path.read_text()
        for dep in deps:
            text = text.replace(dep.repo, f"{base}/{dep.name}.git")
            if re.fullmatch(r"[0-9a-f]{40}", dep.tag):
                text = text.replace(dep.tag, upstreams[dep.name].git("rev-parse", "main"))
        path.write_text(text)


def test_every_clone_fetched_exported_recorded_then_cloned_no_more(  # noqa: F811
        offline_world, git_cache, tmp_path, monkeypatch):
    tree, upstreams, base = offline_world
    deps = plan(tree).deps
    assert len(deps) == 10 and all(d.repo.startswith(base) for d in deps)
    records = fetch_cmake_deps(deps, tmp_path / "deps")
    assert set(records) == set(upstreams)
    for name, record in records.items():
        assert record.commit == upstreams[name].git("rev-parse", "main")
        assert record.tree == upstreams[name].git("rev-parse", "main^{tree}")
        assert (tmp_path / "deps" / name).is_dir()
    assert records["cutlass"].ref == "v4.7.1"
    assert records["cutlass"].env_var == "VLLM_CUTLASS_SRC_DIR"
    assert records["vllm-flash-attn"].submodules == {"csrc/cutlass": records["cutlass"].commit}
    fa = tmp_path / "deps" / "vllm-flash-attn"
    assert (fa / "csrc" / "cutlass" / "include" / "cutlass" / "cutlass.h").is_file()
    env = (tmp_path / "deps" / ENV_FILE).read_text()
    assert "export VLLM_CUTLASS_SRC_DIR=/src/deps/cutlass\n" in env
    assert "export FLASH_MLA_SRC_DIR=/src/deps/flashmla\n" in env
    assert env == env_file_text(records)
    # What the build does with them: the tree's own CMake takes every *_SRC_DIR branch.
    for name, record in records.items():
        monkeypatch.setenv(record.env_var, str(tmp_path / "deps" / name))
    assert plan(tree).deps == []  # the tree's own CMake takes every *_SRC_DIR branch


def test_lock_rebuilds_by_commit_even_when_the_tag_moved(offline_world, git_cache, tmp_path):  # noqa: F811
    tree, upstreams, _ = offline_world
    deps = plan(tree).deps
    first = fetch_cmake_deps(deps, tmp_path / "first")
    cutlass = upstreams["cutlass"]
    from support.gitfixtures import commit_to_branch
    moved = commit_to_branch(cutlass, "main", {"include/cutlass/new.h": "// moved\n"}, "move tag")
    cutlass.git("update-ref", "refs/tags/v4.7.1", moved)
    again = fetch_cmake_deps(deps, tmp_path / "again", locked=first)
    assert again == first
    fresh = fetch_cmake_deps(deps, tmp_path / "fresh", cache_root=tmp_path / "other-cache")
    assert fresh["cutlass"].commit == moved  # without the lock the tag's new commit is taken
    edited = dict(first)  # an edited lock: its tree hash is not what the commit has
    edited["qutlass"] = edited["qutlass"].model_copy(update={"tree": "0" * 40})
    with pytest.raises(LockError, match=r"CMake dependency qutlass: tree .* differs from the lock"):
        fetch_cmake_deps(deps, tmp_path / "edited", locked=edited)


def test_a_lock_commit_that_vanished_is_one_line(offline_world, git_cache, tmp_path):  # noqa: F811
    tree, upstreams, _ = offline_world
    deps = plan(tree).deps
    locked = fetch_cmake_deps(deps, tmp_path / "first", cache_root=tmp_path / "cache-a")
    flashmla = upstreams["flashmla"]
    from support.gitfixtures import commit
    rewritten = commit(flashmla, [], {"README": "rewritten\n"}, "force-push")
    flashmla.git("update-ref", "refs/heads/main", rewritten)
    flashmla.git("update-ref", "-d", "refs/tags/v0.1.0")
    vanish_unreachable(flashmla)
    with pytest.raises(LockError) as info:
        fetch_cmake_deps(deps, tmp_path / "second", locked=locked,
                         cache_root=tmp_path / "cache-b")
    message = str(info.value)
    assert message.startswith("CMake dependency flashmla (cmake/external_projects/flashmla.cmake:")
    assert "no longer exists in" in message and "flashmla.git" in message and "\n" not in message
    assert not (tmp_path / "second").exists()  # nothing under the final name


def test_a_pinned_ref_that_cannot_be_fetched_names_the_repository(offline_world, git_cache,  # noqa: F811
                                                                  tmp_path):
    tree, _, base = offline_world
    path = tree / "cmake" / "external_projects" / "deepselect.cmake"
    text = path.read_text()
    path.write_text(re.sub(r"GIT_TAG [0-9a-f]{40}", "GIT_TAG " + "ab" * 20, text))
    with pytest.raises(RefNotFoundError) as info:
        fetch_cmake_deps(plan(tree).deps, tmp_path / "deps")
    message = str(info.value)
    assert message.startswith("CMake dependency deepselect (cmake/external_projects/deepselect")
    assert "deepselect.git" in message and "\n" not in message
    # An unreachable host is one line too, naming the repository.
    unreachable = CMakeDep(name="x", repo="git://127.0.0.1:9/x.git", tag="v1", file="f",
                           line=1, env_var="X_SRC_DIR")
    with pytest.raises(SourceError, match=r"CMake dependency x \(f:1\): .*127.0.0.1:9/x"):
        fetch_cmake_deps([unreachable], tmp_path / "deps2")


def test_a_clone_without_an_override_cannot_be_offline(tmp_path):
    dep = CMakeDep(name="newdep", repo="https://example.invalid/new.git", tag="v1",
                   file="cmake/external_projects/new.cmake", line=7, env_var=None)
    with pytest.raises(SourceError, match=r"newdep \(cmake/external_projects/new.cmake:7\) has no "
                                          r"\*_SRC_DIR override"):
        fetch_cmake_deps([dep], tmp_path / "deps")


# --- names and repositories from the tree (common/foreign.py) ------------------------------------
HOSTILE_DEPS = [
    ("../../x", "https://example.invalid/x.git", "v1", "is not a plain name"),
    ("/abs", "https://example.invalid/x.git", "v1", "is not a plain name"),
    ("..", "https://example.invalid/x.git", "v1", "is not a plain name"),
    ("x", "file:///root/private.git", "v1", "is not a remote URL"),
    ("x", "/home/me/private", "v1", "is not a remote URL"),
    ("x", "../sibling", "v1", "is not a remote URL"),
    ("x", "ext::sh -c touch% /tmp/owned", "v1", "is not a remote URL"),
    ("x", "https://example.invalid/x.git", "--upload-pack=touch /tmp/owned", "GIT_TAG"),
]


@pytest.mark.parametrize("name,repo,tag,words", HOSTILE_DEPS)
def test_a_hostile_dependency_is_one_line_before_anything_is_fetched_or_written(
        name, repo, tag, words, git_cache, tmp_path):  # noqa: F811
    dep = CMakeDep(name=name, repo=repo, tag=tag, file="cmake/x.cmake", line=3,
                   env_var="X_SRC_DIR")
    dest = tmp_path / "build" / "deps"
    dest.parent.mkdir()
    with pytest.raises(SourceError, match=re.escape(words)) as info:
        fetch_cmake_deps([dep], dest)
    assert "\n" not in str(info.value) and "cmake/x.cmake:3" in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["build"]
    assert list((tmp_path / "build").iterdir()) == [] and not git_cache.exists()


def test_a_tree_declaring_a_dependency_named_like_a_path_is_refused(tmp_path, git_cache):  # noqa: F811
    tree = tmp_path / "tree"
    (tree / "cmake").mkdir(parents=True)
    (tree / "CMakeLists.txt").write_text(
        'cmake_minimum_required(VERSION 3.26)\ninclude(FetchContent)\n'
        'if(DEFINED ENV{X_SRC_DIR})\nendif()\n'
        'FetchContent_Declare(../../escaped GIT_REPOSITORY https://example.invalid/x.git '
        'GIT_TAG v1)\n')
    deps = plan(tree).deps
    assert [d.name for d in deps] == ["../../escaped"]
    with pytest.raises(SourceError, match=r"\(CMakeLists.txt:5\) name: '../../escaped' is not a "
                                          "plain name"):
        fetch_cmake_deps(deps, tmp_path / "out" / "deps")
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "out").exists()


def test_a_remote_dependency_names_no_submodule_on_the_host(git_cache, tmp_path):  # noqa: F811
    private = make_upstream_repo(tmp_path / "host", name="private.git")
    served = _stand_in(tmp_path, "dep", {"README": "dep\n"})
    for url in (private.url, f"file://{private.url}"):
        add_submodule(served, "vendored", private, url=url)
        with git_daemon(tmp_path / "repos") as base:
            dep = CMakeDep(name="dep", repo=f"{base}/dep.git", tag="main", file="f", line=1,
                           env_var="DEP_SRC_DIR")
            with pytest.raises(SourceError, match="submodule vendored: repository .* is not a "
                                                  "remote URL") as info:
                fetch_cmake_deps([dep], tmp_path / "deps")
        assert "\n" not in str(info.value) and not (tmp_path / "deps").exists()
