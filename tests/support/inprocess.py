"""The CLI run in this process, through its own entry (``edgevllm.cli.program``), as a user's
``inv``/``edgevllm`` line runs it: the exit code it ends with and what it said on stderr. Faster
than a subprocess (the ``cli`` fixture of conftest.py) and it sees what a test put in place in
this process (a stand-in reader, an environment); the bad-input and property tests use it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from invoke import Program


def exit_code(argv: list[str], program: Program | None = None) -> int:
    """``edgevllm ARGV`` (or ARGV of another Invoke ``program``) run to its end: 0, or the code
    its SystemExit carries (1 for a message)."""
    from edgevllm.cli import program as edgevllm_program

    try:
        (program or edgevllm_program()).run(["edgevllm", *argv])
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    return 0


def run_cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch | None,
            *argv: str) -> tuple[int, str]:
    """``edgevllm ARGV``: its exit code and its stderr alone (what came before is dropped).
    With ``monkeypatch``, ``sys.argv`` is the line and colour is off, as in a terminal that a
    test reads."""
    if monkeypatch is not None:
        monkeypatch.setattr(sys, "argv", ["edgevllm", *argv])
        monkeypatch.setenv("NO_COLOR", "1")
    capsys.readouterr()
    code = exit_code(list(argv))
    return code, capsys.readouterr().err


def one_error(err: str) -> str:
    """The one ``error:`` line a refused command printed on stderr ``err``; fails the test on a
    traceback or on any other number of error lines."""
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, f"not one error line: {err!r}"
    return errors[0]


def own_user_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The user's folders ($XDG_CONFIG_HOME: their recipes and mods) are the test's, colour is
    off and the test runs in ``tmp_path``: nothing of this machine's user is read or written."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.chdir(tmp_path)
