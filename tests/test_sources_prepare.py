"""Source selection and ``inv sources``: refs, PR heads, picks, locks and rebuilds, on real git.

Upstreams are local fixture repositories (tests/support/gitfixtures.py) with ``refs/pull/N/head``,
reached by path and through a real ``git daemon`` on 127.0.0.1. CLI cases run
``edgevllm sources`` in a fresh interpreter and check the user's view: one ``error:`` line, a
non-zero exit, no traceback and nothing left under the final output name.
"""

from __future__ import annotations

import json
import shutil

import pytest

from edgevllm.common.errors import LockError, RefNotFoundError, SourceError
from edgevllm.common.fsutil import OUTPUT_MARKER, output_dir
from edgevllm.sources.prepare import prepare_into, prepare_sources, summarize
from edgevllm.sources.requests import PickRequest, SourceRequest, requests_from_lock
from edgevllm.specs.lock import LOCK_FILENAME, image_tag, lock_hash, read_lock, write_lock
from support.gitfixtures import (  # noqa: F401
    PR_CLEAN,
    PR_CODE_CONFLICT,
    PR_DOC_CONFLICT,
    PR_MERGED,
    PR_MISSING,
    PR_MOVABLE,
    add_pr,
    add_submodule,
    assert_one_error_line,
    copy_upstream,
    daemon_url,
    force_push_pr,
    git_cache,
    has_commit,
    leftovers,
    make_upstream_repo,
    move_pr,
    run_cli,
    upstream,
    vanish_unreachable,
)

GH = "https://github.com/vllm-project/vllm.git"
SHA = "0123456789abcdef0123456789abcdef01234567"


# --- parsing requests ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, kind, repo, pr, sha",
    [
        ("40082", "pr", None, 40082, None),
        ("#40082", "pr", None, 40082, None),
        ("https://github.com/vllm-project/vllm/pull/40082", "pr", GH, 40082, None),
        (
            "https://github.com/someone/vllm/pull/7/files",
            "pr",
            "https://github.com/someone/vllm.git",
            7,
            None,
        ),
        (SHA, "commit", None, None, SHA),
        (SHA.upper(), "commit", None, None, SHA),
        (f"https://github.com/vllm-project/vllm/commit/{SHA}", "commit", GH, None, SHA),
        ("someone/vllm#12", "pr", "https://github.com/someone/vllm.git", 12, None),
        (
            f"git@github.com:someone/vllm.git@{SHA}",
            "commit",
            "git@github.com:someone/vllm.git",
            None,
            SHA,
        ),
    ],
)
def test_pick_spellings(text, kind, repo, pr, sha):
    pick = PickRequest.parse(text)
    assert (pick.kind, pick.repo, pick.pr, pick.sha) == (kind, repo, pr, sha)


@pytest.mark.parametrize(
    "text, needle",
    [
        ("", "empty"),
        ("0", "not a PR number"),
        ("abc1234", "full 40-character SHA"),
        ("https://github.com/vllm-project/vllm/pull/abc", "not a PR number"),
        ("https://github.com/vllm-project/vllm/pulls", "not understood"),
        ("https://gitlab.com/x/y/pull/3", "not a PR URL"),
        ("not a pick", "not understood"),
        ("owner/repo#x", "'owner/repo#x': 'x' is not a PR number"),
    ],
)
def test_malformed_picks(text, needle):
    with pytest.raises(SourceError, match=needle):
        PickRequest.parse(text)


def test_pr_url_selects_the_repository():
    request = SourceRequest.from_cli(
        "vllm", None, None, "https://github.com/vllm-project/vllm/pull/40898"
    )
    assert (request.repo, request.pr) == (GH, 40898)
    with pytest.raises(SourceError, match="is a PR of vllm-project/vllm but --vllm-repo"):
        SourceRequest.from_cli(
            "vllm", "someone/vllm", None, "https://github.com/vllm-project/vllm/pull/1"
        )
    with pytest.raises(SourceError, match="--vllm-pr 'abc': not a PR number"):
        SourceRequest.from_cli("vllm", None, None, "abc")


