"""Where ``inv track`` reads a new tree from, given what it should not trust: PyPI's JSON API
answered in shapes that are not PyPI's (a local index on 127.0.0.1), an sdist whose members are
links or not a tarball at all, and a git commit holding links, submodules and files over the
bound (a real bare repository). Each is one of edgevllm's own errors naming the file, or is
skipped, never a traceback and never a file written outside the folder asked for."""

from __future__ import annotations

import contextlib
import datetime as dt
import gzip
import io
import json
import tarfile
from pathlib import Path
from typing import Iterator

import pytest

from edgevllm.common.errors import DownloadError, SourceError
from edgevllm.sources.gitcache import GitMirror
from edgevllm.track import gitref, pypi
from support.gitfixtures import Upstream, make_upstream_repo
from support.localhttp import serve_pages
from support.pypiindex import sdist_entry, serve_index, tarball

NOW = dt.datetime(2026, 11, 29, tzinfo=dt.timezone.utc)
_IDENTITY = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
             "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}


@contextlib.contextmanager
def _serve_json(monkeypatch, document: object) -> Iterator[None]:
    """PyPI's JSON endpoint answering ``document`` (bytes as they are, anything else as JSON)."""
    body = document if isinstance(document, bytes) else json.dumps(document).encode()
    with serve_pages({"/pypi/vllm/json": body}) as base:
        monkeypatch.setenv("EDGEVLLM_PYPI_URL", f"{base}/pypi/")  # a trailing slash is dropped
        yield


@pytest.mark.parametrize(("document", "said"), [
    (b"<html>not json</html>", "/pypi/vllm/json"),
    ([1, 2, 3], "no 'releases' mapping; is it PyPI's JSON API?"),
    ({"releases": ["0.33.0"]}, "no 'releases' mapping"),
    ({"info": {}}, "no 'releases' mapping"),
], ids=["html", "list", "releases-list", "no-releases"])
def test_an_answer_that_is_not_pypis_release_list_is_one_line(monkeypatch, document, said):
    with _serve_json(monkeypatch, document), pytest.raises(SourceError) as raised:
        pypi.releases()
    assert said in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.parametrize("broken", [
    {"digests": {}},
    {"digests": {"sha256": "ABC"}},
    {"digests": {"sha256": "g" * 64}},
    {"upload_time_iso_8601": "yesterday"},
    {"upload_time_iso_8601": None},
    {"filename": None, "digests": None},
], ids=["no-sha", "short-sha", "not-hex", "bad-time", "no-time", "no-digests"])
def test_an_sdist_entry_without_its_facts_names_the_release(monkeypatch, broken):
    entry = sdist_entry("vllm", "0.33.0", NOW, b"body")
    entry[1].update(broken)
    with _serve_json(monkeypatch, {"releases": {"0.33.0": entry}}), \
            pytest.raises(SourceError, match="release 0.33.0's sdist entry lacks a sha256"):
        pypi.releases()


def test_odd_entries_are_skipped_and_urls_and_times_read_as_a_mirror_writes_them(monkeypatch):
    """Versions that are no version word, wheels only, entries of the wrong type: skipped. A
    relative file URL is resolved against the index, an upload time without a zone is UTC."""
    good = sdist_entry("vllm", "0.33.0", NOW, b"body")
    good[1]["upload_time_iso_8601"] = "2026-11-01T00:00:00"  # no zone
    good[1]["filename"] = "../../evil/vllm-0.33.0.tar.gz"  # a name is its last part only
    releases = {"0.33.0": good, "0.34.0": [good[0]], "0.35.0": "nope", "0.36.0": [7, None],
                "1.0 && rm -rf /": sdist_entry("vllm", "1.0", NOW, b"x"),
                "0.37.0": [{"packagetype": "sdist", "digests": []}]}
    with _serve_json(monkeypatch, {"releases": releases}), \
            pytest.raises(SourceError, match="0.37.0"):
        pypi.releases()  # an sdist entry without its facts is not skipped
    del releases["0.37.0"]
    with _serve_json(monkeypatch, {"releases": releases}):
        found = pypi.releases()
    assert list(found) == ["0.33.0"]
    release = found["0.33.0"]
    assert release.filename == "vllm-0.33.0.tar.gz"
    assert release.url.startswith("http://127.0.0.1:") and release.url.endswith(
        "/files/vllm-0.33.0.tar.gz") and "/pypi/" not in release.url
    assert release.uploaded == dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    assert release.age_days(NOW) == 28


