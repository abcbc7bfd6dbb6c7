"""A tree's CMake runs in the sandbox (bubblewrap, seccomp, limits), with real cmake and bwrap.

The scanner (``cmakeguard``) is the first line; these tests take it away (``no_scanner``) and
show that the sandbox alone holds: for each hostile tree, a canary outside the tree never
appears, the tree is unchanged, a host file's secret and the environment's token never reach the
plan or its error, nothing connects to a port on the host, and the memory bomb that took cmake to
18.7 GB is one error line within the limit. The known escapes of issue 33 are refused by the
scanner too, through ``inv plan``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import sys
import threading
from pathlib import Path

import pytest

from edgevllm.common.bounded import Limits, MiB, run_bounded
from edgevllm.common.errors import PlanError, SandboxMissingError
from edgevllm.sources import cmakeguard, plan
from edgevllm.sources.plan import evaluate_plan
from support.gitfixtures import run_cli

SECRET = "hf_sandboxsecretvalue0123456789abcd"
BENIGN = 'cmake_minimum_required(VERSION 3.26)\nset(CUDA_ARCHS "12.1a")\n'
BOMB = ('string(REPEAT "x" 100000000 A)\nstring(APPEND A "${A}")\nstring(APPEND A "${A}")\n'
        'string(APPEND A "${A}")\n')
# Each escape the issue found, and variants: {canary}, {secret} (a host file), {host_cmake} (a
# CMake file outside the tree), {cmake} (the cmake binary), {port} (a listener on the host).
ESCAPES = {
    "define _execute_process after calling it":
        "_execute_process(COMMAND touch {canary})\nfunction(_execute_process)\nendfunction()",
    "macro(_cmake_language) in an if(FALSE) branch":
        "if(FALSE)\n  macro(_cmake_language)\n  endmacro()\nendif()\n"
        "_cmake_language(CALL _execute_process COMMAND touch {canary})",
    "function(${{N}}) silences the refusal, then include() of an unread file":
        "set(N _ev_refused)\nfunction(${{N}})\nendfunction()\ninclude({host_cmake})",
    "a shell from the host": '_execute_process(COMMAND /bin/sh -c "cat {secret} > {canary}")',
    "cmake copies a host file": "_execute_process(COMMAND {cmake} -E copy {secret} {canary})",
    "cmake runs cmake (a fork chain)": "_execute_process(COMMAND {cmake} -E touch {canary})",
    "the original file() writes": "_file(WRITE {canary} x)\n_file(WRITE {tree}/CMakeLists.txt x)",
    "the original file() reads a host file":
        '_file(READ {secret} S)\nmessage(FATAL_ERROR "leak:${{S}}")',
    "a link out of the scratch folder":
        '_file(CREATE_LINK {secret} ${{CMAKE_CURRENT_LIST_DIR}}/l SYMBOLIC)\n'
        '_file(READ ${{CMAKE_CURRENT_LIST_DIR}}/l S)\nmessage(FATAL_ERROR "leak:${{S}}")',
    "a download to the host": "_file(DOWNLOAD http://127.0.0.1:{port}/x {canary})",
    "the token from the environment": 'message(FATAL_ERROR "leak:$ENV{{HF_TOKEN}}")',
    "/etc/passwd": '_file(READ /etc/passwd S)\nmessage(FATAL_ERROR "leak:${{S}}")',
}


@pytest.fixture(scope="module", autouse=True)
def real_tools():
    for tool, package in (("cmake", "cmake"), ("bwrap", "bubblewrap")):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: apt-get install {package} (.ci/install-engine.sh)")


@pytest.fixture()
def no_scanner(monkeypatch):
    """The first line taken away: what remains is the sandbox."""
    monkeypatch.setattr(cmakeguard, "check_tree_cmake", lambda *args: None)


@pytest.fixture()
def listener():
    """A TCP port on the host that records whether anything connected."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    hits: list[bool] = []
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                server.accept()[0].close()
                hits.append(True)
            except OSError:
                pass
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], hits
    stop.set()
    thread.join()
    server.close()


def make_tree(root: Path, text: str) -> Path:
    tree = root / "tree"
    (tree / "cmake").mkdir(parents=True)
    (tree / "CMakeLists.txt").write_text(BENIGN + text + "\n")
    return tree


def digest(tree: Path) -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(tree.rglob("*"))
                                   if p.is_file())).hexdigest()


def evaluate(tree: Path):
    return evaluate_plan(tree, "12.1a", cuda_version="13.0", device_arch="12.1a")


