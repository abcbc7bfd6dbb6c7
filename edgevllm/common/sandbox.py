"""The sandbox code from others runs in on the host: bubblewrap, no network, no fork, bounded.

``sandboxed_argv(argv, read_only=..., writable=..., cwd=..., scratch=...)`` wraps a command in
``bwrap``: new user, mount, pid, network, IPC and UTS namespaces (``--unshare-all``), an empty root
holding only the system libraries (``/usr/lib*``, ``/etc/ld.so.cache``), the program itself, the
folders named read-only, the single files named writable and, where asked, a scratch folder;
nothing of ``/etc``, ``/home``, ``/root``, ``/tmp``, ``/var``, ``/proc`` or ``/sys``. A seccomp
filter (``seccomp_program``) refuses every new process (``fork``, ``vfork``, ``clone`` without
``CLONE_THREAD``), so the program is the only process in the sandbox whatever it is given, and a
32-bit or x32 system call ends it. Memory, time and output are bounded by the runner
(``edgevllm.common.bounded``), which starts ``bwrap``.

What it may hold, all of it bounded (docs/security.md, "The sandbox's bounds"):
- memory: its address space (the runner's ``Limits.memory``) plus the scratch. The root and
  ``/dev`` are tmpfs mounts made read-only once the binds are in place (``/dev/shm`` is an empty
  read-only folder), and the filter refuses what would hold memory outside the address space:
  ``memfd_create``, System V shared memory and message queues (``shmget``, ``msgget``), and
  namespaces of its own (``unshare``, ``setns``: a tmpfs it would mount itself).
- disk: nothing of the host is writable but the files named in ``writable`` (each at most
  ``Limits.file_size``, RLIMIT_FSIZE; ``fallocate``, which could reserve blocks past it, is
  refused, so writers fall back to writing). A folder is never bound writable: its sum would
  have no bound. Scratch space is a tmpfs of ``scratch_size`` bytes in all (``--size``), inside
  the sandbox only: full, a write fails with ENOSPC, and the host's disk never sees it.

Why bubblewrap and not a container: it needs no image, no engine and no pull, so the kernel plan
runs before any image exists and in the preflight, in about 0.1 s; it works as root and, through
an unprivileged user namespace, as any user (docs/security.md). Where it cannot start (or is older
than 0.5, without ``--size``), code from others is refused (``require_sandbox``), never run bare.
"""

from __future__ import annotations

import os
import platform
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Sequence

from edgevllm.common.errors import SandboxMissingError

INSTALL = ("install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; "
           "bash .ci/install-engine.sh does it on Debian)")
# Where the dynamic loader finds the libraries a program links (read-only, public content).
_SYSTEM = ("/usr/lib", "/usr/lib64", "/usr/lib32", "/lib", "/lib64", "/lib32",
           "/etc/ld.so.cache")

# --- the seccomp filter (classic BPF; struct seccomp_data: nr @0, arch @4, args[0] @16) --------
_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _KILL = 0x7FFF0000, 0x80000000
_EPERM, _ENOSYS = 0x00050000 | 1, 0x00050000 | 38
_EOPNOTSUPP = 0x00050000 | 95
_CLONE_THREAD = 0x00010000
# machine: (AUDIT_ARCH, clone, clone3, fork or None, vfork or None)
_ARCHES = {"x86_64": (0xC000003E, 56, 435, 57, 58), "aarch64": (0xC00000B7, 220, 435, None, None)}
# Calls that would hold memory outside the address space or a namespace of its own (EPERM):
# memfd_create, shmget, msgget, unshare, setns. And fallocate (EOPNOTSUPP: glibc's
# posix_fallocate then writes, within RLIMIT_FSIZE; FALLOC_FL_KEEP_SIZE reserves past it).
_HOLDERS = {"x86_64": ((319, 29, 68, 272, 308), 285), "aarch64": ((279, 194, 186, 97, 268), 47)}
# The scratch tmpfs's size where the caller names none (it counts as memory too).
SCRATCH_SIZE = 64 << 20


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def seccomp_program(machine: str | None = None) -> bytes:
    """A filter that lets a program make threads but no process, on this host's architecture."""
    arch, clone, clone3, fork, vfork = _ARCHES[machine or _machine()]
    new_process = [n for n in (fork, vfork) if n is not None]
    prog = [_op(_LD_W_ABS, 4), _op(_JEQ, arch, 1, 0), _op(_RET, _KILL), _op(_LD_W_ABS, 0),
            _op(_JGE, 0x40000000, 0, 1), _op(_RET, _KILL)]   # x32 numbers on x86_64
    holders, fallocate = _HOLDERS[machine or _machine()]
    for number in [*new_process, *holders]:
        prog += [_op(_JEQ, number, 0, 1), _op(_RET, _EPERM)]
    prog += [_op(_JEQ, fallocate, 0, 1), _op(_RET, _EOPNOTSUPP)]
    prog += [_op(_JEQ, clone3, 0, 1), _op(_RET, _ENOSYS),  # glibc then falls back to clone
             _op(_JEQ, clone, 1, 0), _op(_RET, _ALLOW),
             _op(_LD_W_ABS, 16), _op(_JSET, _CLONE_THREAD, 0, 1), _op(_RET, _ALLOW),
             _op(_RET, _EPERM)]
    return b"".join(prog)


