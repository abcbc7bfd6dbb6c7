"""The cherry-pick engine on real git: clean picks, already-merged picks, docs/tests-only conflicts
(allowed and refused), code conflicts, commit picks, ordering, determinism and the exported tree.

The upstream is the scenario fixture of tests/support/gitfixtures.py (a bare repo with
``refs/pull/N/head``); picks are resolved through the mirror cache exactly as a build does.
"""

from __future__ import annotations

import hashlib
import subprocess

import pytest

from edgevllm.common.errors import CherryPickConflictError
from edgevllm.sources.cherrypick import is_doc_path
from edgevllm.sources.gitcache import GitMirror
from edgevllm.sources.prepare import SourceRequest, prepare_sources
from support.gitfixtures import (  # noqa: F401
    PR_ANCESTOR,
    PR_CLEAN,
    PR_CODE_CONFLICT,
    PR_DOC_CONFLICT,
    PR_MERGED,
    add_pr,
    core_py,
    git_cache,
    guide_md,
    leftovers,
    upstream,
)


def prepare(upstream, picks, *, ref=None, allow=False, dest=None, pr=None):
    request = SourceRequest.from_cli("vllm", upstream.url, ref, pr, [str(p) for p in picks], allow)
    return prepare_sources(request, dest)


@pytest.mark.parametrize(
    "path, doc",
    [
        ("docs/guide.md", True),
        ("docs/api/x.py", True),
        ("tests/kernels/test_moe.py", True),
        ("README.md", True),
        ("vllm/test_utils.py", True),
        ("vllm/model_executor/layers/fused_moe.py", False),
        ("csrc/moe.cu", False),
        ("requirements/cuda.txt", False),
        ("CMakeLists.txt", False),
        ("setup.py", False),
    ],
)
def test_docs_and_tests_are_told_from_code(path, doc):
    assert is_doc_path(path) is doc


def test_clean_pick_applies_the_pr_diff_from_its_merge_base(git_cache, upstream, tmp_path):
    result = prepare(upstream, [PR_CLEAN], dest=tmp_path / "tree")
    pick = result.picks[0]
    assert (
        not pick.skipped
        and pick.head_sha == upstream.shas["pr101"]
        and pick.merge_base == upstream.shas["c1"]
    )
    tree = tmp_path / "tree"
    assert (tree / "src/feature.py").read_text() == "FEATURE = True\n"
    # the PR's change and main's later changes are both there
    assert (tree / "src/core.py").read_text() == core_py(
        l5="VALUE_05 = 'main'", l15="VALUE_15 = 'feature'"
    )
    assert (tree / "src/later.py").exists() and not (tree / ".git").exists()
    expected = subprocess.run(
        [
            "git",
            "--git-dir",
            str(upstream.path),
            "diff",
            "--binary",
            "--full-index",
            "--no-renames",
            upstream.shas["c1"],
            upstream.shas["pr101"],
        ],
        capture_output=True,
        check=True,
    ).stdout
    assert pick.diff_sha256 == hashlib.sha256(expected).hexdigest()


def test_each_applied_pick_is_a_commit_naming_the_pr_and_its_head(git_cache, upstream):
    result = prepare(upstream, [PR_CLEAN])
    mirror = GitMirror(upstream.url)
    message = mirror.git("log", "-1", "--format=%B", result.commit).stdout.decode()
    assert (
        f"PR #{PR_CLEAN}" in message.splitlines()[0]
        and upstream.shas["pr101"] in message.splitlines()[0]
    )
    parent = mirror.git("rev-parse", f"{result.commit}^").stdout.decode().strip()
    assert parent == result.base_sha == upstream.shas["c5"]
    assert result.picks[0].commit == result.commit


def test_exported_tree_is_exactly_the_commit(git_cache, upstream, tmp_path):
    result = prepare(upstream, [PR_CLEAN], dest=tmp_path / "tree")
    listed = (
        GitMirror(upstream.url)
        .git("ls-tree", "-r", "--name-only", result.commit)
        .stdout.decode()
        .split()
    )
    on_disk = sorted(
        str(p.relative_to(tmp_path / "tree")) for p in (tmp_path / "tree").rglob("*") if p.is_file()
    )
    assert on_disk == sorted(listed)
    assert (
        result.tree_hash
        == GitMirror(upstream.url)
        .git("rev-parse", f"{result.commit}^{{tree}}")
        .stdout.decode()
        .strip()
    )


def test_squash_merged_pr_is_skipped_and_reported(git_cache, upstream):
    result = prepare(upstream, [PR_MERGED])
    assert result.picks[0].skipped and "already in the base" in result.picks[0].reason
    assert result.commit == result.base_sha


def test_pr_merged_with_a_merge_commit_is_skipped(git_cache, upstream):
    result = prepare(upstream, [PR_ANCESTOR])
    assert result.picks[0].skipped and "ancestor" in result.picks[0].reason


def test_commit_already_in_the_base_is_skipped(git_cache, upstream):
    result = prepare(upstream, [upstream.shas["c3"]])
    assert result.picks[0].kind == "commit" and result.picks[0].skipped