def test_defaults_and_plan():
    request = SourceRequest.from_cli("vllm", None, "v0.20.1", None, ["40082"])
    assert request.repo == GH
    assert request.plan() == ["vllm: vllm-project/vllm at ref v0.20.1", "vllm: pick 1: PR #40082"]
    assert (
        SourceRequest.from_cli("flashinfer").repo
        == "https://github.com/flashinfer-ai/flashinfer.git"
    )


# --- resolution ----------------------------------------------------------------------------------
def test_default_branch_tip_and_versions(git_cache, upstream):
    tip = prepare_sources(SourceRequest.from_cli("vllm", upstream.url))
    assert (
        tip.base_sha == upstream.shas["c5"]
        and tip.version == f"0.2.0+1.g{upstream.shas['c5'][:12]}"
    )
    tagged = prepare_sources(SourceRequest.from_cli("vllm", upstream.url, "v0.1.0"))
    assert tagged.base_sha == upstream.shas["c1"] and tagged.version == "0.1.0"
    assert (tip.pep440_version, tagged.pep440_version) == (tip.version, "0.1.0")


def test_version_falls_back_to_the_short_sha(git_cache, tmp_path):
    tree = tmp_path / "pkg"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg/__init__.py").write_text("")
    bare = make_upstream_repo(tmp_path, tree)
    bare.git("update-ref", "-d", "refs/tags/v0.1.0")
    result = prepare_sources(SourceRequest.from_cli("vllm", bare.url))
    assert result.version == result.base_sha[:12]
    assert result.pep440_version == f"0.0.0+g{result.base_sha[:12]}"


def test_building_a_pr_head(git_cache, upstream, tmp_path):
    result = prepare_sources(
        SourceRequest.from_cli("vllm", upstream.url, None, str(PR_MOVABLE)), tmp_path / "t"
    )
    assert result.base_sha == upstream.shas["pr105"] and result.pr == PR_MOVABLE
    assert (tmp_path / "t/src/movable.py").read_text() == "MOVABLE = 1\n"


def test_pr_head_must_contain_the_requested_ref(git_cache, upstream, tmp_path):
    ok = prepare_sources(SourceRequest.from_cli("vllm", upstream.url, "v0.1.0", str(PR_CLEAN)))
    assert ok.base_sha == upstream.shas["pr101"]
    with pytest.raises(
        SourceError, match=r"vllm ref 'v0.1.1' \(\w+\) is not an ancestor of PR #101 head"
    ):
        prepare_sources(
            SourceRequest.from_cli("vllm", upstream.url, "v0.1.1", str(PR_CLEAN)), tmp_path / "t"
        )
    assert leftovers(tmp_path, "t") == []


def test_nonexistent_pr_as_base_or_pick(git_cache, upstream, tmp_path):
    with pytest.raises(RefNotFoundError, match=f"PR #{PR_MISSING} not found"):
        prepare_sources(
            SourceRequest.from_cli("vllm", upstream.url, None, str(PR_MISSING)), tmp_path / "t"
        )
    with pytest.raises(RefNotFoundError, match=f"PR #{PR_MISSING} not found"):
        prepare_sources(
            SourceRequest.from_cli("vllm", upstream.url, None, None, [str(PR_MISSING)]),
            tmp_path / "t",
        )
    assert leftovers(tmp_path, "t") == []


def test_pick_from_a_fork(git_cache, upstream, tmp_path):
    fork = copy_upstream(upstream, tmp_path / "fork.git")
    add_pr(fork, 7, {"src/fork.py": "FORK = 1\n"}, base="main")
    result = prepare_sources(
        SourceRequest.from_cli("vllm", upstream.url, None, None, [f"{fork.url}#7"]), tmp_path / "t"
    )
    assert result.picks[0].repo == fork.url and (tmp_path / "t/src/fork.py").exists()
    assert not has_commit(upstream, fork.prs[7])


# --- locks ---------------------------------------------------------------------------------------
def _lock_of(upstream, tmp_path, picks, **kwargs):
    requests = [
        SourceRequest.from_cli(
            "vllm",
            upstream.url,
            kwargs.get("ref"),
            kwargs.get("pr"),
            picks,
            kwargs.get("allow", False),
        )
    ]
    lock, _ = prepare_into(requests, tmp_path / "locked", target="spark")
    return lock


