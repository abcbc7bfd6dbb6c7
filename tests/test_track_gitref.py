"""inv track --to REF: the new tree from the git mirror (edgevllm/track/gitref.py), on PyPI's real
vLLM 0.33.0 sdist made into a local git upstream (tag v0.33.0, as tests/test_track_report.py and
tests/e2e/test_subset_real_tree_build_e2e.py make it): a branch that moves the Spark CMake
patch's anchor is a broken fix (exit 21, the patch named); a commit with the same files reports
what the same files as a PyPI release report; an unknown ref or PR is one line and no mirror;
an unreachable remote falls back to the git cache, as the build's fetch would need it."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from edgevllm.cli import program
from edgevllm.common.errors import RefNotFoundError, RefSyntaxError, SourceError
from edgevllm.specs.buildspec import load_spec_file
from edgevllm.track import gitref
from edgevllm.track.render import write_spec
from edgevllm.track.report import FIX_BROKEN, start_of, track
from support.gitfixtures import add_pr, commit, git_daemon, make_upstream_repo
from support.pypiindex import sdist_entry, serve_index, tarball
from support.sdists import sdist_tree_cached

TRACK_FILES = ["CMakeLists.txt", "cmake/", "requirements/", "setup.py", "pyproject.toml",
               "rust-toolchain.toml", "rust/Cargo.toml"]
ANCHOR = 'set(CUDA_SUPPORTED_ARCHS "7.5;8.0;8.6;8.7;8.9;9.0;10.0;11.0;12.0")'


@pytest.fixture
def real_upstream(tmp_path, monkeypatch):
    """(upstream, spec path, commits): the 0.33.0 files at tag v0.33.0 on main; branch ``broken``
    moves the patch's anchor; branch ``docs`` changes only a README."""
    monkeypatch.setenv("EDGEVLLM_CACHE", str(tmp_path / "cache"))
    tree = sdist_tree_cached("vllm", "0.33.0", TRACK_FILES)
    up = make_upstream_repo(tmp_path / "up", tree)
    up.git("tag", "-d", "v0.1.0")  # only the release tag: describe names 0.33.0
    base = up.shas["c1"]
    up.git("update-ref", "refs/tags/v0.33.0", base)
    text = (tree / "CMakeLists.txt").read_text()
    assert ANCHOR in text
    moved = text.replace(ANCHOR, ANCHOR.replace('12.0")', '12.0;13.0")'))
    shas = {"base": base,
            "broken": commit(up, [base], {"CMakeLists.txt": moved}, "arch list grows",
                             ref="refs/heads/broken"),
            "docs": commit(up, [base], {"README.md": "docs only\n"}, "docs",
                           ref="refs/heads/docs")}
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"target: spark\nvllm:\n  repo: {up.url}\n  ref: v0.33.0\n")
    return up, spec, shas


def test_a_branch_that_breaks_the_patch_exits_21_naming_it(real_upstream, capsys):
    up, spec, shas = real_upstream
    with pytest.raises(SystemExit) as exc:
        program().run(["edgevllm", "track", "--from", str(spec), "--to", "broken", "--json"])
    assert exc.value.code == FIX_BROKEN == 21
    report = json.loads(capsys.readouterr().out)
    patch = {p["name"]: p for p in report["patches"]}["vllm-cmake-keep-121a"]
    assert (patch["old"], patch["new"]) == ("applied", "failed")
    assert "CMakeLists.txt" in patch["detail"] and shas["broken"][:12] in patch["detail"]
    assert report["broken"][0].startswith("patch vllm-cmake-keep-121a fails")
    assert report["to"]["commit"] == shas["broken"] and report["to"]["from_cache"] is False
    assert report["from"]["commit"] == shas["base"]
    assert "not applied" in report["rule"]["note"] and report["rule"]["min_age_days"] is None


