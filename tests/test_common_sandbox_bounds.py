"""The sandbox's bounds hold everything it holds (``common/sandbox.py`` with ``common/bounded.py``),
with real bwrap and a real Python in the sandbox: a script writes past each bound (``/dev/shm``,
the root tmpfs, the scratch tmpfs in many files each under the per-file cap, one file past the
per-file cap) and the run stops in one line of the caller's error class, while the host's folder
under the scratch and the one writable file stay within their bounds (measured). Calls that would
hold memory outside the address space (memfd, System V shm and queues, a namespace of its own)
and ``fallocate`` past the file cap are refused. The figures (MiB allowed, MiB reached, seconds to
stop) are printed (``pytest -s``); no assertion is timed."""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from edgevllm.common import sandbox
from edgevllm.common.bounded import Limits, MiB, run_bounded
from edgevllm.common.errors import PlanError

PYTHON = Path(os.path.realpath(sys.executable))
LIMITS = Limits(seconds=60, memory=256 * MiB, file_size=4 * MiB, scratch=8 * MiB)
# Writes 1 MiB at a time to new files named by the argument's pattern ({n}: a counter), each
# under the 4 MiB file cap, up to 512 MiB; the bytes written so far go to the progress file.
WRITER = """
import os, sys
pattern, progress, total = sys.argv[1], sys.argv[2], 0
block = b"x" * (1 << 20)
def note():
    with open(progress, "r+") as out:
        out.write(str(total).ljust(20))
note()
for n in range(512):
    path = pattern.format(n=n // 2)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "ab") as out:
        out.write(block)
    total += len(block)
    note()
"""


@pytest.fixture(scope="module")
def bwrap() -> str:
    if shutil.which("bwrap") is None:
        pytest.fail("bwrap is missing: apt-get install bubblewrap (.ci/install-engine.sh)")
    return sandbox.require_sandbox("the test")


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def run_python(bwrap: str, folder: Path, code: str, *args: str, writable=()):
    """``code`` by a real Python in the sandbox: ``folder`` read-only but for ``writable``, and
    ``folder/scratch`` covered by the sandbox's scratch tmpfs (LIMITS.scratch bytes)."""
    (folder / "t.py").write_text(code)
    (folder / "scratch").mkdir(exist_ok=True)  # inside a read-only bind: bwrap cannot make it
    fd = sandbox.seccomp_fd()
    try:
        wrapped = sandbox.sandboxed_argv(
            bwrap, [str(PYTHON), "-I", "-S", "t.py", *args], cwd=folder,
            read_only=[folder, Path(sys.base_prefix)], writable=list(writable), seccomp_fd=fd,
            scratch=folder / "scratch", scratch_size=LIMITS.scratch or 0)
        return run_bounded(wrapped, LIMITS, what="sandboxed writer", error=PlanError,
                           pass_fds=[fd], env={"PATH": "/usr/bin:/bin"})
    finally:
        os.close(fd)


def write_past(bwrap: str, tmp_path: Path, pattern: str, writable=()) -> tuple[str, int, float]:
    """The one line the writer stopped with, the bytes it reached, and the seconds it took."""
    progress = tmp_path / "progress.txt"
    progress.write_text("0")
    start = time.monotonic()
    with pytest.raises(PlanError) as info:
        run_python(bwrap, tmp_path, WRITER, pattern, str(progress),
                   writable=[progress, *writable])
    seconds = time.monotonic() - start
    line = str(info.value)
    assert "\n" not in line and info.value.exit_code == PlanError.exit_code, line
    return line, int(progress.read_text().strip()), seconds


def figures(what: str, allowed: float, reached: int, seconds: float) -> None:
    print(f"\n{what}: allowed {allowed:g} MiB, reached {reached / MiB:g} MiB, "
          f"stopped in {seconds:.2f} s")


