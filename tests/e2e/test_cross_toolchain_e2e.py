"""The cross road's toolchain where a build runs it, with CMake: the rendered toolchain file
(dockerfiles/cross-toolchain.cmake.j2) and the assembly of ``targets/sbsa-linux``
(builder/cross/inimage_stage.py) in the cross build base (support/images.cross_cuda_image: Debian
trixie, its aarch64 cross g++ 14, cmake, the x86_64 CUDA 13.0 compiler from NVIDIA's wheels),
then a real CMake CUDA project configured and built with them, as vLLM's CMake is on the road.

Checks: the library is an aarch64 ELF, verify finds the asked SASS (sm_121a for spark, sm_110a
for thor) and nothing else; CMake found the CUDA toolkit through the target folder (its
``aarch64-linux`` name, as CMake's FindCUDAToolkit looks it up). The target side is NVIDIA's
aarch64 CUDA wheels from PyPI laid out as a closure's venv, mounted as a build step mounts the
closure. On an arm64 host there is no cross road: the build base is the native one and the test
checks the native build of the same project instead.

The toolchain's emulator (builder/cross/inimage_run.py) in the same base: FindPython's interpreter
runs
through it, and a project whose configure runs a target program (``try_run``) stops with its
one line.
"""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import pytest

from edgevllm.builder.cross import inimage_run, inimage_stage
from edgevllm.builder.render import render_toolchain
from edgevllm.common.labels import CROSS_RUN
from edgevllm.specs.cross import CrossRoad, cross_road
from edgevllm.verify.api import scan_path
from support.downloads import pypi_download

pytestmark = pytest.mark.e2e

TARGET_WHEELS = ["nvidia-cuda-runtime==13.0.96", "nvidia-cuda-cccl==13.0.85",
                 "nvidia-cuda-crt==13.0.88"]
AARCH64_TAGS = ["manylinux_2_17_aarch64", "manylinux2014_aarch64"]
KERNEL = """
__global__ void scale(float* x, float f) { x[threadIdx.x] *= f; }
extern "C" int edgevllm_scale(float* x, float f) {
  scale<<<1, 32>>>(x, f);
  return (int)cudaDeviceSynchronize();
}
"""
PROJECT = """
cmake_minimum_required(VERSION 3.25)
project(crossprobe LANGUAGES CXX CUDA)
find_package(CUDAToolkit REQUIRED)
add_library(probe SHARED kernel.cu)
target_link_libraries(probe PRIVATE CUDA::cudart)
set_target_properties(probe PROPERTIES CUDA_ARCHITECTURES "{arch}")
"""


def the_road() -> CrossRoad:
    road = cross_road("linux/amd64", "linux/arm64")
    assert road is not None, "crossroads.yaml has no linux/amd64 -> linux/arm64 road"
    return road


@pytest.fixture(scope="module")
def target_venv(tmp_path_factory) -> Path:
    """A venv folder of the aarch64 CUDA wheels, as the closure holds them."""
    venv = tmp_path_factory.mktemp("target-venv")
    site = venv / "lib" / "python3.12" / "site-packages"
    site.mkdir(parents=True)
    for spec in TARGET_WHEELS:
        with zipfile.ZipFile(pypi_download(spec, AARCH64_TAGS, "3.12")) as zf:
            zf.extractall(site)
    return venv


def script(road: CrossRoad) -> str:
    """What the build stage runs (compile.Dockerfile.j2), then CMake on the project."""
    aliases = " ".join(f"--alias {a}" for a in road.cuda_target_aliases)
    return (f"set -e; install -D -m 0755 /cross/inimage_run.py {CROSS_RUN}; "
            f"python3 /cross/inimage_stage.py --compiler {road.host_compiler} "
            f"--triple {road.triple} --min-gcc {road.min_gcc} --target-dir "
            f"{road.cuda_target_dir} {aliases} --target-venv /opt/edgevllm-target; "
            "cmake -S /work/src -B /work/b -DCMAKE_TOOLCHAIN_FILE=/cross/toolchain.cmake "
            "-DCMAKE_CUDA_COMPILER=$CUDA_HOME/bin/nvcc; cmake --build /work/b; "
            "grep -h 'CUDAToolkit_LIBRARY_ROOT\\|CUDA_CUDART:' /work/b/CMakeCache.txt")


def stage_scripts(folder: Path) -> None:
    for module in (inimage_stage, inimage_run):
        shutil.copyfile(str(module.__file__), folder / Path(str(module.__file__)).name)


