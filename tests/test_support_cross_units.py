"""tests/support/cross_units.py, the parts that need no compiler: the nvcc command line of each
mode (the cross road's flags only in cross mode), the container script (bash parses it; a unit's
arguments survive its quoting) and the host compiler check (an old or missing g++ fails naming
the packages). The compiles themselves are tests/e2e/test_cross_units.py."""

from __future__ import annotations

import subprocess

import pytest

from support import cross_units as cu

ARGS = ["-gencode", "arch=compute_121a,code=sm_121a", "-DX='a b'", "-Icsrc", "-std=c++20"]


def test_the_cross_road_flags_are_in_the_cross_command_line_only():
    cross = cu.nvcc_argv("cross", "csrc/activation_kernels.cu", ARGS)
    native = cu.nvcc_argv("native", "csrc/activation_kernels.cu", ARGS)
    flags = cu.road().nvcc_flags()
    assert flags == ["-ccbin", "aarch64-linux-gnu-g++", "-target-dir", "sbsa-linux"]
    assert cross[1:5] == flags and native[1] == "-c"
    assert cross[5:] == native[1:]
    assert native[-2:] == ["-o", "/out/csrc__activation_kernels.o"]


def test_the_script_parses_and_keeps_the_arguments(tmp_path):
    script = cu._script("cross", {"csrc/a.cu": ARGS, "csrc/moe/b.cu": ARGS}, parallel=True)
    (tmp_path / "s.sh").write_text(script)
    assert subprocess.run(["bash", "-n", str(tmp_path / "s.sh")]).returncode == 0
    assert "aarch64-linux-gnu-g++ -dumpfullversion" in script
    line = next(x for x in script.splitlines() if x.startswith("run csrc__moe__b "))
    words = subprocess.run(["bash", "-c", f"printf '%s\\n' {line.removeprefix('run ')}"],
                           capture_output=True, text=True).stdout.splitlines()
    assert words[0] == "csrc__moe__b" and words[1].endswith("/bin/nvcc")
    assert "-DX='a b'" in words and words[-1] == "/out/csrc__moe__b.o" and line.endswith(" &")


@pytest.mark.parametrize("version,ok", [("14.2.0", True), ("13", True), ("12.2.0", False),
                                        ("missing", False)])
def test_the_host_compiler_check(tmp_path, version, ok):
    (tmp_path / "host-compiler.version").write_text(version + "\n")
    if ok:
        assert cu.check_host_compiler_version(tmp_path, "cross") == version
    else:
        with pytest.raises(AssertionError, match="g\\+\\+-aarch64-linux-gnu"):
            cu.check_host_compiler_version(tmp_path, "cross")