def test_rebuild_from_a_lock_is_identical(git_cache, upstream, tmp_path, monkeypatch):
    lock = _lock_of(
        upstream, tmp_path, [str(PR_CLEAN), str(PR_MERGED), str(PR_DOC_CONFLICT)], allow=True
    )
    assert read_lock(tmp_path / "locked" / LOCK_FILENAME) == lock
    monkeypatch.setenv("EDGEVLLM_CACHE", str(tmp_path / "fresh-cache"))  # fetched again, by SHA
    again, prepared = prepare_into(requests_from_lock(lock), tmp_path / "again", base_lock=lock)
    assert lock_hash(again) == lock_hash(lock) and image_tag(again) == image_tag(lock)
    assert prepared["vllm"].tree_hash == lock.vllm.tree
    assert [line.split(" as ")[0] for line in summarize(prepared["vllm"])][1:3] == [
        f"vllm: applied PR #{PR_CLEAN} (head {upstream.shas['pr101'][:12]})",
        f"vllm: skipped PR #{PR_MERGED}: its changes are already in the base",
    ]


def test_pr_head_moved_after_locking(git_cache, upstream, tmp_path):
    lock = _lock_of(upstream, tmp_path, [str(PR_MOVABLE)])
    move_pr(upstream, PR_MOVABLE, {"src/movable.py": "MOVABLE = 2\n"})
    rebuilt, _ = prepare_into(requests_from_lock(lock), tmp_path / "rebuilt", base_lock=lock)
    assert (tmp_path / "rebuilt/vllm/src/movable.py").read_text() == "MOVABLE = 1\n"
    assert image_tag(rebuilt) == image_tag(lock)
    fresh = _lock_of(upstream, tmp_path, [str(PR_MOVABLE)])
    assert (tmp_path / "locked/vllm/src/movable.py").read_text() == "MOVABLE = 2\n"
    assert fresh.vllm.picks[0].head_sha == upstream.prs[PR_MOVABLE] != lock.vllm.picks[0].head_sha
    assert image_tag(fresh) != image_tag(lock)


def test_sha_that_vanished_upstream(git_cache, upstream, tmp_path, monkeypatch):
    lock = _lock_of(upstream, tmp_path, [str(PR_MOVABLE)])
    old_head = lock.vllm.picks[0].head_sha
    force_push_pr(upstream, PR_MOVABLE, {"src/movable.py": "MOVABLE = 'rewritten'\n"})
    vanish_unreachable(upstream)
    assert not has_commit(upstream, old_head)
    monkeypatch.setenv("EDGEVLLM_CACHE", str(tmp_path / "fresh-cache"))
    with pytest.raises(
        LockError, match=rf"PR #{PR_MOVABLE} head {old_head[:12]} from the lock no longer exists"
    ):
        prepare_into(requests_from_lock(lock), tmp_path / "rebuilt", base_lock=lock)
    assert leftovers(tmp_path, "rebuilt") == []


def test_lock_that_does_not_match_the_repository(git_cache, upstream, tmp_path):
    lock = _lock_of(upstream, tmp_path, [str(PR_CLEAN)])
    bad_diff = lock.model_copy(deep=True)
    bad_diff.vllm.picks[0].diff_sha256 = "0" * 64
    with pytest.raises(LockError, match="the lock says 000000000000"):
        prepare_into(requests_from_lock(bad_diff), tmp_path / "x", base_lock=bad_diff)
    bad_tree = lock.model_copy(deep=True)
    bad_tree.vllm.tree = "0" * 40
    with pytest.raises(LockError, match="differs from the lock's 000000000000"):
        prepare_into(requests_from_lock(bad_tree), tmp_path / "x", base_lock=bad_tree)
    assert leftovers(tmp_path, "x") == []