def test_docs_only_conflict_is_refused_without_the_flag(git_cache, upstream, tmp_path):
    with pytest.raises(CherryPickConflictError) as err:
        prepare(upstream, [PR_DOC_CONFLICT], dest=tmp_path / "tree")
    message = str(err.value)
    assert f"PR #{PR_DOC_CONFLICT}" in message and upstream.shas["pr103"][:12] in message
    assert (
        "only in docs/tests" in message
        and "docs/guide.md (line 3)" in message
        and "tests/test_core.py (line 2)" in message
    )
    assert "--allow-doc-conflicts" in message
    assert leftovers(tmp_path, "tree") == []


def test_docs_only_conflict_keeps_the_base_side_when_allowed(git_cache, upstream, tmp_path):
    result = prepare(upstream, [PR_DOC_CONFLICT], allow=True, dest=tmp_path / "tree")
    pick = result.picks[0]
    assert not pick.skipped and pick.resolved_paths == ["docs/guide.md", "tests/test_core.py"]
    assert (tmp_path / "tree/docs/guide.md").read_text() == guide_md(l3="guide line 3 (main)")
    assert (
        tmp_path / "tree/src/docfix.py"
    ).read_text() == "DOCFIX = 1\n"  # the PR's code change is in


def test_code_conflict_fails_naming_pick_file_and_line(git_cache, upstream, tmp_path):
    with pytest.raises(CherryPickConflictError) as err:
        prepare(upstream, [PR_CLEAN, PR_CODE_CONFLICT], allow=True, dest=tmp_path / "tree")
    message = str(err.value)
    assert f"PR #{PR_CODE_CONFLICT}" in message and "in code: src/core.py (line 5)" in message
    assert leftovers(tmp_path, "tree") == []


def test_mixed_conflict_counts_as_code_even_when_docs_are_allowed(git_cache, upstream):
    add_pr(
        upstream,
        7,
        {"src/core.py": core_py(l5="VALUE_05 = 7"), "docs/guide.md": guide_md(l3="seven")},
        base=upstream.shas["c1"],
    )
    with pytest.raises(CherryPickConflictError, match=r"PR #7 .*in code: src/core.py \(line 5\)"):
        prepare(upstream, [7], allow=True)


def test_deleted_file_conflict_is_described(git_cache, upstream):
    add_pr(upstream, 8, {"src/core.py": None}, base=upstream.shas["c1"])
    with pytest.raises(
        CherryPickConflictError, match=r"in code: src/core.py \(patch does not apply\)"
    ):
        prepare(upstream, [8])


def test_plain_sha_is_picked_as_a_commit(git_cache, upstream):
    result = prepare(upstream, [upstream.shas["pr101"]])
    pick = result.picks[0]
    assert pick.kind == "commit" and pick.merge_base == upstream.shas["c1"] and not pick.skipped


def test_picks_apply_in_order(git_cache, upstream):
    follow_up = add_pr(
        upstream, 9, {"src/feature.py": "FEATURE = 'v2'\n"}, base=upstream.shas["pr101"]
    )
    result = prepare(upstream, [PR_CLEAN, follow_up])
    assert [p.skipped for p in result.picks] == [False, False]
    assert (
        GitMirror(upstream.url).git("show", f"{result.commit}:src/feature.py").stdout
        == b"FEATURE = 'v2'\n"
    )
    with pytest.raises(CherryPickConflictError, match=f"commit {follow_up[:12]}"):
        prepare(upstream, [follow_up])  # on its own it modifies a file the base does not have


def test_same_inputs_give_the_same_commits(git_cache, upstream, tmp_path):
    first = prepare(upstream, [PR_CLEAN, PR_DOC_CONFLICT], allow=True, dest=tmp_path / "a")
    second = prepare(upstream, [PR_CLEAN, PR_DOC_CONFLICT], allow=True, dest=tmp_path / "b")
    assert (first.commit, first.tree_hash) == (second.commit, second.tree_hash)
    assert [p.commit for p in first.picks] == [p.commit for p in second.picks]


def test_pick_onto_a_release_tag_uses_the_merge_base_with_main(git_cache, upstream, tmp_path):
    result = prepare(upstream, [PR_CLEAN], ref="v0.1.1", dest=tmp_path / "tree")
    assert (
        result.base_sha == upstream.shas["r1"] and result.picks[0].merge_base == upstream.shas["c1"]
    )
    assert (tmp_path / "tree/src/release.py").exists() and (
        tmp_path / "tree/src/feature.py"
    ).exists()
    assert not (tmp_path / "tree/src/later.py").exists()  # main's later work did not come along
    assert result.version == "0.1.1"


def test_doc_deleted_by_the_pick_but_changed_in_the_base_keeps_the_base_file(
    git_cache, upstream, tmp_path
):
    add_pr(
        upstream, 10, {"docs/guide.md": None, "src/ten.py": "TEN = 10\n"}, base=upstream.shas["c1"]
    )
    with pytest.raises(
        CherryPickConflictError, match=r"only in docs/tests: docs/guide.md \(patch does not apply\)"
    ):
        prepare(upstream, [10])
    result = prepare(upstream, [10], allow=True, dest=tmp_path / "tree")
    assert result.picks[0].resolved_paths == ["docs/guide.md"]
    assert (tmp_path / "tree/docs/guide.md").read_text() == guide_md(l3="guide line 3 (main)")
    assert (tmp_path / "tree/src/ten.py").read_text() == "TEN = 10\n"
