"""The sandbox for code from others (``common/sandbox.py``), with real bwrap and real programs:
what is visible, what is writable, no network, no new process; as root and, through an
unprivileged user namespace, as another user; and a host without bwrap refuses in one line."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from edgevllm.common import sandbox
from edgevllm.common.bounded import Limits, run_bounded
from edgevllm.common.errors import SandboxMissingError, SourceError
from edgevllm.sources.cmakeguard import cmake_root


@pytest.fixture(scope="module")
def bwrap() -> str:
    if shutil.which("bwrap") is None:
        pytest.fail("bwrap is missing: apt-get install bubblewrap (.ci/install-engine.sh)")
    return sandbox.require_sandbox("the test")


SCRATCH = Path("/scratch")  # inside the sandbox only: a sized tmpfs


def in_sandbox(bwrap: str, argv: list[str], *, read_only=(), writable=(), cwd: Path):
    fd = sandbox.seccomp_fd()
    try:
        wrapped = sandbox.sandboxed_argv(bwrap, argv, read_only=list(read_only),
                                         writable=list(writable), cwd=cwd, seccomp_fd=fd,
                                         scratch=SCRATCH, scratch_size=1 << 20)
        return run_bounded(wrapped, Limits(seconds=30), what="sandboxed", error=SourceError,
                           pass_fds=[fd], env={"PATH": "/usr/bin:/bin"})
    finally:
        os.close(fd)


def cmake_script(bwrap: str, folder: Path, text: str, read_only=()):
    """``text`` run by cmake in the sandbox: ``folder`` read-only, its ``out.txt`` writable."""
    (folder / "t.cmake").write_text(text)
    (folder / "out.txt").write_text("")
    cmake = shutil.which("cmake")
    assert cmake, "cmake is missing: apt-get install cmake"
    return in_sandbox(bwrap, [cmake, "-P", "t.cmake"], writable=[folder / "out.txt"], cwd=folder,
                      read_only=[*read_only, folder, cmake_root(cmake)])


def test_only_the_folders_named_are_there(bwrap, tmp_path):
    scratch, tree, host = tmp_path / "scratch", tmp_path / "tree", tmp_path / "host.txt"
    scratch.mkdir()
    tree.mkdir()
    (tree / "in.txt").write_text("inside")
    host.write_text("host secret")
    done = cmake_script(bwrap, scratch, f"""
file(READ {tree}/in.txt A)
message(STATUS "tree:${{A}}")
foreach(p {host} /etc/passwd /etc/hostname /root /home /proc/1/environ /var /sys /usr/bin/sh)
  if(EXISTS "${{p}}")
    message(STATUS "visible:${{p}}")
  endif()
endforeach()
file(WRITE {scratch}/out.txt ok)
file(WRITE {SCRATCH}/s.txt in-scratch)
file(READ {SCRATCH}/s.txt S)
message(STATUS "scratch:${{S}}")
file(WRITE {tree}/written.txt x)
""", read_only=[tree])
    text = done.text("stdout") + done.text("stderr")
    assert "tree:inside" in text and "scratch:in-scratch" in text and "visible:" not in text, text
    assert (scratch / "out.txt").read_text() == "ok" and not (tree / "written.txt").exists()
    assert not (scratch / "s.txt").exists() and not SCRATCH.joinpath("s.txt").exists()


def test_no_new_process_and_no_network(bwrap, tmp_path):
    cmake = shutil.which("cmake")
    done = cmake_script(bwrap, tmp_path, f"""
execute_process(COMMAND {cmake} --version RESULT_VARIABLE r)
message(STATUS "spawn:${{r}}")
file(DOWNLOAD http://127.0.0.1:9/ {SCRATCH}/d STATUS s)
message(STATUS "download:${{s}}")
""")
    text = done.text("stdout")
    assert "spawn:Operation not permitted" in text, text
    assert "download:0;" not in text and "download:" in text


def test_an_unprivileged_user_gets_the_same_sandbox(bwrap):
    """As root this machine's tests also run bwrap as nobody: the user namespace path users
    without root take. The folder is made readable for that user."""
    if os.geteuid() != 0:
        pytest.fail("this test runs as root (it switches to nobody with setpriv)")
    tmp_path = Path(tempfile.mkdtemp(prefix="edgevllm-sandbox-test-"))  # /tmp: nobody reaches it
    tmp_path.chmod(0o755)
    (tmp_path / "t.cmake").write_text('message(STATUS "hello from ${CMAKE_ROOT}")\n')
    (tmp_path / "t.cmake").chmod(0o644)
    cmake = shutil.which("cmake") or "cmake"
    fd = sandbox.seccomp_fd()
    try:
        wrapped = sandbox.sandboxed_argv(bwrap, [cmake, "-P", "t.cmake"],
                                         read_only=[tmp_path, cmake_root(cmake)], writable=[],
                                         cwd=tmp_path, seccomp_fd=fd)
        proc = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534",
                               "--clear-groups", *wrapped], capture_output=True, text=True,
                              pass_fds=[fd], timeout=60)
    finally:
        os.close(fd)
        shutil.rmtree(tmp_path)
    assert proc.returncode == 0 and "hello from /" in proc.stdout, proc.stderr


def test_the_filter_is_built_for_each_architecture():
    for machine in ("x86_64", "aarch64"):
        program = sandbox.seccomp_program(machine)
        assert len(program) % 8 == 0 and 8 < len(program) // 8 < 64


def test_a_host_without_bwrap_refuses_in_one_line(monkeypatch):
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    with pytest.raises(SandboxMissingError) as info:
        sandbox.require_sandbox("the kernel plan")
    assert info.value.exit_code == 3 and "\n" not in str(info.value)
    assert "apt-get install bubblewrap" in str(info.value)
