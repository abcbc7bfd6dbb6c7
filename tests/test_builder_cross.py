"""The cross road on the host side (builder/cross/context.py) and in the build stage
(builder/cross/inimage_stage.py, run here with this machine's Python): the staged context, the
compile
key's input, the pyconfig.h stand-in, the refusals of a missing or old cross g++, and the
closure checks (target CUDA runtime, target torch) in one line each."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from edgevllm.builder.cross import inimage_stage
from edgevllm.builder.cross.context import (
    RUN_SCRIPT,
    SCRIPT,
    TOOLCHAIN,
    check_target_side,
    stage_cross,
)
from edgevllm.builder.render import cross_values, render_toolchain
from edgevllm.common.errors import SpecError
from edgevllm.sources.buildreqs import read_build_layout
from edgevllm.sources.wheels import Closure, WheelPin
from edgevllm.specs.buildspec import Builder, load_spec, resolve
from edgevllm.specs.cross import CrossRoad, cross_road


def the_road() -> CrossRoad:
    road = cross_road("linux/amd64", "linux/arm64")
    assert road is not None, "crossroads.yaml has no linux/amd64 -> linux/arm64 road"
    return road


ROAD = the_road()
FAKE_VLLM = Path(__file__).parent / "e2e" / "fixtures" / "fake-vllm"
SCRIPT_PATH = Path(inimage_stage.__file__)


def test_the_staged_context_holds_the_rendered_toolchain_and_the_script(tmp_path):
    digest = stage_cross(render_toolchain(ROAD), tmp_path / "ctx")
    assert sorted(p.name for p in (tmp_path / "ctx").iterdir()) == sorted(
        [SCRIPT, RUN_SCRIPT, TOOLCHAIN])
    toolchain = (tmp_path / "ctx" / TOOLCHAIN).read_text()
    assert toolchain == render_toolchain(ROAD)
    for line in ("set(CMAKE_SYSTEM_PROCESSOR aarch64)",
                 "set(CMAKE_CUDA_HOST_COMPILER aarch64-linux-gnu-g++)",
                 'set(CMAKE_CUDA_FLAGS_INIT "-target-dir sbsa-linux")',
                 "set(CMAKE_POLICY_DEFAULT_CMP0190 NEW)",
                 # torch's vendored FindCUDA reads the toolkit from the environment when
                 # cross-compiling (vLLM 0.33.0's find_package(Torch) failed without it)
                 'set(ENV{CUDA_TOOLKIT_ROOT} "${_edgevllm_cuda}")'):
        assert line in toolchain
    # the same bytes, the same key
    assert stage_cross(render_toolchain(ROAD), tmp_path / "again") == digest
    # Another road's compilers: another toolchain file, another compile key. (Its flags to the
    # script, min_gcc among them, are in the Dockerfile's text, which the key counts too.)
    other = ROAD.model_copy(update={"triple": "aarch64-unknown-linux-gnu"})
    assert stage_cross(render_toolchain(other), tmp_path / "other") != digest
    assert "aarch64-unknown-linux-gnu-g++" in (tmp_path / "other" / TOOLCHAIN).read_text()


def test_the_template_values_of_a_cross_compile_and_of_the_others():
    x86 = Builder(arch="amd64")
    cross = resolve(load_spec("thor", overrides={"mode": "compile"}), builder=x86)
    values = cross_values(cross)
    assert values is not None
    assert values["nvcc_flags"] == "-ccbin aarch64-linux-gnu-g++ -target-dir sbsa-linux"
    assert values["host_platform"] == "linux-aarch64" and values["aliases"] == ["aarch64-linux"]
    # CMP0190's default on CMake's command line: a project's cmake_minimum_required reads it
    # before project() reads the toolchain file (CMake 4, which vLLM 0.33.0's build brings, then
    # found no Python when cross-compiling).
    assert values["cmake_args"].split() == [
        "-DCMAKE_TOOLCHAIN_FILE=/opt/edgevllm-cross/toolchain.cmake",
        "-DCMAKE_POLICY_DEFAULT_CMP0190=NEW"]
    # A setup.py's torch extension (DeepGEMM's, on Spark) links the target's torch and CUDA
    # first and is named for the target (thor's Python: the closure venv's site-packages).
    version = cross.python.removeprefix("python")   # 3.12
    site = f"/opt/edgevllm-target/lib/python{version}/site-packages"
    assert values["ldflags"].split() == [
        f"-L{site}/torch/lib", "-L${CUDA_HOME:-/usr/local/cuda}/targets/sbsa-linux/lib"]
    assert values["ext_suffix"] == f".cpython-{version.replace('.', '')}-aarch64-linux-gnu.so"
    emulated = resolve(load_spec("thor", overrides={"mode": "compile", "toolchain": "emulated"}),
                       builder=x86)
    assert cross_values(emulated) is None
    assert cross_values(resolve(load_spec("thor"), builder=x86)) is None   # prebuilt


def closure_of(*names: str) -> Closure:
    pins = [WheelPin(name=n, version="1", filename=f"{n}-1-py3-none-any.whl", sha256="0" * 64)
            for n in names]
    return Closure(python_platform="aarch64-manylinux_2_34", python_version="3.12",
                   requirements=list(names), pins=pins)


def test_a_closure_without_the_targets_cuda_runtime_or_torch_is_one_line():
    eff = resolve(load_spec("spark", overrides={"mode": "compile"}), builder=Builder("amd64"))
    layout = read_build_layout(FAKE_VLLM)
    with pytest.raises(SpecError, match="no nvidia-cuda-runtime for linux/arm64.*--package"):
        check_target_side(eff, closure_of("packaging"), layout)
    check_target_side(eff, closure_of("nvidia-cuda-runtime"), layout)
    torch_tree = layout.__class__(**{**layout.__dict__, "builds_against_torch": True})
    with pytest.raises(SpecError, match="builds against torch and the closure holds no"):
        check_target_side(eff, closure_of("nvidia-cuda-runtime"), torch_tree)


def run_script(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT_PATH), *args], capture_output=True,
                          text=True, env=env, timeout=120)


def test_a_missing_or_old_cross_compiler_fails_the_step_in_one_line(tmp_path):
    gxx = shutil.which("g++")
    assert gxx, "g++ is missing: apt-get install g++"
    args = ["--triple", "aarch64-linux-gnu", "--target-dir", "sbsa-linux", "--target-venv",
            str(tmp_path)]
    proc = run_script("--compiler", "no-such-g++", "--min-gcc", "13", *args)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    assert "no-such-g++ is not in the build base image: add its package" in proc.stderr
    proc = run_script("--compiler", gxx, "--min-gcc", "99", *args)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    assert "vLLM's kernels need gcc >= 99" in proc.stderr and "Traceback" not in proc.stderr


def test_a_closure_without_cuda_runtime_fails_the_step_in_one_line(tmp_path):
    """The in-image check behind the host's (a lock edited by hand reaches the build)."""
    gxx = shutil.which("g++")
    assert gxx, "g++ is missing: apt-get install g++"
    cuda = tmp_path / "cuda"
    (cuda / "bin").mkdir(parents=True)
    (cuda / "bin" / "nvcc").write_text("")
    (cuda / "include").mkdir()
    (tmp_path / "venv" / "lib" / "python3.12" / "site-packages").mkdir(parents=True)
    proc = run_script("--compiler", gxx, "--min-gcc", "1", "--triple", "aarch64-linux-gnu",
                      "--target-dir", "sbsa-linux", "--target-venv", str(tmp_path / "venv"),
                      env={"CUDA_HOME": str(cuda), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 1, proc.stdout
    assert "the closure holds no CUDA runtime for the target" in proc.stderr


def test_pyconfig_of_the_target_stands_in_from_the_build_platforms(tmp_path):
    include = tmp_path / "usr" / "include"
    (include / "python3.13").mkdir(parents=True)
    (include / "python3.13" / "pyconfig.h").write_text(
        "# if defined(__x86_64__) && defined(__LP64__)\n"
        "#  include <x86_64-linux-gnu/python3.13/pyconfig.h>\n"
        "# elif defined(__aarch64__) && defined(__AARCH64EL__)\n"
        "#  include <aarch64-linux-gnu/python3.13/pyconfig.h>\n# endif\n")
    (include / "x86_64-linux-gnu" / "python3.13").mkdir(parents=True)
    (include / "x86_64-linux-gnu" / "python3.13" / "pyconfig.h").write_text("#define X 1\n")
    written = inimage_stage.python_config("aarch64-linux-gnu", tmp_path)
    target = tmp_path / "usr/aarch64-linux-gnu/include/aarch64-linux-gnu/python3.13/pyconfig.h"
    assert written == [target] and target.read_text() == "#define X 1\n"
    assert inimage_stage.python_config("aarch64-linux-gnu", tmp_path) == []  # kept, not redone
    assert inimage_stage.python_config("riscv64-linux-gnu", tmp_path) == []  # not in the wrapper


def test_render_names_the_toolchain_in_its_plan(tmp_path):
    """``inv render`` of a compile on this machine: the plan says which toolchain and why, and
    the cross road's context is one of the contexts it names where this machine is x86_64."""
    import json

    from edgevllm.builder.renderout import render_to
    from edgevllm.containers.host import host_arch

    render_to(load_spec("thor", overrides={"mode": "compile"}), tmp_path / "r")
    plan = json.loads((tmp_path / "r" / "build-plan.json").read_text())
    if host_arch() == "amd64":
        assert plan["toolchain"] == "cross (the linux/amd64 -> linux/arm64 cross road)"
        assert "edgevllm-cross" in plan["contexts"]
    else:
        assert plan["toolchain"].startswith("native (") and "edgevllm-cross" not in plan["contexts"]
    # The release with nothing on top: prebuilt on x86_64 (nothing compiles, no toolchain),
    # a native compile on arm64.
    render_to(load_spec("thor"), tmp_path / "p")
    release = json.loads((tmp_path / "p" / "build-plan.json").read_text())
    expected = ("prebuilt", "") if host_arch() == "amd64" else ("compile", "native")
    assert (release["mode"], release["toolchain"].split(" ")[0]) == expected


def test_the_libcuda_stub_defines_the_driver_api_so_the_link_keeps_it(tmp_path):
    """The stub answers every CUresult function of cuda.h under its exported name (cuda.h's
    macros applied: cuMemAlloc -> cuMemAlloc_v2). An extension linked against it with
    ``--as-needed`` then records libcuda.so.1 as needed, as one built against the driver does;
    with the bare stub of before, vLLM 0.33.0's cumem_allocator lost the entry and failed to
    load (undefined symbol: cuMemRelease). Run with this machine's gcc (the build stage's cross
    gcc takes the same arguments)."""
    include = tmp_path / "include"
    include.mkdir()
    (include / "cuda.h").write_text(
        "typedef int CUresult;\n#define CUDAAPI\n#define cuMemAlloc cuMemAlloc_v2\n"
        "CUresult CUDAAPI cuMemRelease(unsigned long long handle);\n"
        "CUresult CUDAAPI cuMemAlloc(void **ptr, unsigned long bytes);\n"
        "const char *cuNotADriverFunction(void);\n")
    lib = tmp_path / "lib"
    lib.mkdir()
    assert inimage_stage.driver_stub(lib, "gcc", include) == 2
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(lib / "libcuda.so")],
                             capture_output=True, text=True, check=True).stdout.split()
    assert {"cuMemRelease", "cuMemAlloc_v2"} <= set(symbols) and "cuMemAlloc" not in symbols
    (tmp_path / "ext.c").write_text("int cuMemRelease(unsigned long long);\n"
                                    "int release(void) { return cuMemRelease(0); }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", str(tmp_path / "ext.c"), "-o",
                    str(tmp_path / "ext.so"), "-Wl,--as-needed", f"-L{lib}", "-lcuda"],
                   check=True)
    dynamic = subprocess.run(["readelf", "-d", str(tmp_path / "ext.so")], capture_output=True,
                             text=True, check=True).stdout
    assert "Shared library: [libcuda.so.1]" in dynamic
    (include / "cuda.h").write_text("/* no driver API */\n")
    with pytest.raises(SystemExit):
        inimage_stage.driver_stub(tmp_path / "other", "gcc", include)
