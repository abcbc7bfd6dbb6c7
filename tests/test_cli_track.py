"""``inv track`` as a user runs it (cli/track.py), in this process through the CLI's entry,
against a local PyPI index on 127.0.0.1 listing vLLM 0.32.0 and 0.33.0 with their real sdists'
sha256 (the sdists themselves are PyPI's, from the test cache, placed where track looks for them:
nothing is downloaded). The exit code says the verdict (0 nothing to do, 20 rebuild
recommended); ``--json`` is the report, ``--markdown`` its table; ``--write-spec`` writes the
bumped spec or says why not. Flags that cannot go together, and a spec folder that is not there,
are one line before PyPI is asked anything."""

from __future__ import annotations

import datetime as dt
import json
import socket
from pathlib import Path

import pytest
import yaml

from edgevllm.specs.buildspec import load_spec_file
from support.inprocess import exit_code, one_error, own_user_folders, run_cli
from support.pypiindex import sdist_entry, serve_index
from support.sdists import into_track_cache

NOW = dt.datetime.now(dt.timezone.utc)


@pytest.fixture
def work(tmp_path, monkeypatch) -> Path:
    own_user_folders(tmp_path, monkeypatch)
    monkeypatch.setenv("EDGEVLLM_CACHE", str(tmp_path / "cache"))
    (tmp_path / "spec.yaml").write_text("target: spark\nvllm:\n  ref: v0.32.0\n")
    return tmp_path


def _entry(version: str, days_old: int) -> list[dict]:
    _, digest = into_track_cache("vllm", version)
    return sdist_entry("vllm", version, NOW - dt.timedelta(days=days_old), b"", sha=digest)


@pytest.fixture
def index(work, monkeypatch):
    """The index: 0.32.0 (60 days old) and 0.33.0 (30 days old)."""
    releases = {"0.32.0": _entry("0.32.0", 60), "0.33.0": _entry("0.33.0", 30)}
    with serve_index("vllm", releases, {}) as url:
        monkeypatch.setenv("EDGEVLLM_PYPI_URL", url)
        yield releases


def _out(capsys, argv: list[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    code = exit_code(argv)
    got = capsys.readouterr()
    return code, got.out, got.err


def test_a_newer_release_is_exit_20_its_json_report_and_the_bumped_spec(work, index, capsys,
                                                                        monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    bumped = work / "bumped.yaml"
    code, out, err = _out(capsys, ["track", "--from", str(work / "spec.yaml"), "--json",
                                   "--write-spec", str(bumped)])
    assert code == 20, err
    report = json.loads(out)
    assert report["exit_code"] == 20 and report["to"]["vllm"] == "0.33.0"
    assert report["from"] == {"origin": str(work / "spec.yaml"), "target": "spark",
                              "vllm": "0.32.0"}
    assert report["rule"] == {"to": "latest", "min_age_days": 7}
    assert f"wrote {bumped}: vLLM 0.33.0; dropped mods: none" in err
    assert yaml.safe_load(bumped.read_text())["vllm"]["ref"] == "v0.33.0"
    assert load_spec_file(bumped).target == "spark"


def test_the_markdown_is_the_reports_table(work, index, capsys, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    code, out, err = _out(capsys, ["track", "--from", str(work / "spec.yaml"), "--to", "0.33.0",
                                   "--markdown"])
    assert code == 20, err
    assert "| pin | torch | 2.13.0 → 2.14.0 |" in out
    assert "| patch | vllm-cmake-keep-121a | applied → applied |" in out
    assert not out.lstrip().startswith("{")


def test_no_release_old_enough_is_nothing_to_do_and_writes_no_spec(work, index, capsys,
                                                                  monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    bumped = work / "bumped.yaml"
    code, out, err = _out(capsys, ["track", "--from", str(work / "spec.yaml"), "--min-age-days",
                                   "45", "--json", "--write-spec", str(bumped)])
    assert code == 0, err
    report = json.loads(out)
    assert report["to"] is None and report["exit_code"] == 0
    assert "no newer vLLM release 45+ days old than 0.32.0" in report["verdict"]
    assert f"--write-spec: nothing to bump; {bumped} not written" in err
    assert not bumped.exists()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize(("argv", "code", "said"), [
    (["--json", "--markdown"], 2, "--json and --markdown: give one of them"),
    (["--write-spec", "nofolder/new.yaml"], 2, "--write-spec nofolder/new.yaml: no folder "
                                               "nofolder"),
    (["--min-age-days", "-1"], 2, "--min-age-days"),
    (["--to", "a..b"], 2, "--to a..b"),
], ids=["json-and-markdown", "no-folder", "negative-age", "bad-ref"])
def test_what_cannot_be_meant_is_one_line_before_pypi_is_asked(work, capsys, monkeypatch, argv,
                                                              code, said):
    monkeypatch.setenv("EDGEVLLM_PYPI_URL", f"http://127.0.0.1:{_closed_port()}/pypi")
    got, err = run_cli(capsys, monkeypatch, "track", "--from", str(work / "spec.yaml"), *argv)
    assert got == code, err
    assert said in one_error(err)
    assert not (work / "cache" / "sdists").exists()


def test_neither_a_start_nor_a_target_is_one_line(work, capsys, monkeypatch):
    got, err = run_cli(capsys, monkeypatch, "track")
    assert got == 2, err
    assert one_error(err) == "error: no --from LOCK|SPEC and no --target: give one"
