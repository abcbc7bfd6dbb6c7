"""inv track's PyPI side against a real local index (an HTTP server on 127.0.0.1 serving the JSON
API's shape and real tarballs): the bump rule, an unknown or yanked release, no network, a sdist
whose bytes are not PyPI's sha256, and what a sdist's reading takes out of it."""

from __future__ import annotations

import datetime as dt
import socket
from pathlib import Path

import pytest

from edgevllm.cli import program
from edgevllm.common.errors import DownloadError, RefNotFoundError, SourceError
from edgevllm.track import pypi
from support.pypiindex import sdist_entry, serve_index, tarball

NOW = dt.datetime(2026, 11, 29, tzinfo=dt.timezone.utc)


def _tarball(files: dict[str, bytes], top: str = "vllm-9.9.9") -> bytes:
    return tarball(files, top)


def _entry(version: str, days_old: float, body: bytes, yanked: bool = False,
           sha: str | None = None) -> list[dict]:
    return sdist_entry("vllm", version, NOW - dt.timedelta(days=days_old), body, yanked, sha)


@pytest.fixture()
def index(monkeypatch, tmp_path):
    """A local index: 0.32.0 (50 days), 0.33.0 (27 days), 0.33.1 (yanked), 0.34.0 (2 days),
    0.35.0rc1, and 0.36.0 whose bytes are not its published sha256."""
    body = _tarball({"CMakeLists.txt": b"set(CUTLASS_REVISION \"v4.7.1\")\n",
                     "requirements/cuda.txt": b"torch==2.14.0\n", "csrc/big.cu": b"x" * 100,
                     "../escape": b"no"})
    releases = {"0.32.0": _entry("0.32.0", 50, body), "0.33.0": _entry("0.33.0", 27, body),
                "0.33.1": _entry("0.33.1", 20, body, yanked=True),
                "0.34.0": _entry("0.34.0", 2, body), "0.35.0rc1": _entry("0.35.0rc1", 30, body),
                "0.36.0": _entry("0.36.0", 9, body, sha="0" * 64)}
    files = {f"vllm-{v}.tar.gz": body for v in releases}
    with serve_index("vllm", releases, files) as url:
        monkeypatch.setenv("EDGEVLLM_PYPI_URL", url)
        monkeypatch.setenv("EDGEVLLM_CACHE", str(tmp_path / "cache"))
        yield body


def test_the_bump_rule_takes_final_unyanked_releases_old_enough(index):
    found = pypi.releases()
    assert set(found) == {"0.32.0", "0.33.0", "0.33.1", "0.34.0", "0.35.0rc1", "0.36.0"}
    assert [r.version for r in pypi.candidates(found, "0.32.0", NOW, 7)] == ["0.33.0", "0.36.0"]
    assert pypi.pick(found, "latest", "0.32.0", NOW, 30) is None  # none 30 days old after 0.32
    assert getattr(pypi.pick(found, "latest", "0.32.0", NOW, 0), "version", None) == "0.36.0"
    assert getattr(pypi.pick(found, "v0.33.0", "0.32.0", NOW, 7), "version", None) == "0.33.0"


@pytest.mark.parametrize("to, error, words", [
    ("0.99.0", RefNotFoundError, "vLLM has no release 0.99.0"),
    ("0.33.1", SourceError, "was yanked from PyPI (broken wheel)"),
    ("0.34.0", SourceError, "under --min-age-days 7"),
])
def test_an_unknown_yanked_or_young_release_is_one_line(index, to, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        pypi.pick(pypi.releases(), to, "0.32.0", NOW, 7)


def test_a_sdist_is_kept_only_with_its_published_sha256(index, tmp_path):
    found = pypi.releases()
    path, got = pypi.sdist(found["0.33.0"])
    assert got == len(index) and path.read_bytes() == index
    assert pypi.sdist(found["0.33.0"]) == (path, 0)  # cached by sha256
    with pytest.raises(DownloadError, match="do not have the sha256 PyPI publishes"):
        pypi.sdist(found["0.36.0"])
    assert not list((tmp_path / "cache" / "sdists" / ("0" * 64)).iterdir())  # nothing kept


def test_a_sdist_gives_only_the_files_track_reads(index, tmp_path):
    path, _ = pypi.sdist(pypi.releases()["0.33.0"])
    dest = tmp_path / "tree"
    dest.mkdir()
    with pytest.raises(SourceError, match="escape"):  # a member that climbs out: refused
        pypi.extract_tree(path, dest)
    dest = tmp_path / "tree2"
    dest.mkdir()
    clean = tmp_path / "clean.tar.gz"
    clean.write_bytes(_tarball({"CMakeLists.txt": b"a", "csrc/x.cu": b"b", "setup.py": b"c"}))
    assert pypi.extract_tree(clean, dest) == 2
    assert sorted(p.name for p in dest.rglob("*") if p.is_file()) == ["CMakeLists.txt",
                                                                      "setup.py"]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("to, code, words", [
    ("0.99.0", 5, "no release 0.99.0"),
    ("0.33.1", 5, "yanked"),
    (None, 5, "PyPI's release list of vllm"),  # no network: nobody listens
])
def test_bad_releases_and_no_network_are_one_line_and_write_nothing(index, tmp_path, monkeypatch,
                                                                     capsys, to, code, words):
    if to is None:
        monkeypatch.setenv("EDGEVLLM_PYPI_URL", f"http://127.0.0.1:{_closed_port()}/pypi")
    spec = tmp_path / "spec.yaml"
    spec.write_text("target: spark\nvllm:\n  ref: v0.32.0\n")
    out = tmp_path / "new.yaml"
    with pytest.raises(SystemExit) as exc:
        program().run(["edgevllm", "track", "--from", str(spec), "--to", to or "latest",
                       "--write-spec", str(out)])
    err = capsys.readouterr().err
    assert exc.value.code == code, err
    assert words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists() and not list(Path(tmp_path).glob("*.tmp*"))
