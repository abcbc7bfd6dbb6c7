"""The one runner for child processes that read others' data (cmake on a tree, git, tar).

``run_bounded(argv, limits, what=..., error=...)`` starts the child in a session of its own with
kernel limits set before it runs (address space, file size, open files, core dumps) and watches
two more from here: the wall-clock time and the bytes it writes to stdout/stderr. A child that
passes a bound is killed with its whole process group, and the caller's error class is raised
with one line naming what was exceeded; otherwise a ``Finished`` comes back (exit status, output,
peak resident memory of the child and the children it waited for).

Why these limits: a 3-line CMake file (``string(REPEAT)`` then ``string(APPEND A "${A}")``)
took cmake to 18.7 GB before; an address-space limit makes such an allocation fail inside the
child (cmake aborts with ``std::bad_alloc``), which is then one line here, not a host that swaps.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import threading
from dataclasses import dataclass, field
from typing import Sequence

from edgevllm.common.errors import EdgeVllmError

MiB = 1 << 20
# What an allocation failure looks like in a child's stderr (C++ new, glibc, git, Python).
_OOM_WORDS = ("bad_alloc", "out of memory", "cannot allocate memory", "memory exhausted",
              "memoryerror",
              "length_error")
# What a refused write looks like in a sandboxed child's stderr (strerror's words, as C and
# Python print them), and the bound each one is; SIGXFSZ ends a child that ignores none of them.
_WRITE_WORDS = (("no space left on device", "scratch"), ("file too large", "file"),
                ("read-only file system", "read-only"))
_SIGXFSZ = 25


@dataclass(frozen=True)
class Limits:
    """Bounds for one child. ``memory`` is its address space (RLIMIT_AS), ``None`` for none."""

    seconds: float = 120.0
    memory: int | None = 512 * MiB
    output: int = 16 * MiB          # per stream, what the child may print
    file_size: int | None = 64 * MiB  # RLIMIT_FSIZE: the largest file it may write
    open_files: int | None = 256     # None: the parent's (git opens one file per pack)
    # A sandboxed run's scratch (common/sandbox.py: a tmpfs of this size, in all); where set, a
    # write refused at a bound is reported as that bound (one line), not as the child's failure.
    scratch: int | None = None


@dataclass
class Finished:
    argv: list[str]
    returncode: int
    stdout: bytes
    stderr: bytes
    peak_rss: int = 0               # bytes: the child's and its waited-for children's peak
    exceeded: str = field(default="")  # "", or the bound that stopped it

    def text(self, stream: str = "stdout") -> str:
        return getattr(self, stream).decode(errors="replace")


def _set_limits(limits: Limits) -> None:
    """Runs in the child between fork and exec: only async-signal-safe calls (setrlimit)."""
    pairs = [(resource.RLIMIT_CORE, 0)]
    if limits.open_files is not None:
        pairs.append((resource.RLIMIT_NOFILE, limits.open_files))
    if limits.memory is not None:
        pairs.append((resource.RLIMIT_AS, limits.memory))
    if limits.file_size is not None:
        pairs.append((resource.RLIMIT_FSIZE, limits.file_size))
    for kind, value in pairs:
        soft, hard = resource.getrlimit(kind)
        top = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(kind, (top, top))


def _has_rlimits(limits: Limits) -> bool:
    """Whether the child needs limits set before exec (without, Python may use vfork: faster)."""
    return any(v is not None for v in (limits.memory, limits.file_size, limits.open_files))


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class _Reader(threading.Thread):
    """Drains one pipe, keeping at most ``cap`` bytes; past that, kills the child's group."""

    def __init__(self, pipe, cap: int, pid: int, stop: threading.Event):
        super().__init__(daemon=True)
        self.pipe, self.cap, self.pid, self.stop = pipe, cap, pid, stop
        self.chunks: list[bytes] = []
        self.size = 0
        self.over = False

    def run(self) -> None:
        while True:
            chunk = self.pipe.read1(65536) if hasattr(self.pipe, "read1") else self.pipe.read(65536)
            if not chunk:
                break
            if self.size + len(chunk) > self.cap:
                self.over = True
                self.stop.set()
                _kill_group(self.pid)
                break
            self.chunks.append(chunk)
            self.size += len(chunk)
        self.pipe.close()


