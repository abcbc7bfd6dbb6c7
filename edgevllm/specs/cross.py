"""Cross-compiling: which builder builds which target platform's kernels with its own CUDA
compiler, and with what (the one owner of the cross toolchain's facts).

The facts are data (``crossroads.yaml`` beside this module): the GNU triple of the cross
compilers, nvcc's ``-target-dir``, the least g++ and CUDA versions, the packages that give the
compiler, the wheel's platform tag. The compile mode's cross stages
(``dockerfiles/compile.Dockerfile.j2``), the CMake toolchain file
(``dockerfiles/cross-toolchain.cmake.j2``, rendered by ``builder/render.py``), the mode rule
(``specs/buildspec.py``) and the bench read them here, nowhere else.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from edgevllm.common.errors import MissingToolError, SpecError
from edgevllm.common.grammar import AptPackage, CudaVersion, Name, Platform
from edgevllm.common.schema import Strict, load_model

ROADS_FILE = Path(__file__).with_name("crossroads.yaml")
# How a compile runs on its builder: its own platform, a cross road, or the target's compiler
# under emulation.
Toolchain = Literal["native", "cross", "emulated"]
_TRIPLE = re.compile(r"[a-z0-9_]+(-[a-z0-9_]+){1,3}\Z")


def _triple(value: str) -> str:
    if not _TRIPLE.match(value):
        raise ValueError(f"'{value}' is not a GNU triple such as aarch64-linux-gnu")
    return value


class CrossRoad(Strict):
    """One road: ``build_platform``'s CUDA compiler and cross g++ building ``target_platform``.
    Every field reaches a Dockerfile, a CMake file or a shell line: each has its grammar."""

    build_platform: Platform
    target_platform: Platform
    triple: Annotated[Name, AfterValidator(_triple)]
    cmake_system_processor: Name
    cuda_target_dir: Name
    cuda_target_aliases: list[Name] = []
    min_gcc: int = Field(ge=1, le=99)
    min_cuda: CudaVersion
    apt_packages: list[AptPackage] = []
    wheel_platform: Name

    @property
    def host_compiler(self) -> str:
        """The cross C++ compiler: nvcc's host compiler (``-ccbin``) and CMake's CXX."""
        return f"{self.triple}-g++"

    @property
    def c_compiler(self) -> str:
        return f"{self.triple}-gcc"

    def nvcc_flags(self) -> list[str]:
        """What every nvcc call of the build adds (``NVCC_PREPEND_FLAGS``): the cross host
        compiler and the target's folder of headers and libraries. CMake never passes
        ``-target-dir`` itself, so the build puts both where every nvcc call sees them."""
        return ["-ccbin", self.host_compiler, "-target-dir", self.cuda_target_dir]

    def covers_cuda(self, version: str) -> bool:
        return _version_tuple(version) >= _version_tuple(self.min_cuda)


class CrossRoads(Strict):
    roads: list[CrossRoad]


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


@functools.lru_cache(maxsize=1)
def all_roads() -> tuple[CrossRoad, ...]:
    return tuple(load_model(CrossRoads, ROADS_FILE).roads)


def cross_road(build_platform: str, target_platform: str) -> CrossRoad | None:
    """The road from ``build_platform`` to ``target_platform``; None where there is none."""
    for road in all_roads():
        if (road.build_platform, road.target_platform) == (build_platform, target_platform):
            return road
    return None


def road_for_target(build_platform: str, target_platform: str, cuda_version: str,
                    target_name: str) -> CrossRoad:
    """The road a cross build of this target takes, or one line saying why there is none."""
    road = cross_road(build_platform, target_platform)
    if road is None:
        known = ", ".join(f"{r.build_platform} -> {r.target_platform}" for r in all_roads())
        raise SpecError(f"toolchain cross: no cross road from {build_platform} to "
                        f"{target_platform} (target '{target_name}'); edgevllm cross-compiles "
                        f"{known}: build on a {target_platform} engine, or --toolchain emulated")
    if not road.covers_cuda(cuda_version):
        raise SpecError(f"toolchain cross: target '{target_name}' has CUDA {cuda_version}; the "
                        f"{road.cuda_target_dir} road needs CUDA >= {road.min_cuda} (before it, "
                        "Jetson was a target of its own): --toolchain emulated")
    return road


def gcc_major(version: str) -> int | None:
    """``14.2.0`` / ``13`` → the major version; None when the text is no version."""
    found = re.match(r"(\d+)(\.\d+)*\s*\Z", version.strip())
    return int(found[1]) if found else None


def check_host_compiler(road: CrossRoad) -> str:
    """This machine's cross g++ for ``road``: its version, or one line naming what to install
    (the bench and tests compile on the host; a build checks inside its own base image)."""
    install = " ".join(road.apt_packages) or road.host_compiler
    path = shutil.which(road.host_compiler)
    if path is None:
        raise MissingToolError(f"{road.host_compiler} is missing: install a cross g++ >= "
                               f"{road.min_gcc} (apt-get install {install}; on Debian bookworm "
                               "take it from trixie, whose is gcc 14)")
    proc = subprocess.run([path, "-dumpfullversion"], capture_output=True, text=True,
                          timeout=30)
    version = proc.stdout.strip()
    major = gcc_major(version)
    if proc.returncode != 0 or major is None:
        raise MissingToolError(f"{road.host_compiler} -dumpfullversion did not answer a version: "
                               f"reinstall it (apt-get install {install})")
    if major < road.min_gcc:
        raise MissingToolError(f"{road.host_compiler} is gcc {version}; vLLM's kernels need gcc "
                               f">= {road.min_gcc} (apt-get install {install} from a newer suite: "
                               "Ubuntu 24.04, Debian trixie)")
    return version


def compile_toolchain(asked: str | None, builder_arch: str | None, platform: str,
                      cuda_version: str, target_name: str
                      ) -> tuple[Toolchain, CrossRoad | None, str]:
    """How a compile of ``platform`` runs on a builder of ``builder_arch`` (None: not known, e.g.
    ``inv plan``), and why: ``native`` on its own platform; else ``cross`` where a road exists
    (the default) or was asked for (``toolchain: cross``, refused in one line without a road);
    ``emulated`` (the target's own compiler under qemu) where asked for or where no road goes
    (a piece the road cannot build is left out by name instead: the target's ``leave_out``)."""
    if builder_arch is None:  # nothing compiles here (a plan, a look at the target)
        return "native", None, "no builder named"
    if platform == f"linux/{builder_arch}":
        if asked == "cross":
            raise SpecError(f"toolchain cross: this builder builds {platform} natively; drop "
                            "--toolchain cross")
        return "native", None, f"{platform} is this builder's own platform"
    build_platform = f"linux/{builder_arch}"
    if asked == "emulated":
        return "emulated", None, "--toolchain emulated asked for"
    if asked == "cross":
        road = road_for_target(build_platform, platform, cuda_version, target_name)
        return "cross", road, "--toolchain cross asked for"
    found = cross_road(build_platform, platform)
    if found is None or not found.covers_cuda(cuda_version):
        return "emulated", None, f"no cross road from {build_platform} for this target"
    return "cross", found, f"the {found.build_platform} -> {found.target_platform} cross road"