def _release(version: str, days_old: float, yanked: bool = False) -> pypi.Release:
    return pypi.Release(version, f"vllm-{version}.tar.gz", "http://127.0.0.1:9/x", "0" * 64, 1,
                        NOW - dt.timedelta(days=days_old), yanked)


def test_the_bump_rule_skips_pre_dev_and_post_base_versions_and_sorts_by_version():
    found = {v: _release(v, 30) for v in ("0.10.0", "0.9.0", "0.11.0.dev3", "0.11.0b1",
                                          "0.9.1", "0.8.0", "weird")}
    assert [r.version for r in pypi.candidates(found, "0.8.0", NOW, 7)] == [
        "0.9.0", "0.9.1", "0.10.0"]  # 0.10 after 0.9.1: versions, not strings
    # A current version that is no version (a commit's describe of a fork) bounds nothing.
    assert [r.version for r in pypi.candidates(found, "main", NOW, 7)] == [
        "0.8.0", "0.9.0", "0.9.1", "0.10.0"]
    assert pypi.candidates(found, "0.10.0", NOW, 7) == []
    assert pypi.pick(found, "latest", "0.10.0", NOW, 7) is None


def test_an_unknown_release_names_the_newest_by_version():
    found = {v: _release(v, 30) for v in ("0.9.0", "0.10.0", "0.2.0", "0.11.0")}
    with pytest.raises(Exception, match=r"newest: 0\.9\.0, 0\.10\.0, 0\.11\.0\)"):
        pypi.pick(found, "0.99.0", "0.2.0", NOW, 7)