def test_a_commit_reports_what_the_same_files_as_a_release_report(real_upstream, monkeypatch,
                                                                  tmp_path):
    """``--to <sha>`` of a commit holding the 0.33.0 files (plus a README) against ``--to
    0.33.1``, a PyPI release of the same files (a local index): the same rows."""
    up, spec, shas = real_upstream
    files = {p.relative_to(sdist_tree_cached("vllm", "0.33.0", TRACK_FILES)).as_posix():
             p.read_bytes() for p in sdist_tree_cached("vllm", "0.33.0", TRACK_FILES).rglob("*")
             if p.is_file()}
    now = dt.datetime.now(dt.timezone.utc)
    bodies = {v: tarball(files, f"vllm-{v}") for v in ("0.33.0", "0.33.1")}
    releases = {v: sdist_entry("vllm", v, now - dt.timedelta(days=20), b)
                for v, b in bodies.items()}
    start = start_of(str(spec), None)
    with serve_index("vllm", releases, {f"vllm-{v}.tar.gz": b for v, b in bodies.items()}) as url:
        monkeypatch.setenv("EDGEVLLM_PYPI_URL", url)
        by_release = track(start, "0.33.1", 7)
        by_sha = track(start, shas["docs"], 7)
    assert by_sha["to"]["vllm"] == f"0.33.0+1.g{shas['docs'][:12]}"
    out = tmp_path / "bumped.yaml"  # the bumped spec pins the ref's commit in its repository
    write_spec(by_sha, start, out)
    bumped = load_spec_file(out)
    assert (bumped.vllm.ref, bumped.vllm.repo) == (shas["docs"], up.url)
    for report in (by_release, by_sha):
        report["patches"] = [(p["name"], p["old"], p["new"]) for p in report["patches"]]
        report["mods"] = [(m["name"], m["verdict"]) for m in report["mods"]]
    for key in ("patches", "mods", "pins", "plan", "requirements", "picks", "exit_code"):
        assert by_sha[key] == by_release[key], key
    assert by_sha["patches"] and by_sha["plan"]["changes"] == []


def test_the_commit_the_image_is_built_from_is_nothing_to_do(real_upstream):
    _, spec, shas = real_upstream
    report = track(start_of(str(spec), None), shas["base"], 7)
    assert report["exit_code"] == 0 and report["to"] is None
    assert shas["base"][:12] in report["verdict"]


def test_an_unknown_ref_or_pr_is_one_line_and_no_mirror(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEVLLM_CACHE", str(tmp_path / "cache"))
    up = make_upstream_repo(tmp_path / "up")
    with pytest.raises(RefNotFoundError, match="has no branch or tag 'nosuch'"):
        gitref.resolve("nosuch", up.url)
    with pytest.raises(RefNotFoundError, match="has no PR #4242"):
        gitref.resolve("pr:4242", up.url)
    with pytest.raises(RefSyntaxError, match="is not a branch, tag or commit name"):
        gitref.resolve("a..b", up.url)
    with pytest.raises(SourceError, match="cannot reach .*and the git cache has no mirror"):
        gitref.resolve("main", "git://127.0.0.1:9/nobody.git")  # no network: nothing made
    assert not (tmp_path / "cache").exists()


def test_a_pr_and_the_git_cache_when_the_remote_is_gone(tmp_path, monkeypatch):
    """A git daemon on 127.0.0.1 stands in for GitHub; once it stops, what was fetched is
    resolved from the git cache, and what was not is one line."""
    monkeypatch.setenv("EDGEVLLM_CACHE", str(tmp_path / "cache"))
    up = make_upstream_repo(tmp_path / "up")
    head = add_pr(up, 7, {"CMakeLists.txt": "project(x)\n"}, base="v0.2.0")
    with git_daemon(up.path.parent) as base:
        url = f"{base}/{up.path.name}"
        got = gitref.resolve("pr:7", url)
        assert (got.commit, got.pr, got.cached) == (head, 7, False)
        assert got.version.startswith("0.2.0+1.g")
        assert gitref.resolve("v0.2.0", url).version == "0.2.0"
    dest = tmp_path / "tree"
    assert got.fill(dest) == (0, len("project(x)\n")) and (dest / "CMakeLists.txt").is_file()
    assert not (dest / "src").exists()  # only what track reads
    cached = gitref.resolve("#7", url)
    assert (cached.commit, cached.cached) == (head, True)
    assert "git cache" in gitref.describe(cached)
    assert gitref.resolve("v0.2.0", url).cached is True
    with pytest.raises(SourceError, match="the git cache has no main"):
        gitref.resolve("main", url)


def test_release_words_and_refs():
    assert all(gitref.is_release_word(w) for w in ("latest", "0.33.0", "v0.33.0", "0.7.2.post1"))
    assert not any(gitref.is_release_word(w) for w in ("main", "pr:1", "a" * 40, "v0.33.x"))
