"""cli/_common.py: what every task shares, through a real Invoke program of throwaway tasks
wrapped with ``cli_task`` (as edgevllm's own are): an edgevllm error is ``error: <one line>`` and
its class's exit code, Ctrl-C is exit 130 saying nothing was left under a final name, a reader
a path the system refuses is one line naming it, a required
flag, a flag read as a positional and a NUL byte are refused by name before the task runs, and an
error that is none of these is not hidden."""

from __future__ import annotations

import errno

import pytest
from invoke import Collection, Program

from edgevllm.cli._common import cli_task, path_refused
from edgevllm.common.errors import ConfigError, MissingInputError, VerifyError
from support.inprocess import exit_code

RAN: list[str] = []


@cli_task(help={"what": "which failure to raise"})
def fail(c, what):
    RAN.append(what)
    failures: dict[str, BaseException] = {
        "config": ConfigError("bad field\nRUN id"),
        "verify": VerifyError("a unit below native"),
        "interrupt": KeyboardInterrupt(),
        "odd name": OSError(errno.ENOENT, "No such file", b"caf\xe9\n.txt"),
        "long path": OSError(errno.ENAMETOOLONG, "File name too long", "a/" * 200 + "b"),
        "not a folder": OSError(errno.ENOTDIR, "Not a directory", "file/inside"),
        "disk": OSError(errno.EIO, "Input/output error", "disk"),
    }
    raise failures[what]


@cli_task(positional=["path"], help={"path": "a file"})
def takes(c, path, name=None):
    RAN.append(f"takes {path} {name}")


def program() -> Program:
    return Program(namespace=Collection(fail, takes), name="t", binary="t")


def run(capsys, *argv: str) -> tuple[int, str]:
    RAN.clear()
    capsys.readouterr()
    code = exit_code(list(argv), program())
    return code, capsys.readouterr().err


@pytest.mark.parametrize(("what", "code", "line"), [
    ("config", ConfigError.exit_code, "error: bad field RUN id"),
    ("verify", VerifyError.exit_code, "error: a unit below native"),
    ("interrupt", 130, "error: interrupted; nothing was left under a final name"),
    ("not a folder", MissingInputError.exit_code,
     "error: file/inside: not a directory; give another path"),
    ("odd name", MissingInputError.exit_code,
     "error: caf\\udce9\\n.txt: no such file; give another path"),
], ids=["config", "verify", "interrupt", "not-a-folder", "not-utf8-name"])
def test_a_failure_is_one_line_with_its_exit_code(capsys, what, code, line):
    found, err = run(capsys, "fail", "--what", what)
    assert "Traceback" not in err, err
    assert [x for x in err.splitlines() if x.strip()] == [line], err
    assert found == code


def test_a_long_path_is_cut_in_its_line(capsys):
    code, err = run(capsys, "fail", "--what", "long path")
    line = err.strip()
    assert code == MissingInputError.exit_code
    assert line.startswith("error: a/a/") and "... (401 characters): file name too long" in line
    assert len(line) < 200


def test_an_error_that_is_no_refused_path_is_not_hidden():
    """EIO is the machine failing, not the user's input: it is not dressed as one line."""
    with pytest.raises(OSError) as info:
        program().run(["t", "fail", "--what", "disk"])
    assert info.value.errno == errno.EIO


@pytest.mark.parametrize(("argv", "line"), [
    (["fail"], "error: fail: --what required; see 'inv --help fail'"),
    (["takes", "--bogus"], "error: unknown task or flag '--bogus'; see 'inv --help takes'"),
    (["takes", "a\x00b"], "error: takes path: holds a NUL byte; give text without one"),
    (["takes", "p", "--name", "x\x00"],
     "error: takes --name: holds a NUL byte; give text without one"),
], ids=["required", "flag-as-positional", "nul-positional", "nul-flag"])
def test_bad_arguments_are_refused_before_the_task_runs(capsys, argv, line):
    code, err = run(capsys, *argv)
    assert code == ConfigError.exit_code and err.strip() == line, err
    assert RAN == []


def test_good_arguments_reach_the_task(capsys):
    code, err = run(capsys, "takes", "file.txt", "--name", "n")
    assert code == 0 and err == "" and RAN == ["takes file.txt n"]


def test_path_refused_speaks_only_of_paths():
    assert path_refused(OSError(errno.EACCES, "Permission denied", "/root/x")) == \
        "/root/x: permission denied; give another path"
    assert path_refused(OSError(errno.ENOENT, "No such file or directory")) is None  # no name
    assert path_refused(OSError(errno.ENOSPC, "No space left on device", "/x")) is None
    named = path_refused(OSError(errno.ENOENT, "No such file", "a\nb"))
    assert named == "a\\nb: no such file; give another path"
