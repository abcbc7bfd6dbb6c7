"""The git mirror cache: URL normalization, fetching only what is needed, refs -> SHAs, locking.

Real git against local fixture upstreams (tests/support/gitfixtures.py), reached by path,
file:// and a real ``git daemon`` on 127.0.0.1; no mocks.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from edgevllm.common.errors import RefNotFoundError, SourceError
from edgevllm.sources.gitcache import GitMirror
from edgevllm.specs.refs import normalize_repo, parse_commit_url, parse_pr_url, repo_key
from support.gitfixtures import (  # noqa: F401
    PR_CLEAN,
    PR_MISSING,
    daemon_url,
    free_port,
    git_cache,
    make_upstream_repo,
    upstream,
)

GH = "https://github.com/vllm-project/vllm.git"


@pytest.mark.parametrize(
    "spec",
    [
        "vllm-project/vllm",
        "https://github.com/vllm-project/vllm",
        "https://github.com/vllm-project/vllm.git",
        "https://github.com/vllm-project/vllm/",
        "http://github.com/vllm-project/vllm",
        "https://www.github.com/vllm-project/vllm",
    ],
)
def test_github_spellings_normalize_to_one_https_url(spec):
    assert normalize_repo(spec) == GH


def test_ssh_and_https_share_a_cache_key():
    assert (
        normalize_repo("git@github.com:vllm-project/vllm.git")
        == "git@github.com:vllm-project/vllm.git"
    )
    assert (
        normalize_repo("git@github.com:vllm-project/vllm") == "git@github.com:vllm-project/vllm.git"
    )
    keys = {
        repo_key(normalize_repo(s))
        for s in ("git@github.com:vllm-project/vllm.git", GH, "Vllm-Project/vllm")
    }
    assert keys == {"github.com/vllm-project/vllm"}


def test_other_urls_and_local_paths(tmp_path, monkeypatch):
    assert (
        normalize_repo("git://127.0.0.1:9418/upstream.git/") == "git://127.0.0.1:9418/upstream.git"
    )
    assert normalize_repo("ssh://git@example.com/x/y.git") == "ssh://git@example.com/x/y.git"
    assert normalize_repo("file:///srv/git/vllm/") == "file:///srv/git/vllm"
    (tmp_path / "repo").mkdir()
    monkeypatch.chdir(tmp_path)
    assert normalize_repo("./repo") == str(tmp_path / "repo")
    assert normalize_repo("repo") == str(
        tmp_path / "repo"
    )  # an existing folder wins over owner/repo
    assert repo_key(str(tmp_path / "repo")) == repo_key(f"file://{tmp_path / 'repo'}")


@pytest.mark.parametrize(
    "spec, needle",
    [
        ("", "empty"),
        ("https://github.com/onlyowner", "OWNER/REPO"),
        ("https://github.com/a/b/c", "OWNER/REPO"),
        ("https://github.com/vllm-project/vllm/pull/40082", "--vllm-pr"),
        ("ftp://example.com/x.git", "unsupported URL scheme"),
        ("https:///nohost/x", "no host"),
        ("file://relative/path", "absolute path"),
        ("./does/not/exist", "no such local path"),
        ("justaword", "not a git URL"),
        ("has space/repo", "whitespace"),
        ("bad!owner/repo", "not a valid GitHub owner/repo"),
    ],
)
def test_malformed_repositories_fail_with_one_line(spec, needle):
    with pytest.raises(SourceError) as err:
        normalize_repo(spec)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_pr_and_commit_urls():
    assert parse_pr_url("https://github.com/vllm-project/vllm/pull/40082") == (GH, 40082)
    assert parse_pr_url("https://github.com/vllm-project/vllm/pull/40082/files") == (GH, 40082)
    assert parse_pr_url("https://github.com/someone/vllm/pull/7#discussion") == (
        "https://github.com/someone/vllm.git",
        7,
    )
    assert parse_pr_url("https://github.com/vllm-project/vllm") is None
    with pytest.raises(SourceError, match="not a PR number"):
        parse_pr_url("https://github.com/vllm-project/vllm/pull/abc")
    with pytest.raises(SourceError, match="not a PR number"):
        parse_pr_url("https://github.com/vllm-project/vllm/pull/0")
    sha = "a" * 40
    assert parse_commit_url(f"https://github.com/vllm-project/vllm/commit/{sha}") == (GH, sha)
    with pytest.raises(SourceError, match="full commit SHA"):
        parse_commit_url("https://github.com/vllm-project/vllm/commit/abc123")


def test_mirror_path_is_keyed_by_repository(git_cache, upstream):
    by_path, by_url = GitMirror(upstream.url), GitMirror(upstream.file_url)
    assert by_path.path == by_url.path and by_path.path.parent == git_cache / "git"
    assert GitMirror(GH).path != by_path.path


def test_refs_resolve_to_commits_and_only_needed_history_is_fetched(git_cache, upstream):
    mirror = GitMirror(upstream.url)
    with mirror.locked():
        assert mirror.fetch_ref("v0.1.0") == upstream.shas["c1"]  # annotated tag, peeled
        assert not mirror.has_commit(upstream.shas["c2"])  # main's later history not fetched
        assert mirror.fetch_ref("v0.1.1") == upstream.shas["r1"]  # lightweight tag
        assert mirror.fetch_ref("release/0.1") == upstream.shas["r1"]  # branch
        assert mirror.fetch_ref("refs/heads/main") == upstream.shas["c5"]
        assert mirror.fetch_ref(upstream.shas["c2"]) == upstream.shas["c2"]  # full SHA
        assert mirror.fetch_pr(PR_CLEAN) == upstream.shas["pr101"]
        assert mirror.default_branch() == "main"


def test_missing_refs_name_the_ref_and_what_to_do(git_cache, upstream):
    mirror = GitMirror(upstream.url)
    with mirror.locked():
        with pytest.raises(
            RefNotFoundError, match=r"ref 'v9\.9\.9' not found .*branch or tag name"
        ):
            mirror.fetch_ref("v9.9.9")
        with pytest.raises(RefNotFoundError, match="full 40-character SHA"):
            mirror.fetch_ref("abc1234")
        with pytest.raises(RefNotFoundError, match=rf"PR #{PR_MISSING} not found"):
            mirror.fetch_pr(PR_MISSING)
        with pytest.raises(RefNotFoundError, match="commit 123456789012 not found"):
            mirror.fetch_sha("1234567890" * 4)


def test_default_branch_follows_the_remote_head(git_cache, upstream):
    upstream.git("symbolic-ref", "HEAD", "refs/heads/release/0.1")
    mirror = GitMirror(upstream.url)
    with mirror.locked():
        assert mirror.fetch_default_branch() == ("release/0.1", upstream.shas["r1"])


def test_fetching_over_git_daemon(git_cache, upstream, daemon_url):
    mirror = GitMirror(daemon_url)
    with mirror.locked():
        assert mirror.fetch_pr(PR_CLEAN) == upstream.shas["pr101"]
        assert mirror.fetch_sha(upstream.shas["c3"]) == upstream.shas["c3"]
        assert mirror.fetch_ref("v0.2.0") == upstream.shas["c4"]
        with pytest.raises(RefNotFoundError, match=f"PR #{PR_MISSING} not found"):
            mirror.fetch_pr(PR_MISSING)


def test_unreachable_remote_fails_without_prompting(git_cache):
    url = f"git://127.0.0.1:{free_port()}/nothing.git"  # nothing listens there
    mirror = GitMirror(url)
    with mirror.locked(), pytest.raises(SourceError, match="cannot reach"):
        mirror.fetch_ref("main")


def test_mirror_lock_excludes_other_processes(git_cache, upstream):
    mirror = GitMirror(upstream.url)
    lock_file = str(mirror.path) + ".lock"
    probe = "import fcntl, sys; fcntl.flock(open(sys.argv[1], 'a+'), fcntl.LOCK_EX | fcntl.LOCK_NB)"
    with mirror.locked():
        assert (
            subprocess.run([sys.executable, "-c", probe, lock_file], capture_output=True).returncode
            != 0
        )
    assert (
        subprocess.run([sys.executable, "-c", probe, lock_file], capture_output=True).returncode
        == 0
    )


def test_concurrent_users_of_one_mirror_both_succeed(git_cache, upstream, tmp_path):
    code = (
        "import sys; from edgevllm.sources.prepare import SourceRequest, prepare_sources; "
        "r = SourceRequest.from_cli('vllm', sys.argv[1], None, None, ['101']); "
        "print(prepare_sources(r, sys.argv[2]).tree_hash)"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, upstream.url, str(tmp_path / f"out{i}")],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    results = [proc.communicate() for proc in procs]
    assert all(proc.returncode == 0 for proc in procs), results
    assert results[0][0] == results[1][0]