def outcome(tree: Path) -> str:
    try:
        return str(evaluate(tree).to_dict())
    except PlanError as exc:
        assert "\n" not in str(exc).strip(), str(exc)
        return str(exc)


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_the_sandbox_holds_where_the_scanner_is_gone(name, tmp_path, no_scanner, listener,
                                                     monkeypatch):
    port, hits = listener
    monkeypatch.setenv("HF_TOKEN", SECRET)
    canary, secret, host_cmake = tmp_path / "canary", tmp_path / "secret.txt", \
        tmp_path / "host.cmake"
    secret.write_text(SECRET)
    host_cmake.write_text(f'_execute_process(COMMAND touch "{canary}")\n'
                          f'_file(WRITE "{canary}" x)\n_file(READ "{secret}" S)\n'
                          'message(FATAL_ERROR "leak:${S}")\n')
    tree = make_tree(tmp_path, ESCAPES[name].format(
        canary=canary, secret=secret, host_cmake=host_cmake, cmake=shutil.which("cmake"),
        port=port, tree=tmp_path / "tree"))
    before = digest(tree)
    result = outcome(tree)
    assert not canary.exists()
    assert digest(tree) == before
    assert SECRET not in result and "root:x:0" not in result
    assert not hits


@pytest.mark.parametrize("name", [n for n in sorted(ESCAPES) if "_execute_process" in n
                                  or "_cmake_language" in n or "N}" in n])
def test_the_known_escapes_are_refused_by_the_scanner_before_cmake_starts(name, tmp_path):
    tree = make_tree(tmp_path, ESCAPES[name].format(canary=tmp_path / "canary",
                                                    host_cmake=tmp_path / "host.cmake"))
    with pytest.raises(PlanError, match="redefines|not a plain name") as info:
        evaluate(tree)
    assert "\n" not in str(info.value) and "tree/CMakeLists.txt:" in str(info.value)


def test_the_memory_bomb_is_one_line_within_the_limit(tmp_path):
    tree = make_tree(tmp_path, BOMB + 'message(STATUS "done")')
    # In a fresh interpreter, so that its peak (and the cmake it waited for) is this test's alone.
    code = ("import sys; from edgevllm.sources.plan import evaluate_plan\n"
            "from edgevllm.common.errors import EdgeVllmError\n"
            "try: evaluate_plan(sys.argv[1], '12.1a', cuda_version='13.0', device_arch='12.1a')\n"
            "except EdgeVllmError as e: print(e, file=sys.stderr); sys.exit(e.exit_code)\n")
    done = run_bounded([sys.executable, "-c", code, str(tree)],
                       Limits(seconds=300, memory=None), what="the plan", error=PlanError,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    message = done.text("stderr").strip()
    assert done.returncode == 5 and "\n" not in message, message
    assert "memory limit (512 MiB" in message
    assert plan.LIMITS.memory is not None
    assert done.peak_rss < plan.LIMITS.memory + 64 * MiB, done.peak_rss >> 20


def test_a_loop_stops_at_the_time_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(plan, "LIMITS", Limits(seconds=2))
    tree = make_tree(tmp_path, "while(TRUE)\nendwhile()")
    with pytest.raises(PlanError, match=r"stopped after 2s \(the time limit\)"):
        evaluate(tree)


def test_a_flood_of_messages_stops_at_the_output_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(plan, "LIMITS", Limits(seconds=60, output=64 * 1024))
    tree = make_tree(tmp_path, 'string(REPEAT "y" 4096 L)\nforeach(i RANGE 100000)\n'
                     '  _message(STATUS "${L}")\nendforeach()')
    monkeypatch.setattr(cmakeguard, "check_tree_cmake", lambda *args: None)
    with pytest.raises(PlanError, match="output limit"):
        evaluate(tree)


def test_inv_plan_refuses_each_known_escape_and_the_bomb_in_one_line(tmp_path):
    known = [ESCAPES[n] for n in sorted(ESCAPES)
             if "_execute_process" in n or "_cmake_language" in n or "N}" in n]
    for index, text in enumerate(known + [BOMB.replace("{", "{{").replace("}", "}}")]):
        root = tmp_path / str(index)
        canary = root / "canary"
        tree = make_tree(root, text.format(canary=canary, host_cmake=root / "host.cmake"))
        proc = run_cli("plan", "--target", "thor", "--tree", str(tree))
        err = proc.stderr.strip()
        assert proc.returncode == 5, err
        assert err.startswith("error: ") and len(err.splitlines()) == 1, err
        assert str(tree) in err and "edgevllm-plan-" not in err
        assert not canary.exists()


def test_without_bwrap_a_tree_is_refused_not_run(tmp_path):
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("cmake", "git"):
        os.symlink(shutil.which(tool) or tool, tools / tool)
    canary = tmp_path / "canary"
    tree = make_tree(tmp_path, f"_execute_process(COMMAND touch {canary})")
    (tree / "CMakeLists.txt").write_text(BENIGN)
    proc = run_cli("plan", "--target", "thor", "--tree", str(tree), env={"PATH": str(tools)})
    err = proc.stderr.strip()
    assert proc.returncode == SandboxMissingError.exit_code == 3, err
    assert len(err.splitlines()) == 1 and "apt-get install bubblewrap" in err, err