@pytest.mark.parametrize("arch,sass", [("121a", "sm_121a"), ("110a", "sm_110a")])
def test_cmake_builds_aarch64_kernels_with_the_rendered_toolchain(engine, target_venv, tmp_path,
                                                                  arch, sass):
    from edgevllm.containers.docker import RunOptions
    from support.images import cross_cuda_image
    from support.platforms import native_arch

    road = the_road()
    (tmp_path / "cross").mkdir()
    (tmp_path / "cross" / "toolchain.cmake").write_text(render_toolchain(road))
    stage_scripts(tmp_path / "cross")
    (tmp_path / "work" / "src").mkdir(parents=True)
    (tmp_path / "work" / "src" / "kernel.cu").write_text(KERNEL)
    (tmp_path / "work" / "src" / "CMakeLists.txt").write_text(PROJECT.format(arch=arch))
    native = native_arch() != "amd64"   # an arm64 host: no road, CMake builds natively
    command = ("set -e; cmake -S /work/src -B /work/b; cmake --build /work/b" if native
               else script(road))
    proc = engine.run(RunOptions(
        image=cross_cuda_image(engine), remove=True, command=["bash", "-c", command],
        volumes=[f"{tmp_path / 'cross'}:/cross:ro", f"{tmp_path / 'work'}:/work",
                 f"{target_venv}:/opt/edgevllm-target:ro"]), timeout=900)
    assert proc.returncode == 0, proc.stdout.decode()[-3000:] + proc.stderr.decode()[-3000:]
    library = tmp_path / "work" / "b" / "libprobe.so"
    assert library.read_bytes()[18:20] == (183).to_bytes(2, "little"), "not an aarch64 ELF"
    assert [r.arches("sass") for r in scan_path(library)] == [[sass]]
    if not native:   # CMake took cudart from the target's folder, under its aarch64-linux name
        found = proc.stdout.decode()
        assert "targets/aarch64-linux" in found or "targets/sbsa-linux" in found, found


# FindPython asks the interpreter through the emulator (the build's x86_64 python3 runs); then a
# try_run of a program compiled for the target, which nothing on this builder may run.
TRY_RUN_PROJECT = """
cmake_minimum_required(VERSION 3.25)
project(tryrun LANGUAGES C)
find_package(Python3 REQUIRED COMPONENTS Interpreter)
message(STATUS "edgevllm-python: ${Python3_EXECUTABLE}")
file(WRITE ${CMAKE_BINARY_DIR}/probe.c "int main(void) { return 0; }")
try_run(RUN_CODE COMPILE_OK ${CMAKE_BINARY_DIR}/tr ${CMAKE_BINARY_DIR}/probe.c)
message(STATUS "edgevllm-ran: ${RUN_CODE}")
"""


def test_the_emulator_runs_the_interpreter_and_refuses_a_target_program(engine, tmp_path):
    from edgevllm.containers.docker import RunOptions
    from support.images import cross_cuda_image
    from support.platforms import native_arch

    if native_arch() != "amd64":
        pytest.fail("this test needs an x86_64 host: the cross road starts there")
    road = the_road()
    (tmp_path / "cross").mkdir()
    (tmp_path / "cross" / "toolchain.cmake").write_text(render_toolchain(road))
    stage_scripts(tmp_path / "cross")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "CMakeLists.txt").write_text(TRY_RUN_PROJECT)
    command = (f"install -D -m 0755 /cross/inimage_run.py {CROSS_RUN}; "
               "cmake -S /src -B /tmp/b -DCMAKE_TOOLCHAIN_FILE=/cross/toolchain.cmake 2>&1")
    proc = engine.run(RunOptions(
        image=cross_cuda_image(engine), remove=True, command=["bash", "-c", command],
        volumes=[f"{tmp_path / 'cross'}:/cross:ro", f"{tmp_path / 'src'}:/src:ro"]),
        timeout=300)
    out = proc.stdout.decode()
    assert proc.returncode != 0, out[-3000:]   # CMake was stopped, not handed an exit code
    assert "-- edgevllm-python: " in out, out[-3000:]   # the interpreter ran through the emulator
    assert "edgevllm cross: error: the tree's build runs " in out, out[-3000:]
    assert "a program built for the target (aarch64)" in out
    assert "--toolchain emulated" in out
    assert "edgevllm-ran: 0" not in out   # the target program never ran (binfmt or not)
