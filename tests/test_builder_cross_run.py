"""builder/cross/inimage_run.py, the cross road's CMake emulator, run here as CMake runs it (a
child of
a shell standing in for CMake): the build platform's programs run, a target program stops the
process that ran it with one line on its stderr. The "target program" here is a file with an
aarch64 ELF header (what the emulator reads); tests/e2e/test_cross_toolchain_e2e.py runs a real
try_run of a cross-compiled program."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from edgevllm.builder.cross import inimage_run

SCRIPT = Path(inimage_run.__file__)


def _elf(path: Path, machine: int) -> Path:
    """A 64-bit little-endian ELF header for ``machine``, padded, executable."""
    header = b"\x7fELF\x02\x01\x01" + b"\0" * 9 + (2).to_bytes(2, "little")
    path.write_bytes(header + machine.to_bytes(2, "little") + b"\0" * 44)
    path.chmod(0o755)
    return path


def _as_cmake_would(*args: str) -> subprocess.CompletedProcess:
    """A shell runs the emulator, then says it went on: it does only if it was not stopped."""
    line = shlex.join([sys.executable, str(SCRIPT), *args])
    return subprocess.run(["sh", "-c", f"{line}; echo went-on rc=$?"], capture_output=True,
                          text=True, timeout=60)


def test_reads_the_machine_of_an_elf_and_none_of_a_script(tmp_path):
    assert inimage_run.elf_machine(str(_elf(tmp_path / "a", 183))) == 183
    (tmp_path / "s").write_text("#!/bin/sh\necho hi\n")
    assert inimage_run.elf_machine(str(tmp_path / "s")) is None
    assert inimage_run.elf_machine(str(tmp_path / "missing")) is None
    assert inimage_run.elf_machine(sys.executable) is not None


def test_the_build_platforms_programs_run_with_their_arguments_and_exit_code(tmp_path):
    proc = _as_cmake_would(sys.executable, "-c", "import sys; print('ran', sys.argv[1:]); "
                           "sys.exit(3)", "x y", "z")
    assert "ran ['x y', 'z']" in proc.stdout and "went-on rc=3" in proc.stdout, proc
    script = tmp_path / "tool.sh"
    script.write_text("#!/bin/sh\necho tool \"$@\"\n")
    script.chmod(0o755)
    assert "tool a\nwent-on rc=0" in _as_cmake_would(str(script), "a").stdout


def test_a_target_program_stops_the_process_that_ran_it_with_one_line(tmp_path):
    target = _elf(tmp_path / "probe", 183)
    proc = _as_cmake_would(str(target))
    assert "went-on" not in proc.stdout, proc   # the shell standing in for CMake was stopped
    said = [line for line in proc.stderr.splitlines() if line.startswith("edgevllm cross:")]
    assert said, proc.stderr
    assert said[0].startswith(f"edgevllm cross: error: the tree's build runs {target}, a "
                              "program built for the target (aarch64)")
    assert "--toolchain emulated" in said[0]


def test_no_program_is_a_usage_error():
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True)
    assert proc.returncode == 2 and "needs the program" in proc.stderr
