"""The cross road's toolchain on this machine, without Docker: the rendered CMake toolchain
file (dockerfiles/cross-toolchain.cmake.j2), the in-image assembly of ``targets/sbsa-linux``
(builder/cross_inimage.py, run here as the build stage runs it) and a real CMake CUDA project
configured and built with them: the x86_64 nvcc 13.0 with Debian's aarch64 cross g++.

Checks: every library is an aarch64 ELF, verify finds the asked SASS (sm_121a for spark, sm_110a
for thor) and nothing else, and the link took the target's CUDA runtime from the aarch64 wheels
(the only cudart in the target folder). The target side is NVIDIA's aarch64 CUDA wheels from
PyPI, laid out as a closure's venv. No Docker: marked e2e because it compiles for a minute.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from edgevllm.builder import cross_inimage
from edgevllm.builder.render import render_toolchain
from edgevllm.specs.cross import CrossRoad, check_host_compiler, cross_road
from edgevllm.verify.api import scan_path
from support.cuda_libs import require_nvcc
from support.downloads import pypi_download

pytestmark = pytest.mark.e2e



def the_road() -> CrossRoad:
    road = cross_road("linux/amd64", "linux/arm64")
    assert road is not None, "crossroads.yaml has no linux/amd64 -> linux/arm64 road"
    return road


ROAD = the_road()
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


@pytest.fixture(scope="module")
def cross_cuda(tmp_path_factory):
    """A CUDA root as the build stage makes it: the build's nvcc (bin/ and nvvm/ real copies,
    as nvcc needs), its headers, and targets/sbsa-linux assembled by cross_inimage.py from a
    venv of the aarch64 CUDA wheels."""
    check_host_compiler(ROAD)
    nvcc = require_nvcc()
    if shutil.which("cmake") is None:
        pytest.fail("cmake is missing: install cmake >= 3.25 (apt-get install cmake)")
    source = Path(os.path.realpath(nvcc)).parent.parent
    root = tmp_path_factory.mktemp("cross")
    cuda = root / "cuda"
    for part in ("bin", "nvvm", "include"):
        shutil.copytree(source / part, cuda / part, symlinks=True)
    site = root / "venv" / "lib" / "python3.12" / "site-packages"
    site.mkdir(parents=True)
    for spec in TARGET_WHEELS:
        with zipfile.ZipFile(pypi_download(spec, AARCH64_TAGS, "3.12")) as zf:
            zf.extractall(site)
    proc = subprocess.run(
        [sys.executable, cross_inimage.__file__, "--compiler", ROAD.host_compiler,
         "--triple", "none-linux-gnu",   # no pyconfig.h is written into this host's /usr
         "--min-gcc", str(ROAD.min_gcc), "--target-dir", ROAD.cuda_target_dir,
         *[a for alias in ROAD.cuda_target_aliases for a in ("--alias", alias)],
         "--target-venv", str(root / "venv")],
        capture_output=True, text=True, env={**os.environ, "CUDA_HOME": str(cuda)}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "target libraries" in proc.stdout
    return cuda


@pytest.mark.parametrize("target,arch,sass", [("spark", "121a", "sm_121a"),
                                              ("thor", "110a", "sm_110a")])
def test_cmake_builds_aarch64_kernels_with_the_rendered_toolchain(cross_cuda, tmp_path, target,
                                                                  arch, sass):
    src = tmp_path / "src"
    src.mkdir()
    (src / "kernel.cu").write_text(KERNEL)
    (src / "CMakeLists.txt").write_text(PROJECT.format(arch=arch))
    toolchain = tmp_path / "toolchain.cmake"
    toolchain.write_text(render_toolchain(ROAD))
    env = {**os.environ, "CUDA_HOME": str(cross_cuda), "CUDACXX": str(cross_cuda / "bin/nvcc")}
    for argv in (["cmake", "-S", str(src), "-B", str(tmp_path / "b"),
                  f"-DCMAKE_TOOLCHAIN_FILE={toolchain}"],
                 ["cmake", "--build", str(tmp_path / "b")]):
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    library = tmp_path / "b" / "libprobe.so"
    assert library.read_bytes()[18:20] == (183).to_bytes(2, "little"), "not an aarch64 ELF"
    assert [r.arches("sass") for r in scan_path(library)] == [[sass]]
    cache = (tmp_path / "b" / "CMakeCache.txt").read_text()
    assert f"{cross_cuda}/targets/sbsa-linux" in cache or "aarch64-linux" in cache
