"""Property-based test (Hypothesis) of every task's every flag: odd values (empty, 5000
characters, a path longer than the system takes, a NUL byte, control characters, unicode with a
bidi override, a character device, a link to /dev/null, a folder, a path to nothing) give one
``error:`` line and the exit code of one of edgevllm's error classes, or exit 0 where the value
is fine; never a traceback, and nothing written (the work folder, HOME and the XDG folders are
compared before and after each example; a device stays a device).

Nothing real starts: the engine is a socket nobody listens on (``DOCKER_HOST``), every proxy
variable points at a closed port and the Hugging Face hub is offline, so an engine call or a
download fails in one line; ``inv bench`` gets a local TCP server that answers junk. Each task
starts from a base command line that fails late (or only lists), and one flag at a time gets
the odd value. Runs in-process (``program().run``): a few examples per task, derandomized, so
the whole file stays well under a minute; ``EDGEVLLM_PROPERTY_EXAMPLES=1000`` searches harder.
"""

from __future__ import annotations

import os
import socketserver
import stat
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_cli_badinput import RECIPE, _inputs

from edgevllm.cli import namespace, program
from edgevllm.common import errors
from support.inprocess import run_cli
from support.properties import EXAMPLES, PROPERTY

PER_TASK = max(4, EXAMPLES // 5)  # 8 in the fast loop; 200 with EDGEVLLM_PROPERTY_EXAMPLES=1000

# The odd values; "zero"/"null" are character devices made in the work folder when this runs as
# root (a rename onto /dev/null there would replace every program's /dev/null), else /dev's own.
ODD: dict[str, str] = {
    "empty": "", "long": "x" * 5000, "longpath": "a/" * 2500 + "b", "nul": "a\x00b",
    "control": "\x01\x1b[2J\r\nRUN id", "unicode": "é☃\u202e𝔘\u2028",
    "zero": "devzero", "null": "devnull", "link-null": "lnull", "folder": "adir",
    "nothing": "nothere/x",
}


def _bases(junk_url: str) -> dict[str, list[str]]:
    """Per task, a command line that fails late (a dead engine, a bad late input), or only
    lists or plans; one flag at a time is then given an odd value."""
    return {
        "bench": ["bench", junk_url], "build": ["build", "--target", "thor"],
        "bundle": ["bundle", "--image", "x", "--recipe", RECIPE, "--out", "o", "--key", "k"],
        "deploy": ["deploy", "--from", "adir", "--key", "k"],
        "compose": ["compose", "--recipe", RECIPE, "--out", "c.yaml", "--set", "port=0"],
        "copy": ["copy", "--image", "x", "--to", "local"], "diff": ["diff", "image-a", "b"],
        "dist-pool": ["dist-pool", "check", "--scheduler", "sccache://127.0.0.1:9",
                      "--token-file", "nothere"],
        "doctor": ["doctor"], "keygen": ["keygen", "--out", "adir"],
        "load": ["load", "nothere.tar.zst"], "logs": ["logs", "--name", "x"],
        "model-fetch": ["model-fetch", "org/model"], "mods": ["mods"],
        "mods-apply": ["mods-apply", "--target", "thor", "--python", "/nonexistent/python"],
        "plan": ["plan", "--target", "thor", "--tree", "adir"],
        "probe": ["probe", "--image", "x", "--target", "thor"],
        "publish": ["publish", "--image", "x", "--out", "o"],
        "push": ["push", "--image", "x", "--registry", "localhost:5000"],
        "recipe-import": ["recipe-import", "nosuch"], "recipes": ["recipes"],
        "render": ["render", "--target", "thor", "--out", "full"],
        "roofline": ["roofline", "adir"], "sbom": ["sbom", "--image", "x"],
        "serve": ["serve", RECIPE], "sign": ["sign", "--image", "x", "--key", "k"],
        "sources": ["sources", "--target", "thor", "--dry-run"], "status": ["status"],
        "stop": ["stop", "--name", "x"], "targets": ["targets"],
        "track": ["track", "--target", "thor", "--to", "0.33.0"],  # PyPI behind the dead proxy
        "tune-moe": ["tune-moe", "--image", "x", "--target", "thor", "--model", "m"],
        "verify": ["verify", "--target", "thor", "--image", "x"],
        "verify-supply-chain": ["verify-supply-chain", "--key", "k", "--image", "x"],
        "warm": ["warm", RECIPE],
    }


# Exit 0 is right for these whatever the value (they list, or plan with --dry-run) ...
LISTS = {"mods", "recipes", "targets", "sources"}
# ... and these flags name where a task writes: a fine value writes there, exit 0.
WRITES = {("keygen", "out"), ("render", "out")}
CODES = {2, 130} | {cls.exit_code for cls in vars(errors).values()
                    if isinstance(cls, type) and issubclass(cls, errors.EdgeVllmError)}


def _flags() -> dict[str, list[tuple[str, bool, bool]]]:
    """Per task: (flag, positional, repeatable) of every flag that takes a value; a task with
    none (it only lists) gets the odd value as a stray argument (flag "")."""
    ns = namespace()
    return {name: [(arg.name, arg.positional, arg.kind is list)
                   for arg in ns[name].get_arguments() if arg.kind is not bool]
            or [("", False, False)] for name in sorted(ns.task_names)}


FLAGS = _flags()


def _argv(base: list[str], flag: str, positional: bool, repeatable: bool, value: str
          ) -> list[str]:
    if positional:
        return [base[0], value, *base[2:]]
    if not flag:
        return [*base, value]
    option = "--" + flag.strip("_").replace("_", "-")
    argv = list(base)
    if option in argv and not repeatable:  # the base's value is replaced; a list gets one more
        at = argv.index(option)
        del argv[at:at + 2]
    return [*argv, option, value]


class _Junk(socketserver.BaseRequestHandler):
    def handle(self):
        try:
            self.request.sendall(b"\x00\xff not http\r\n\r\n")
        except OSError:
            return


@pytest.fixture(scope="module")
def junk_url():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Junk)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _devices(work: Path) -> None:
    for name, minor in (("devzero", 5), ("devnull", 3)):
        if os.geteuid() == 0:
            os.mknod(work / name, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
        else:
            (work / name).symlink_to(f"/dev/{name[3:]}")
    (work / "lnull").symlink_to("/dev/null")
    (work / "full").mkdir()
    (work / "full" / "mine.txt").write_text("the user's\n")


@pytest.fixture
def oddwork(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    _inputs(work)
    _devices(work)
    monkeypatch.chdir(work)
    dead = "http://127.0.0.1:9"
    env = {"HOME": str(work / "home"), "XDG_CONFIG_HOME": str(work / "home" / ".config"),
           "XDG_CACHE_HOME": str(work / "home" / ".cache"), "NO_COLOR": "1",
           "DOCKER_HOST": f"unix://{tmp_path / 'nobody-listens.sock'}", "HF_HUB_OFFLINE": "1",
           "HTTP_PROXY": dead, "HTTPS_PROXY": dead, "http_proxy": dead, "https_proxy": dead,
           "ALL_PROXY": dead, "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for key in ("DOCKER_CONTEXT", "HF_HOME", "EDGEVLLM_LAYER_CACHE", "EDGEVLLM_CACHE"):
        monkeypatch.delenv(key, raising=False)
    return work


def _tree(folder: Path) -> dict[str, tuple[int, int, int]]:
    found = {}
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        found[str(path.relative_to(folder))] = (info.st_mode, info.st_size, info.st_mtime_ns)
    return found


def _check(task: str, flag: str, argv: list[str], code: int, stderr: str, before: dict,
           work: Path) -> None:
    shown = [a[:40] for a in argv]
    assert "Traceback" not in stderr, f"{shown}: {stderr[-2000:]}"
    errors_said = [line for line in stderr.splitlines() if line.startswith("error: ")]
    after = _tree(work)
    if code == 0:
        assert task in LISTS or (task, flag) in WRITES, f"{shown}: exit 0: {stderr[-500:]}"
        assert errors_said == [], f"{shown}: exit 0 with {errors_said}"
        if (task, flag) in WRITES:
            return
    else:
        assert len(errors_said) == 1, f"{shown}: not one error line: {stderr[-1000:]!r}"
        assert code in CODES, f"{shown}: exit {code} is no error class's: {errors_said[0]}"
    assert after == before, f"{shown}: wrote {sorted(set(after) ^ set(before))[:5]}"
    for device in ("/dev/null", "/dev/zero"):
        assert stat.S_ISCHR(os.stat(device).st_mode), f"{shown}: {device} was replaced"


@pytest.mark.parametrize("task", sorted(FLAGS))
def test_every_flag_of_a_task_given_odd_values(task, oddwork, junk_url, capsys, monkeypatch):
    base = _bases(junk_url)[task]

    @settings(PROPERTY, max_examples=PER_TASK, derandomize=True, deadline=15_000)
    @given(st.sampled_from(FLAGS[task]), st.sampled_from(sorted(ODD)))
    def odd(flag: tuple[str, bool, bool], kind: str) -> None:
        name, positional, repeatable = flag
        argv = _argv(base, name, positional, repeatable, ODD[kind])
        monkeypatch.setattr(sys, "argv", ["edgevllm", *argv])
        before = _tree(oddwork)
        code, stderr = run_cli(capsys, None, *argv)
        _check(task, name, argv, code, stderr, before, oddwork)

    odd()


def test_every_task_has_a_base_command_line(junk_url):
    assert set(_bases(junk_url)) == set(FLAGS), set(_bases(junk_url)) ^ set(FLAGS)