def test_lock_records_every_pick_and_flashinfer_as_a_second_source(git_cache, upstream, tmp_path):
    flashinfer = make_upstream_repo(tmp_path / "fi")
    requests = [
        SourceRequest.from_cli("vllm", upstream.url, "v0.1.1", None, [str(PR_CLEAN)]),
        SourceRequest.from_cli("flashinfer", flashinfer.url, None, None, [str(PR_MERGED)]),
    ]
    lock, prepared = prepare_into(requests, tmp_path / "out", target="thor")
    pick = lock.vllm.picks[0]
    assert (pick.pr, pick.head_sha, pick.merge_base) == (
        PR_CLEAN,
        upstream.shas["pr101"],
        upstream.shas["c1"],
    )
    assert (
        len(pick.diff_sha256) == 64
        and lock.vllm.base_sha == upstream.shas["r1"]
        and lock.vllm.ref == "v0.1.1"
    )
    assert lock.flashinfer.picks[0].skipped and lock.target == "thor"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        OUTPUT_MARKER,
        LOCK_FILENAME,
        "flashinfer",
        "vllm",
    ]


def test_failed_preparation_keeps_an_older_output(git_cache, upstream, tmp_path):
    out = tmp_path / "out"
    with output_dir(out, kind="sources") as tmp:  # an older output of edgevllm's
        (tmp / "marker").write_text("older")
    with pytest.raises(SourceError):
        prepare_into(
            [SourceRequest.from_cli("vllm", upstream.url, None, None, [str(PR_CODE_CONFLICT)])], out
        )
    assert (out / "marker").read_text() == "older" and leftovers(tmp_path, "out") == ["out"]


# --- git daemon ----------------------------------------------------------------------------------
def test_pick_and_lock_rebuild_over_git_daemon(
    git_cache, upstream, daemon_url, tmp_path, monkeypatch
):
    requests = [
        SourceRequest.from_cli("vllm", daemon_url, None, None, [str(PR_CLEAN), str(PR_MOVABLE)])
    ]
    lock, _ = prepare_into(requests, tmp_path / "out")
    assert lock.vllm.repo == daemon_url and [p.skipped for p in lock.vllm.picks] == [False, False]
    move_pr(upstream, PR_MOVABLE, {"src/movable.py": "MOVABLE = 3\n"})
    monkeypatch.setenv("EDGEVLLM_CACHE", str(tmp_path / "fresh-cache"))
    again, _ = prepare_into(requests_from_lock(lock), tmp_path / "again", base_lock=lock)
    assert lock_hash(again) == lock_hash(lock)
    force_push_pr(upstream, PR_MOVABLE, {"src/movable.py": "gone\n"})
    vanish_unreachable(upstream)
    monkeypatch.setenv("EDGEVLLM_CACHE", str(tmp_path / "fresh-cache-2"))
    with pytest.raises(LockError, match="no longer exists in git://127.0.0.1"):
        prepare_into(requests_from_lock(lock), tmp_path / "third", base_lock=lock)