@pytest.mark.parametrize("pattern", ["/dev/shm/f{n}", "/tmp/f{n}", "/f{n}", "/dev/f{n}"])
def test_the_tmpfs_mounts_it_does_not_ask_for_hold_nothing(bwrap, tmp_path, pattern):
    line, reached, seconds = write_past(bwrap, tmp_path, pattern)
    figures(pattern, 0, reached, seconds)
    assert line == ("sandboxed writer: stopped writing where nothing is writable (the sandbox's "
                    "root, /dev and /dev/shm are read-only; only its scratch is not)")
    assert reached == 0


def test_many_files_each_under_the_file_cap_stop_at_the_scratch_size(bwrap, tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    line, reached, seconds = write_past(bwrap, tmp_path, f"{scratch}/d{{n}}/f")
    figures("scratch, 2 MiB files", (LIMITS.scratch or 0) / MiB, reached, seconds)
    assert line == ("sandboxed writer: stopped at the scratch's size (8 MiB in all, a tmpfs "
                    "inside the sandbox); what it was given writes more")
    assert 0 < reached <= (LIMITS.scratch or 0)
    assert folder_bytes(scratch) == 0 and not any(scratch.iterdir())  # the host's never saw it


def test_the_one_writable_file_stops_at_the_file_cap(bwrap, tmp_path):
    out = tmp_path / "out.bin"
    out.write_bytes(b"")
    code = f"""
block = b"x" * (1 << 20)
with open({str(out)!r}, "ab") as out:
    for _ in range(64):
        out.write(block)
        out.flush()
"""
    start = time.monotonic()
    with pytest.raises(PlanError) as info:
        run_python(bwrap, tmp_path, code, writable=[out])
    figures("the writable file", (LIMITS.file_size or 0) / MiB, out.stat().st_size,
            time.monotonic() - start)
    assert str(info.value) == ("sandboxed writer: stopped at the file size limit (4 MiB a file); "
                               "what it was given writes more")
    assert out.stat().st_size <= (LIMITS.file_size or 0)


HOLDERS = """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def tried(what, result):
    print(what, "refused" if result == -1 and ctypes.get_errno() in (errno.EPERM,
          errno.EOPNOTSUPP) else f"ALLOWED {result}")
try:
    os.memfd_create("held")
    print("memfd ALLOWED")
except PermissionError:
    print("memfd refused")
tried("shmget", libc.shmget(0, 64 << 20, 0o600))
tried("msgget", libc.msgget(0, 0o600))
tried("unshare", libc.unshare(0x10000000 | 0x00020000))   # CLONE_NEWUSER | CLONE_NEWNS
fd = os.open({out!r}, os.O_WRONLY)
tried("fallocate", libc.fallocate(fd, 1, ctypes.c_long(0), ctypes.c_long(1 << 30)))
try:
    os.posix_fallocate(fd, 0, 1 << 30)   # glibc writes instead: within the file cap
    print("posix_fallocate ALLOWED")
except OSError as exc:
    print("posix_fallocate", errno.errorcode[exc.errno])
"""


def test_what_would_hold_memory_or_disk_outside_the_bounds_is_refused(bwrap, tmp_path):
    out = tmp_path / "out.bin"
    out.write_bytes(b"")
    done = run_python(bwrap, tmp_path, HOLDERS.replace("{out!r}", repr(str(out))), writable=[out])
    assert done.text().splitlines() == [
        "memfd refused", "shmget refused", "msgget refused", "unshare refused",
        "fallocate refused", "posix_fallocate EFBIG"], done.text() + done.text("stderr")
    assert out.stat().st_size <= (LIMITS.file_size or 0)
    assert os.stat(out).st_blocks * 512 <= (LIMITS.file_size or 0)


def test_a_folder_is_never_bound_writable(tmp_path):
    with pytest.raises(ValueError, match="only files are bound writable"):
        sandbox.sandboxed_argv("bwrap", [str(PYTHON)], read_only=[], writable=[tmp_path],
                               cwd=tmp_path, seccomp_fd=3)