def _tar_gz(members: list[tarfile.TarInfo], data: dict[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for info in members:
            body = data.get(info.name)
            if body is not None:
                info.size = len(body)
            tar.addfile(info, io.BytesIO(body) if body is not None else None)
    return raw.getvalue()


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info


@pytest.mark.parametrize(("member", "said"), [
    (_link("vllm-1/CMakeLists.txt", "/etc/passwd"), "is a link"),
    (_link("vllm-1/requirements/x.txt", "vllm-1/setup.py", tarfile.LNKTYPE), "is a link"),
    (_link("vllm-1/cmake/fifo", "", tarfile.FIFOTYPE), "a device file or a FIFO"),
], ids=["symlink", "hardlink", "fifo"])
def test_an_sdist_member_that_is_no_regular_file_is_refused(tmp_path, member, said):
    path = tmp_path / "vllm-1.tar.gz"
    path.write_bytes(_tar_gz([member], {}))
    dest = tmp_path / "tree"
    dest.mkdir()
    with pytest.raises(SourceError, match=said) as raised:
        pypi.extract_tree(path, dest)
    assert str(raised.value).startswith("vllm-1.tar.gz: ")
    assert list(dest.iterdir()) == []


@pytest.mark.parametrize("data", [b"", b"plain text", gzip.compress(b"not a tar" * 100),
                                  gzip.compress(b"x" * 1000)[:30]],
                         ids=["empty", "text", "gzip-not-tar", "cut-gzip"])
def test_a_file_that_is_no_tarball_is_one_line_naming_it(tmp_path, data):
    path = tmp_path / "vllm-2.tar.gz"
    path.write_bytes(data)
    dest = tmp_path / "tree"
    dest.mkdir()
    with pytest.raises(SourceError) as raised:
        pypi.extract_tree(path, dest)
    assert str(raised.value).startswith("vllm-2.tar.gz: ") and "\n" not in str(raised.value)
    assert list(dest.iterdir()) == []


def test_a_member_over_the_bound_is_refused_before_it_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(pypi, "MEMBER_MAX_BYTES", 10)
    path = tmp_path / "vllm-3.tar.gz"
    path.write_bytes(tarball({"setup.py": b"x" * 11}, "vllm-3"))
    dest = tmp_path / "tree"
    dest.mkdir()
    with pytest.raises(SourceError, match="declares 11 bytes"):
        pypi.extract_tree(path, dest)
    assert not (dest / "setup.py").exists()


def test_prefixes_match_names_from_the_top_folder_not_anywhere(tmp_path):
    path = tmp_path / "vllm-4.tar.gz"
    path.write_bytes(tarball({"docs/CMakeLists.txt": b"a", "CMakeLists.txt.bak": b"b",
                              "tools/x.sh": b"c", "toolsmith": b"d"}, "vllm-4"))
    dest = tmp_path / "tree"
    dest.mkdir()
    pypi.extract_tree(path, dest)
    found = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    # "CMakeLists.txt" is a prefix, so its .bak comes too; "tools/" is a folder, so "toolsmith"
    # does not; nothing outside the top folder's own names.
    assert found == ["CMakeLists.txt.bak", "tools/x.sh"]


def test_a_release_tree_is_read_once_and_copied_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEVLLM_CACHE", str(tmp_path / "cache"))
    body = tarball({"CMakeLists.txt": b"project(v)\n", "csrc/x.cu": b"y" * 50}, "vllm-5.0.0")
    entry = sdist_entry("vllm", "5.0.0", NOW - dt.timedelta(days=30), body)
    with serve_index("vllm", {"5.0.0": entry}, {"vllm-5.0.0.tar.gz": body}) as url:
        monkeypatch.setenv("EDGEVLLM_PYPI_URL", url)
        release = pypi.releases()["5.0.0"]
        downloaded, read = pypi.release_tree(release, tmp_path / "a")
    assert downloaded == len(body) and read >= len(body) + len(b"project(v)\n")
    assert (tmp_path / "a" / "CMakeLists.txt").read_bytes() == b"project(v)\n"
    assert not (tmp_path / "a" / "csrc").exists()
    # The server is gone: the second tree comes from the cache alone, nothing downloaded.
    downloaded, _ = pypi.release_tree(release, tmp_path / "b")
    assert downloaded == 0 and (tmp_path / "b" / "CMakeLists.txt").is_file()


# --- a git commit's files ------------------------------------------------------------------
def _tree_with(up: Upstream, tmp: Path, entries: list[tuple[str, str, bytes]]) -> str:
    """A commit whose tree is exactly ``entries`` (mode, path, bytes; a gitlink's bytes are the
    commit it pins)."""
    env = {"GIT_INDEX_FILE": str(tmp / "index")}
    for mode, path, data in entries:
        obj = (data.decode() if mode == "160000" else
               up.git("hash-object", "-w", "--stdin", input=data))
        up.git("update-index", "--add", "--cacheinfo", f"{mode},{obj},{path}", env=env)
    tree = up.git("write-tree", env=env)
    sha = up.git("commit-tree", tree, "-m", "odd tree", env=_IDENTITY)
    up.git("update-ref", "refs/heads/odd", sha)
    return sha


def _mirror_of(up: Upstream, tmp: Path, monkeypatch) -> GitMirror:
    """The git cache's mirror of ``up`` (under ``tmp``), holding branch ``odd``."""
    monkeypatch.setenv("EDGEVLLM_CACHE", str(tmp / "cache"))
    mirror = GitMirror(up.url)
    with mirror.locked():
        mirror.fetch_ref("odd")
    return mirror


def test_a_commits_links_and_submodules_are_not_read(tmp_path, monkeypatch):
    up = make_upstream_repo(tmp_path / "up")
    sha = _tree_with(up, tmp_path, [("100644", "CMakeLists.txt", b"project(y)\n"),
                          ("100755", "tools/run.sh", b"#!/bin/sh\n"),
                          ("120000", "setup.py", b"/etc/passwd"),
                          ("160000", "cmake/sub", up.shas["c1"].encode()),
                          ("100644", "src/other.py", b"x = 1\n")])
    dest = tmp_path / "tree"
    written = gitref.copy_tree(_mirror_of(up, tmp_path, monkeypatch), sha, dest)
    files = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if not p.is_dir())
    assert files == ["CMakeLists.txt", "tools/run.sh"]
    assert written == len(b"project(y)\n") + len(b"#!/bin/sh\n")
    assert not (dest / "setup.py").is_symlink()


def test_a_commits_file_over_the_bound_is_one_line_naming_it(tmp_path, monkeypatch):
    up = make_upstream_repo(tmp_path / "up")
    sha = _tree_with(up, tmp_path, [("100644", "requirements/cuda.txt", b"x" * 64)])
    monkeypatch.setattr(gitref, "MEMBER_MAX_BYTES", 32)
    with pytest.raises(SourceError, match=r"'requirements/cuda.txt' is outside the tree or over"):
        gitref.copy_tree(_mirror_of(up, tmp_path, monkeypatch), sha, tmp_path / "tree")
    assert not (tmp_path / "tree" / "requirements" / "cuda.txt").exists()


def test_the_files_of_a_commit_together_are_bounded(tmp_path, monkeypatch):
    up = make_upstream_repo(tmp_path / "up")
    sha = _tree_with(up, tmp_path, [("100644", f"cmake/{n}.cmake", b"y" * 20) for n in range(4)])
    monkeypatch.setattr(gitref, "SDIST_MAX_BYTES", 50)
    with pytest.raises(SourceError, match="the files track reads exceed"):
        gitref.copy_tree(_mirror_of(up, tmp_path, monkeypatch), sha, tmp_path / "tree")


def test_describe_names_the_asked_ref_its_commit_and_where_it_came_from():
    tree = gitref.GitTree("pr:12", "https://github.com/vllm-project/vllm.git", "a" * 40,
                          "0.33.0+3.gaaaaaaaaaaaa", cached=False, pr=12)
    line = gitref.describe(tree)
    assert line.startswith("pr:12 = aaaaaaaaaaaa (0.33.0+3.gaaaaaaaaaaaa) from ")
    assert "vllm-project/vllm" in line and "git cache" not in line


def test_a_sdist_over_its_bound_is_cut_off_one_line_and_nothing_is_kept(tmp_path, monkeypatch):
    """A mirror serving more than an sdist may hold: the download stops at the bound, says what
    it was fetching, and leaves no file in the cache slot (not even a partial one)."""
    monkeypatch.setenv("EDGEVLLM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(pypi, "SDIST_MAX_BYTES", 1000)
    body = b"x" * 5000
    entry = sdist_entry("vllm", "6.0.0", NOW - dt.timedelta(days=30), body)
    with serve_index("vllm", {"6.0.0": entry}, {"vllm-6.0.0.tar.gz": body}) as url:
        monkeypatch.setenv("EDGEVLLM_PYPI_URL", url)
        release = pypi.releases()["6.0.0"]
        with pytest.raises(DownloadError) as raised:
            pypi.sdist(release)
    assert "the sdist vllm-6.0.0.tar.gz" in str(raised.value) and "\n" not in str(raised.value)
    slot = tmp_path / "cache" / "sdists" / release.sha256
    assert list(slot.iterdir()) == []


def test_a_release_tree_of_a_sdist_that_is_no_tarball_keeps_no_tree(tmp_path, monkeypatch):
    """An sdist whose bytes match PyPI's sha256 but are no tarball: one line, and no half tree
    is kept under the sha256 for the next run to trust."""
    monkeypatch.setenv("EDGEVLLM_CACHE", str(tmp_path / "cache"))
    body = b"\x1f\x8b not really gzip"
    entry = sdist_entry("vllm", "7.0.0", NOW - dt.timedelta(days=30), body)
    with serve_index("vllm", {"7.0.0": entry}, {"vllm-7.0.0.tar.gz": body}) as url:
        monkeypatch.setenv("EDGEVLLM_PYPI_URL", url)
        release = pypi.releases()["7.0.0"]
        with pytest.raises(SourceError, match="vllm-7.0.0.tar.gz: not a readable .tar.gz"):
            pypi.release_tree(release, tmp_path / "tree")
    assert not (tmp_path / "cache" / "sdist-trees" / release.sha256).exists()
    assert not (tmp_path / "tree").exists()