# --- the command line ----------------------------------------------------------------------------
def test_cli_prepares_locks_and_rebuilds(git_cache, upstream, tmp_path):
    proc = run_cli(
        "sources",
        "--vllm-repo",
        upstream.url,
        "--cherry-pick",
        str(PR_CLEAN),
        "--cherry-pick",
        str(PR_MERGED),
        "--out",
        str(tmp_path / "out"),
        "--target",
        "spark",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["sources"]["vllm"]["applied"] == [str(PR_CLEAN)] and result["sources"]["vllm"][
        "skipped"
    ] == [str(PR_MERGED)]
    assert f"skipped PR #{PR_MERGED}" in proc.stderr
    lock_file = tmp_path / "out" / LOCK_FILENAME
    assert (
        result["image_tag"] == image_tag(read_lock(lock_file)) and "-spark-" in result["image_tag"]
    )
    again = run_cli(
        "sources", "--lock", str(lock_file), "--out", str(tmp_path / "again"), cwd=tmp_path
    )
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["image_tag"] == result["image_tag"]


def test_cli_dry_run_prints_the_plan_and_touches_nothing(git_cache, upstream, tmp_path):
    proc = run_cli(
        "sources",
        "--vllm-repo",
        upstream.url,
        "--vllm-ref",
        "v0.1.1",
        "--cherry-pick",
        str(PR_CLEAN),
        "--cherry-pick",
        "https://github.com/vllm-project/vllm/pull/40082",
        "--dry-run",
        "--out",
        str(tmp_path / "out"),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"vllm: {upstream.url} at ref v0.1.1",
        f"vllm: pick 1: PR #{PR_CLEAN}",
        "vllm: pick 2: PR #40082 from vllm-project/vllm",
    ]
    assert not (tmp_path / "out").exists() and not (git_cache / "git").exists()


def _bad_lock(tmp_path):
    path = tmp_path / "bad.lock.json"
    path.write_text('{"vllm": 3}')
    return str(path)


CLI_FAILURES = {
    "code conflict": (
        lambda up, tmp: ["--vllm-repo", up.url, "--cherry-pick", str(PR_CODE_CONFLICT)],
        [f"PR #{PR_CODE_CONFLICT}", "src/core.py (line 5)"],
        5,
    ),
    "docs conflict refused": (
        lambda up, tmp: ["--vllm-repo", up.url, "--cherry-pick", str(PR_DOC_CONFLICT)],
        ["docs/guide.md (line 3)", "--allow-doc-conflicts"],
        5,
    ),
    "missing PR as base": (
        lambda up, tmp: ["--vllm-repo", up.url, "--vllm-pr", str(PR_MISSING)],
        [f"PR #{PR_MISSING} not found"],
        5,
    ),
    "missing PR as pick": (
        lambda up, tmp: ["--vllm-repo", up.url, "--cherry-pick", str(PR_MISSING)],
        [f"PR #{PR_MISSING} not found"],
        5,
    ),
    "missing ref": (
        lambda up, tmp: ["--vllm-repo", up.url, "--vllm-ref", "v9.9.9"],
        ["ref 'v9.9.9' not found"],
        5,
    ),
    "missing commit": (
        lambda up, tmp: ["--vllm-repo", up.url, "--cherry-pick", SHA],
        [f"commit {SHA[:12]} not found"],
        5,
    ),
    "base not an ancestor": (
        lambda up, tmp: ["--vllm-repo", up.url, "--vllm-pr", str(PR_CLEAN), "--vllm-ref", "v0.1.1"],
        ["'v0.1.1'", "not an ancestor of PR #101"],
        5,
    ),
    "repo URL without repo": (
        lambda up, tmp: ["--vllm-repo", "https://github.com/onlyowner"],
        ["OWNER/REPO"],
        2,  # a spelling outside the grammar: bad input
    ),
    "repo scheme": (
        lambda up, tmp: ["--vllm-repo", "ftp://example.com/vllm.git"],
        ["unsupported URL scheme"],
        2,  # a spelling outside the grammar: bad input
    ),
    "repo is not a git repository": (
        lambda up, tmp: ["--vllm-repo", str(tmp)],
        ["does not appear to be a git repository"],
        5,
    ),
    "repo path": (lambda up, tmp: ["--vllm-repo", "./no/such/dir"], ["no such local path"], 2),
    "PR URL bad number": (
        lambda up, tmp: [
            "--vllm-repo",
            up.url,
            "--cherry-pick",
            "https://github.com/vllm-project/vllm/pull/x1",
        ],
        ["not a PR number"],
        2,  # a spelling outside the grammar: bad input
    ),
    "vllm-pr not a number": (
        lambda up, tmp: ["--vllm-repo", up.url, "--vllm-pr", "latest"],
        ["--vllm-pr 'latest'"],
        2,  # a spelling outside the grammar: bad input
    ),
    "short SHA pick": (
        lambda up, tmp: ["--vllm-repo", up.url, "--cherry-pick", "deadbeef1"],
        ["full 40-character SHA"],
        5,
    ),
    "missing lock": (
        lambda up, tmp: ["--lock", str(tmp / "none.lock.json")],
        ["no such lock file"],
        2,  # a file the user named that is not there: bad input
    ),
    "malformed lock": (lambda up, tmp: ["--lock", _bad_lock(tmp)], ["field 'vllm'"], 5),
    "unknown target": (
        lambda up, tmp: ["--vllm-repo", up.url, "--target", "nosuch"],
        ["unknown target 'nosuch'"],
        2,
    ),
    "lock plus flags": (
        lambda up, tmp: ["--lock", _bad_lock(tmp), "--vllm-ref", "main"],
        ["drop the --vllm-*"],
        2,
    ),
}


@pytest.mark.parametrize("case", sorted(CLI_FAILURES))
def test_cli_bad_input_is_one_line(case, git_cache, upstream, tmp_path):
    make_args, needles, code = CLI_FAILURES[case]
    proc = run_cli(
        "sources", *make_args(upstream, tmp_path), "--out", str(tmp_path / "out"), cwd=tmp_path
    )
    assert_one_error_line(proc, *needles)
    assert proc.returncode == code
    assert leftovers(tmp_path, "out") == []


def test_cli_needs_an_output_folder(git_cache, upstream, tmp_path):
    assert_one_error_line(
        run_cli("sources", "--vllm-repo", upstream.url, cwd=tmp_path), "give --out DIR"
    )


def test_cli_vanished_sha_through_git_daemon(git_cache, upstream, daemon_url, tmp_path):
    ok = run_cli(
        "sources",
        "--vllm-repo",
        daemon_url,
        "--cherry-pick",
        str(PR_MOVABLE),
        "--out",
        str(tmp_path / "a"),
    )
    assert ok.returncode == 0, ok.stderr
    lock_file = tmp_path / "a" / LOCK_FILENAME
    force_push_pr(upstream, PR_MOVABLE, {"src/movable.py": "gone\n"})
    vanish_unreachable(upstream)
    proc = run_cli(
        "sources",
        "--lock",
        str(lock_file),
        "--out",
        str(tmp_path / "out"),
        env={"EDGEVLLM_CACHE": str(tmp_path / "fresh-cache")},
    )
    assert_one_error_line(
        proc, f"PR #{PR_MOVABLE} head", "no longer exists", "rebuild without --lock"
    )
    assert leftovers(tmp_path, "out") == []


def test_lock_written_as_yaml_is_accepted(git_cache, upstream, tmp_path):
    lock = _lock_of(upstream, tmp_path, [str(PR_CLEAN)])
    path = write_lock(lock, tmp_path / "spark.lock.yaml")
    proc = run_cli("sources", "--lock", str(path), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["lock_sha256"] == lock_hash(lock)


def test_submodules_are_exported_at_their_pinned_commits(git_cache, upstream, tmp_path):
    """FlashInfer vendors CUTLASS as a submodule: the prepared tree must contain it."""
    vendored = tmp_path / "cutlass-src"
    (vendored / "include").mkdir(parents=True)
    (vendored / "include/cutlass.h").write_text("#define CUTLASS 1\n")
    cutlass = make_upstream_repo(tmp_path / "cutlass", vendored)
    add_submodule(upstream, "3rdparty/cutlass", cutlass)
    lock, prepared = prepare_into(
        [SourceRequest.from_cli("flashinfer", upstream.url, None, None, [str(PR_CLEAN)])],
        tmp_path / "out",
    )
    assert (
        tmp_path / "out/flashinfer/3rdparty/cutlass/include/cutlass.h"
    ).read_text() == "#define CUTLASS 1\n"
    assert lock.flashinfer.submodules == {"3rdparty/cutlass": cutlass.shas["c1"]}
    assert lock.vllm is None and prepared["flashinfer"].tree_dir == tmp_path / "out/flashinfer"


def test_broken_submodule_pin_fails_with_one_line(git_cache, upstream, tmp_path):
    vendored = tmp_path / "dep-src"
    vendored.mkdir()
    (vendored / "dep.txt").write_text("dep\n")
    dep = make_upstream_repo(tmp_path / "dep", vendored)
    add_submodule(upstream, "3rdparty/dep", dep)
    shutil.rmtree(dep.path)  # the submodule's history is rewritten: the pinned commit is gone
    (vendored / "dep.txt").write_text("rewritten\n")
    make_upstream_repo(tmp_path / "dep", vendored)
    with pytest.raises(SourceError, match="submodule 3rdparty/dep commit"):
        prepare_into([SourceRequest.from_cli("vllm", upstream.url)], tmp_path / "out")
    assert leftovers(tmp_path, "out") == []
