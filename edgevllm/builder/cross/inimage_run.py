#!/usr/bin/env python3
"""The cross road's CMAKE_CROSSCOMPILING_EMULATOR, inside the compile's build stage (standard
library only): runs what the build platform can run, and refuses a program built for the target.

CMake runs ``<emulator> <program> <args>`` for what it believes is a target program: FindPython's
interpreter (policy CMP0190), ``try_run`` results, custom commands running a freshly built
executable. The interpreter is the build platform's own and runs. A target program cannot: where
the host has qemu's binfmt handler it would run silently under emulation (a configure-time answer
from the emulator, minutes per run), and without it fail with "Exec format error".

So it stops the build: an exit code alone would not, since ``try_run`` only records it (a wrong
answer, silently). It writes one line naming the program and what to do to its own stderr and
to the stderr of the process that ran it (CMake captures a ``try_run``'s output; its own stderr
reaches the build log), then ends that process. The build's failure message leads with the line
(builder/buildlog.py keeps every ``edgevllm <step>: error:`` line).

    inimage_run.py PROGRAM [ARGS...]
"""

from __future__ import annotations

import os
import shutil
import signal
import sys

ELF_MAGIC = b"\x7fELF"
# e_machine values (the ELF specification's table) for the names in the message.
MACHINES = {3: "i386", 62: "x86_64", 183: "aarch64", 40: "arm", 243: "riscv64", 21: "ppc64"}


def elf_machine(path: str) -> int | None:
    """The ELF e_machine of ``path``; None for a file that is not ELF (a script runs as is)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(20)
    except OSError:
        return None
    if len(head) < 20 or head[:4] != ELF_MAGIC:
        return None
    if head[5] == 1:  # EI_DATA: little-endian (every Linux target edgevllm knows)
        return int.from_bytes(head[18:20], "little")
    return int.from_bytes(head[18:20], "big")


def locate(program: str) -> str:
    """``program`` as a path: as given where it names a folder, else found on PATH."""
    if os.sep in program:
        return program
    return shutil.which(program) or program


def refuse(message: str) -> int:
    """Say ``message`` where the build log sees it, and stop the process that ran us."""
    line = f"edgevllm cross: error: {message}\n"
    sys.stderr.write(line)
    sys.stderr.flush()
    parent = os.getppid()
    try:  # CMake's own stderr: a try_run keeps ours to itself
        if not os.path.samefile(f"/proc/{parent}/fd/2", "/proc/self/fd/2"):
            with open(f"/proc/{parent}/fd/2", "a") as theirs:  # append: never truncate a log
                theirs.write(line)
    except OSError:
        pass  # no procfs, or the parent's stderr is closed: ours is all there is
    if parent > 1:
        os.kill(parent, signal.SIGTERM)
    return 126


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print("edgevllm cross: error: inimage_run.py needs the program to run", file=sys.stderr)
        return 2
    program = locate(args[0])
    machine, own = elf_machine(program), elf_machine(sys.executable)
    if machine is not None and machine != own:
        name = MACHINES.get(machine, f"machine {machine}")
        return refuse(f"the tree's build runs {program}, a program built for the target "
                      f"({name}), which the cross road cannot run on this "
                      f"{MACHINES.get(own or 0, 'other')} builder (try_run or a custom "
                      "command): build with --toolchain emulated, or give try_run's answers as "
                      "CMake cache entries in CMAKE_ARGS")
    os.execv(program, [program, *args[1:]])
    return 127  # not reached: execv replaces this process or raises


if __name__ == "__main__":
    sys.exit(main())