def run_bounded(argv: Sequence[str], limits: Limits, *, what: str,
                error: type[EdgeVllmError], cwd: str | os.PathLike | None = None,
                env: dict[str, str] | None = None, input: bytes | None = None,
                pass_fds: Sequence[int] = ()) -> Finished:
    """Run ``argv`` within ``limits``; raise ``error`` (one line naming ``what``) when it passes
    one. A non-zero exit is returned, not raised: the caller knows what it means."""
    done = _start_and_wait(list(argv), limits, cwd=cwd, env=env, input=input, pass_fds=pass_fds)
    if done.exceeded == "time":
        raise error(f"{what}: stopped after {limits.seconds:g}s (the time limit); "
                    "what it was given loops or waits")
    if done.exceeded == "output":
        raise error(f"{what}: stopped after printing more than {limits.output // MiB} MiB "
                    "(the output limit)")
    if memory_exhausted(done, limits):
        done.exceeded = "memory"
        raise error(f"{what}: stopped at the memory limit ({(limits.memory or 0) // MiB} MiB of "
                    "address space); what it was given asks for more")
    bound = write_refused(done, limits)
    if bound:
        done.exceeded = "disk"
        raise error(f"{what}: {_WRITE_LINES[bound](limits)}")
    return done


_WRITE_LINES = {
    "scratch": lambda lim: f"stopped at the scratch's size ({(lim.scratch or 0) / MiB:g} MiB in "
                           "all, a tmpfs inside the sandbox); what it was given writes more",
    "file": lambda lim: f"stopped at the file size limit ({(lim.file_size or 0) / MiB:g} MiB a "
                        "file); what it was given writes more",
    "read-only": lambda lim: "stopped writing where nothing is writable (the sandbox's root, "
                             "/dev and /dev/shm are read-only; only its scratch is not)",
}


def write_refused(done: Finished, limits: Limits) -> str:
    """The bound a sandboxed child failed at writing ("scratch", "file", "read-only"), or ""."""
    if limits.scratch is None or done.returncode == 0:
        return ""
    if done.returncode in (-_SIGXFSZ, 128 + _SIGXFSZ):  # bwrap passes a signal on as 128+n
        return "file"
    tail = done.stderr[-4096:].decode(errors="replace").lower()
    return next((bound for words, bound in _WRITE_WORDS if words in tail), "")


def memory_exhausted(done: Finished, limits: Limits) -> bool:
    """Whether the child failed because an allocation was refused at the address-space limit."""
    if limits.memory is None or done.returncode == 0:
        return False
    tail = done.stderr[-4096:].decode(errors="replace").lower()
    return any(word in tail for word in _OOM_WORDS)


def _start_and_wait(argv: list[str], limits: Limits, *, cwd, env, input,
                    pass_fds) -> Finished:
    # FileNotFoundError passes through: the caller names the tool to install.
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, stdin=subprocess.PIPE if input is not None else
        subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True, pass_fds=tuple(pass_fds),
        preexec_fn=(lambda: _set_limits(limits)) if _has_rlimits(limits) else None)
    stop = threading.Event()
    readers = [_Reader(proc.stdout, limits.output, proc.pid, stop),
               _Reader(proc.stderr, limits.output, proc.pid, stop)]
    for reader in readers:
        reader.start()
    if input is not None and proc.stdin is not None:
        threading.Thread(target=_feed, args=(proc.stdin, input), daemon=True).start()
    status: dict[str, object] = {}
    waiter = threading.Thread(target=_wait4, args=(proc.pid, status), daemon=True)
    waiter.start()
    waiter.join(limits.seconds)
    timed_out = waiter.is_alive()
    if timed_out:
        _kill_group(proc.pid)
        waiter.join()
    _kill_group(proc.pid)  # whatever it left behind in its group
    for reader in readers:
        reader.join()
    code = int(status.get("code", -1))  # type: ignore[call-overload]
    proc.returncode = code  # reaped above: Popen must not wait for it again
    exceeded = "time" if timed_out else "output" if any(r.over for r in readers) else ""
    return Finished(argv, code, b"".join(readers[0].chunks), b"".join(readers[1].chunks),
                    peak_rss=int(status.get("rss", 0)), exceeded=exceeded)  # type: ignore[call-overload]


def _feed(pipe, data: bytes) -> None:
    try:
        pipe.write(data)
    except (BrokenPipeError, OSError):
        pass
    finally:
        try:
            pipe.close()
        except OSError:
            pass


def _wait4(pid: int, status: dict[str, object]) -> None:
    _, raw, usage = os.wait4(pid, 0)
    status["code"] = os.waitstatus_to_exitcode(raw)
    status["rss"] = usage.ru_maxrss * 1024  # Linux reports KiB
