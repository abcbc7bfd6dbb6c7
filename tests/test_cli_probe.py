"""``inv probe`` as a user runs it (cli/probe.py), in this process through the CLI's entry: what
it refuses before an engine is asked (two engines named, a level that is none, a token given as
a value on the command line where it would sit in argv and the probe's record, a pair that is no
KEY=VALUE), each one line with exit 2 and nothing written. The probe itself, against images, is
tests/test_probe_level1.py and tests/test_probe_level2.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.inprocess import one_error, own_user_folders, run_cli

UNREACHABLE = "ssh://nobody@127.0.0.1:1"  # an engine a refusal must never reach


@pytest.fixture
def work(tmp_path, monkeypatch) -> Path:
    own_user_folders(tmp_path, monkeypatch)
    return tmp_path


def _probe(capsys, monkeypatch, *argv: str) -> tuple[int, str]:
    return run_cli(capsys, monkeypatch, "probe", "--image", "edgevllm/vllm:spark", "--target",
                   "spark", "--json", "result.json", *argv)


def test_an_engine_and_a_context_together_are_one_line(work, capsys, monkeypatch):
    code, err = _probe(capsys, monkeypatch, "--engine", UNREACHABLE, "--context", "other")
    assert code == 2, err
    assert one_error(err) == "error: --engine and --context: give one of them"
    assert not (work / "result.json").exists()


@pytest.mark.parametrize("level", ["0", "3", "1.5", "two"])
def test_a_level_that_is_none_is_one_line_naming_the_flag(work, capsys, monkeypatch, level):
    code, err = _probe(capsys, monkeypatch, "--level", level, "--engine", UNREACHABLE)
    assert code == 2, err
    assert f"--level '{level}'" in one_error(err) or "--level" in one_error(err)


@pytest.mark.parametrize("pair", ["HF_TOKEN=hf_" + "a" * 34, "MY_API_KEY=sk-" + "b" * 40,
                                  "GITHUB_TOKEN=ghp_" + "c" * 36])
def test_a_secret_given_as_an_env_value_is_refused_and_never_echoed(work, capsys, monkeypatch,
                                                                    pair):
    code, err = _probe(capsys, monkeypatch, "--level", "2", "--env", pair, "--engine",
                       UNREACHABLE)
    assert code == 2, err
    line = one_error(err)
    assert line.startswith("error: --env: ") and "export HF_TOKEN in the environment" in line
    assert pair.split("=", 1)[1] not in err  # the value itself is not printed
    assert not (work / "result.json").exists()


@pytest.mark.parametrize("pair", ["NOVALUE", "=x", "A B=1", "1X=1", "X=a\nb", "X=a\x1b[2J"],
                         ids=["no-value", "no-name", "space-name", "digit-name", "newline",
                              "escape"])
def test_an_env_that_is_no_pair_is_one_line(work, capsys, monkeypatch, pair):
    """Found by this test: a name that is no environment variable name ('A B') or a value
    with a newline went on to the engine's ``docker run -e`` instead of one line here."""
    code, err = _probe(capsys, monkeypatch, "--level", "2", "--env", pair, "--engine",
                       UNREACHABLE)
    assert code == 2, err
    assert "--env" in one_error(err)


@pytest.mark.parametrize(("flag", "value"), [("--port", "0"), ("--port", "65536"),
                                             ("--timeout", "-5"), ("--timeout", "inf")])
def test_numbers_are_read_before_the_engine(work, capsys, monkeypatch, flag, value):
    code, err = _probe(capsys, monkeypatch, "--level", "2", flag, value, "--engine",
                       UNREACHABLE)
    assert code == 2, err
    assert flag in one_error(err)