def _machine() -> str:
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


# --- finding and checking bwrap ------------------------------------------------------------------
def bwrap_path() -> str | None:
    """bwrap on PATH (as cmake and git are found)."""
    return shutil.which("bwrap")


def require_sandbox(what: str) -> str:
    """The bwrap to run ``what`` in, after checking it can make its namespaces here; else
    SandboxMissingError (one line): code from others is refused, not run bare."""
    bwrap = bwrap_path()
    if bwrap is None:
        raise SandboxMissingError(f"{what} runs code from others only in a sandbox, and bwrap "
                                  f"is not installed: {INSTALL}")
    if _machine() not in _ARCHES:
        raise SandboxMissingError(f"{what}: the sandbox's filter knows x86_64 and aarch64, not "
                                  f"{platform.machine()}")
    probe = subprocess.run([bwrap, "--unshare-all", "--die-with-parent",
                            *_binds(["--ro-bind"], [Path(p) for p in _SYSTEM]),
                            "--ro-bind", "/usr/bin/true" if os.path.exists("/usr/bin/true")
                            else "/bin/true", "/probe", "--size", "65536", "--tmpfs", "/scratch",
                            "--remount-ro", "/", "--", "/probe"],
                           capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        reason = (probe.stderr.strip().splitlines() or ["no message"])[-1][:200]
        raise SandboxMissingError(
            f"{what} runs code from others only in a sandbox, and bwrap cannot make one here "
            f"({reason}); let bwrap make user namespaces (Ubuntu 24.04: sudo apt-get install "
            "apparmor-profiles, then load /usr/share/apparmor/extra-profiles/"
            "bwrap-userns-restrict; docs/security.md 'A host without it') or run as root")
    return bwrap


def _binds(flag: list[str], paths: Sequence[Path]) -> list[str]:
    """Bind each existing path at the same place; a top-level link (``/lib -> usr/lib``) stays
    a link so the loader's paths keep working."""
    args: list[str] = []
    for path in paths:
        if path.is_symlink() and path.parent == Path("/"):
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.exists():
            args += [*flag, str(path), str(path)]
    return args


def sandboxed_argv(bwrap: str, argv: Sequence[str], *, read_only: Sequence[Path],
                   writable: Sequence[Path], cwd: Path, seccomp_fd: int,
                   scratch: Path | None = None, scratch_size: int = SCRATCH_SIZE) -> list[str]:
    """``argv`` wrapped in bwrap (see the module's words). ``argv[0]`` must be an absolute path
    to a program (bound read-only at its own path); ``seccomp_fd`` holds ``seccomp_program()``.
    ``writable`` are existing files (never folders); ``scratch`` an absolute path where a tmpfs
    of ``scratch_size`` bytes is mounted after the read-only binds (it may sit inside one of
    them, where it must exist, and covers what is there) and before the writable files.
    The environment is the runner's ``env`` (the caller passes only what the program may see)."""
    program = Path(argv[0])
    if not program.is_absolute():
        raise ValueError(f"{program}: the sandbox runs a program by its absolute path")
    folders = [str(p) for p in writable if not p.is_file()]
    if folders:
        raise ValueError(f"{folders[0]}: only files are bound writable (a folder's sum has no "
                         "bound); give a scratch instead")
    real = program.resolve()
    args = [bwrap, "--unshare-all", "--as-pid-1", "--die-with-parent", "--new-session",
            "--cap-drop", "ALL", "--dev", "/dev"]
    args += _binds(["--ro-bind"], [Path(p) for p in _SYSTEM])
    args += ["--ro-bind", str(real), str(program)]
    args += _binds(["--ro-bind"], [p.resolve() for p in read_only])
    if scratch is not None:
        args += ["--size", str(scratch_size), "--perms", "0700", "--tmpfs", str(scratch)]
    args += _binds(["--bind"], [p.resolve() for p in writable])
    # Last: the tmpfs mounts bwrap made for the root and /dev hold nothing more (no RAM).
    args += ["--remount-ro", "/dev", "--remount-ro", "/"]
    args += ["--chdir", str(cwd.resolve()), "--seccomp", str(seccomp_fd), "--", *argv]
    return args


def seccomp_fd() -> int:
    """A readable file descriptor holding the filter (bwrap reads it once); the caller closes it
    after the run. A pipe: the program is far smaller than a pipe's buffer."""
    read, write = os.pipe()
    os.write(write, seccomp_program())
    os.close(write)
    return read
