"""Real vLLM 0.33.0 translation units compiled three ways: native x86_64, cross for aarch64, and
by the arm64 nvcc under qemu; then their cubins compared by sha256.

The units come from PyPI's vLLM 0.33.0 sdist, prepared for a target as the build prepares them
(the target's source patches applied: ``vllm-cmake-keep-121a`` for Spark), and each is compiled
with the arguments the kernel plan reads from the tree's own CMake (``KernelPlan.nvcc_args``),
plus what CMake and torch's CMake add on their own: torch's include folders (the torch 2.14.0
wheel), cuBLAS headers, ``-Xcompiler=-fPIC`` and ``-O2`` (as tests/e2e/test_compile_slice.py).

The three compilers, all CUDA 13.0.88 from NVIDIA's PyPI wheels (``support.images.CUDA_WHEELS``):

- ``native``: the x86_64 nvcc with the x86_64 g++, in a linux/amd64 Debian trixie container;
- ``cross``: the same nvcc in the same container with ``edgevllm.specs.cross``'s road: Debian
  trixie's ``aarch64-linux-gnu-g++`` (GCC 14) as host compiler and ``-target-dir sbsa-linux``,
  the sbsa target folder assembled from the aarch64 wheels (headers, ``libcudart``); ``bin/`` and
  ``nvvm/`` are real copies, as nvcc wants;
- ``qemu``: the aarch64 nvcc (the same wheels for aarch64) with Debian's aarch64 g++, in a
  linux/arm64 container: every program of the compile under qemu, as the compile mode runs today
  on an x86_64 builder.

The cross compiler lives in a container rather than on the host: Debian bookworm's own cross g++
is GCC 12 (vLLM 0.33.0's CMake wants >= 13) and trixie's needs trixie's glibc, so it is installed
in a debootstrapped trixie root (``support.images.debian_image``), like the build's own stages.
Each compile is timed inside its container (bash's ``time``: wall, user and system seconds).
"""

from __future__ import annotations

import ast
import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from edgevllm.containers.docker import DockerEngine
from edgevllm.containers.options import RunOptions
from edgevllm.mods.patches import apply_source_patches
from edgevllm.sources.kernelplan import KernelPlan
from edgevllm.sources.plan import plan_for_target
from edgevllm.specs.cross import CrossRoad, cross_road, gcc_major
from edgevllm.specs.targets import load_target

from .cuda_libs import cuobjdump_binary
from .downloads import file_lock, pypi_download, test_cache_dir
from .images import CUDA_WHEELS, debian_image, download_wheels

VLLM_VERSION = "0.33.0"
TORCH = ("torch==2.14.0", ["manylinux_2_28_aarch64"], "3.12")   # headers: same on every arch
CUBLAS = ("nvidia-cublas==13.1.1.3", ["manylinux_2_27_x86_64"], None)   # headers: the same too
CROSS_SUITE = "trixie"     # GCC 14 for x86_64, and the road's cross compiler (apt_packages)
QEMU_SUITE = "trixie"                  # the same GCC 14, native aarch64
QEMU_PACKAGES = ["g++"]
SMALL_UNIT = "csrc/activation_kernels.cu"
MODES = ("native", "cross", "qemu")
PLATFORMS = {"native": "linux/amd64", "cross": "linux/amd64", "qemu": "linux/arm64"}
_SRC, _OUT, _CUDA = "/src", "/out", "/usr/local/cuda"
_INCLUDES = {"torch": "/inc/torch", "torch-api": "/inc/torch-api", "cublas": "/inc/cublas"}


@dataclass
class Compiled:
    """One unit compiled one way: the object, its cubins' sha256 and its seconds."""

    unit: str
    mode: str
    obj: Path
    wall_s: float
    cpu_s: float                       # user + system of every process of the compile
    cubins: dict[str, str]             # cuobjdump's file name (sm_121a ...) -> sha256


def road() -> CrossRoad:
    found = cross_road("linux/amd64", "linux/arm64")
    if found is None:
        raise AssertionError("edgevllm.specs.cross knows no road from linux/amd64 to linux/arm64")
    return found


def cross_packages() -> list[str]:
    """What the cross image installs: g++ for the native build, the road's cross compiler."""
    return ["g++", *road().apt_packages]


# --- the tree and its plan ------------------------------------------------------------------------
def wheel_members(wheel: Path, prefix: str, name: str) -> Path:
    """Members of ``wheel`` under ``prefix``, extracted once into the test cache."""
    root = test_cache_dir("compile-slice")
    final = root / name
    with file_lock(root / f".{name}.lock"):
        if not final.is_dir():
            tmp = root / f".{name}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            with zipfile.ZipFile(wheel) as zf:
                zf.extractall(tmp, [m for m in zf.namelist() if m.startswith(prefix)])
            tmp.rename(final)
    return final


def torch_nvcc_flags(wheel: Path) -> list[str]:
    """torch's own COMMON_NVCC_FLAGS, read from the wheel (what vLLM's CMake asks torch for)."""
    with zipfile.ZipFile(wheel) as zf:
        source = zf.read("torch/utils/cpp_extension.py").decode()
    for node in ast.parse(source).body:
        name = getattr(node.targets[0], "id", "") if isinstance(node, ast.Assign) else ""
        if name == "COMMON_NVCC_FLAGS" and isinstance(node, ast.Assign):
            return ast.literal_eval(node.value)
    raise AssertionError("COMMON_NVCC_FLAGS not found in torch/utils/cpp_extension.py")


def header_folders() -> dict[str, Path]:
    """torch's two include folders and cuBLAS's (torch includes it), by their mount names."""
    torch_root = wheel_members(pypi_download(*TORCH), "torch/include/", "torch-2.14.0-include")
    cublas_root = wheel_members(pypi_download(*CUBLAS), "nvidia/cu13/include/",
                                 "cublas-13.1.1.3-include")
    include = torch_root / "torch" / "include"
    return {"torch": include, "torch-api": include / "torch" / "csrc" / "api" / "include",
            "cublas": cublas_root / "nvidia" / "cu13" / "include"}


def vllm_tree(target_name: str, dest: Path) -> Path:
    """vLLM 0.33.0's CMake files and csrc/ from PyPI's sdist, with the target's source patches
    applied as the build applies them."""
    from .sdists import sdist_tree_cached

    shutil.copytree(sdist_tree_cached("vllm", VLLM_VERSION, ["CMakeLists.txt", "cmake/", "csrc/"]),
                    dest)
    apply_source_patches(dest, target_name, VLLM_VERSION)
    return dest


def unit_plan(tree: Path, target_name: str) -> KernelPlan:
    """The kernel plan of ``tree`` for the target, with torch 2.14.0's own nvcc flags."""
    return plan_for_target(tree, load_target(target_name), torch_version="2.14.0",
                           torch_nvcc_flags=torch_nvcc_flags(pypi_download(*TORCH)))


def plan_units(plan: KernelPlan) -> int:
    """How many CUDA translation units the plan compiles (what the compile mode counts)."""
    return sum(e.cuda_sources for e in plan.extensions if e.language == "CUDA")


# --- the toolkits ---------------------------------------------------------------------------------
def _unpack(wheels: Path, dest: Path) -> None:
    for wheel in sorted(wheels.glob("*.whl")):
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(dest)
    top = dest / "nvidia" / "cu13"
    for folder in (top / "bin", top / "nvvm" / "bin"):
        for path in folder.iterdir():
            path.chmod(0o755)


def toolkit(arch: str) -> Path:
    """The CUDA 13.0 toolkit of ``arch``'s wheels in nvcc's layout (``bin``, ``nvvm``,
    ``include``, ``lib``, ``targets/<native>``); for amd64 also ``targets/sbsa-linux`` from the
    aarch64 wheels: the cross target. Assembled once in the test cache."""
    wheels = {a: download_wheels(a, CUDA_WHEELS) for a in {arch, "arm64"}}
    key = hashlib.sha256(repr(sorted((a, sorted(p.name for p in w.glob("*.whl")))
                                     for a, w in wheels.items())).encode()).hexdigest()[:12]
    root = test_cache_dir("cross-units")
    final = root / f"cuda-13.0-{arch}-{key}"
    with file_lock(root / f".{final.name}.lock"):
        if final.is_dir():
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=root))
        try:
            _unpack(wheels[arch], tmp / "own")
            top = tmp / "own" / "nvidia" / "cu13"
            native = top / "targets" / ("sbsa-linux" if arch == "arm64" else "x86_64-linux")
            native.mkdir(parents=True)
            for name in ("include", "lib"):
                (native / name).symlink_to(Path("..", "..", name))
            if arch != "arm64":
                _unpack(wheels["arm64"], tmp / "sbsa")
                sbsa = top / "targets" / road().cuda_target_dir
                sbsa.mkdir(parents=True)
                for name in ("include", "lib"):
                    shutil.move(str(tmp / "sbsa" / "nvidia" / "cu13" / name), sbsa / name)
            top.rename(tmp / "cuda")
            tmp.chmod(0o755)
            os.replace(tmp / "cuda", final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def images(engine: DockerEngine) -> dict[str, str]:
    """The image each mode compiles in: a trixie root with g++ and the cross g++ (linux/amd64),
    a trixie root with g++ (linux/arm64, built under qemu)."""
    try:
        cross = debian_image(engine, "amd64", CROSS_SUITE, cross_packages())
        qemu = debian_image(engine, "arm64", QEMU_SUITE, QEMU_PACKAGES)
    except subprocess.CalledProcessError as exc:
        raise AssertionError(
            f"debootstrap of Debian {CROSS_SUITE} with {' '.join(cross_packages())} failed "
            f"({exc}): the cross compiler is Debian {CROSS_SUITE}'s (GCC >= {road().min_gcc}); "
            "this host needs debootstrap, qemu-user-static and access to deb.debian.org "
            "(bash .ci/install-engine.sh)") from None
    return {"native": cross, "cross": cross, "qemu": qemu}


# --- compiling ------------------------------------------------------------------------------------
def object_name(unit: str) -> str:
    """``csrc/moe/topk.cu`` -> ``csrc__moe__topk``: one flat name per unit."""
    return unit.removesuffix(".cu").replace("/", "__")


def nvcc_argv(mode: str, unit: str, args: list[str]) -> list[str]:
    """The nvcc command line of ``unit`` in ``mode``'s container: the plan's arguments, torch's
    and cuBLAS's headers, -fPIC and -O2; in cross mode the road's ``-ccbin``/``-target-dir``."""
    extra = road().nvcc_flags() if mode == "cross" else []
    includes = [f"-I{path}" for path in _INCLUDES.values()]
    return [f"{_CUDA}/bin/nvcc", *extra, "-c", unit, *args, *includes, "-Xcompiler=-fPIC", "-O2",
            "-o", f"{_OUT}/{object_name(unit)}.o"]


def _script(mode: str, jobs: dict[str, list[str]], parallel: bool) -> str:
    """A bash script for the container: the host compiler's version, then each nvcc under
    bash's ``time`` (wall, user, system seconds into NAME.time, the exit code into NAME.rc)."""
    compiler = road().host_compiler if mode == "cross" else "g++"
    lines = ["set -u", f"cd {_SRC}", "TIMEFORMAT='%R %U %S'",
             f"{compiler} -dumpfullversion > {_OUT}/host-compiler.version 2>&1 || "
             f"echo missing > {_OUT}/host-compiler.version",
             "run() { name=$1; shift; { time \"$@\" > /out/$name.log 2>&1; } 2> /out/$name.time;"
             " echo $? > /out/$name.rc; }"]
    for unit, args in jobs.items():
        quoted = " ".join(_quote(a) for a in nvcc_argv(mode, unit, args))
        lines.append(f"run {object_name(unit)} {quoted}{' &' if parallel else ''}")
    lines.append("wait")
    return "\n".join(lines) + "\n"


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"


def check_host_compiler_version(out_dir: Path, mode: str) -> str:
    """The container's host compiler version; fails naming the package when it is missing or
    older than the road's minimum."""
    version = (out_dir / "host-compiler.version").read_text().strip()
    name = road().host_compiler if mode == "cross" else "g++"
    major = gcc_major(version)
    if major is None or major < road().min_gcc:
        raise AssertionError(
            f"{mode}: {name} in the {CROSS_SUITE} image is '{version}', need GCC >= "
            f"{road().min_gcc}: the image needs Debian {CROSS_SUITE}'s "
            f"{' '.join(cross_packages())} (Ubuntu 24.04: g++-13-aarch64-linux-gnu)")
    return version


def compile_units(engine: DockerEngine, image: str, mode: str, tree: Path,
                  jobs: dict[str, list[str]], out_dir: Path, parallel: bool = True
                  ) -> dict[str, Compiled]:
    """``nvcc -c`` of every unit of ``jobs`` (unit -> the plan's arguments) in ``mode``'s
    container, at once (``parallel``) or one after the other; the objects land in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "compile.sh").write_text(_script(mode, jobs, parallel))
    arch = PLATFORMS[mode].split("/")[1]
    volumes = [f"{tree}:{_SRC}:ro", f"{out_dir}:{_OUT}", f"{toolkit(arch)}:{_CUDA}:ro",
               *(f"{path}:{_INCLUDES[name]}:ro" for name, path in header_folders().items())]
    proc = engine.run(RunOptions(image=image, remove=True, network="none",
                                 platform=PLATFORMS[mode], volumes=volumes,
                                 command=["bash", f"{_OUT}/compile.sh"]), timeout=7200)
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    check_host_compiler_version(out_dir, mode)
    results = {}
    for unit in jobs:
        name = object_name(unit)
        rc = (out_dir / f"{name}.rc").read_text().strip()
        log = (out_dir / f"{name}.log").read_text(errors="replace")
        assert rc == "0", f"{mode} nvcc of {unit} exited {rc}:\n{log[-3000:]}"
        wall, user, system = (float(x) for x in (out_dir / f"{name}.time").read_text().split())
        obj = out_dir / f"{name}.o"
        results[unit] = Compiled(unit, mode, obj, wall, user + system, cubins(obj))
    return results


# --- reading the objects --------------------------------------------------------------------------
def cubins(obj: Path) -> dict[str, str]:
    """sha256 of every cubin in ``obj``'s fatbin, extracted by cuobjdump -xelf (PyPI's
    nvidia-cuda-cuobjdump): ``{"sm_121a": "...", ...}``, keyed by the part cuobjdump names after
    the object's own name."""
    tool = cuobjdump_binary()
    with tempfile.TemporaryDirectory(prefix="cubins-") as tmp:
        proc = subprocess.run([str(tool), "-xelf", "all", str(obj)], cwd=tmp,
                              capture_output=True, text=True)
        assert proc.returncode == 0, f"cuobjdump -xelf all {obj}: {proc.stderr[-2000:]}"
        found = {}
        for path in sorted(Path(tmp).iterdir()):
            key = path.name.split(".", 1)[1] if "." in path.name else path.name
            found[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def elf_machine(path: Path) -> str:
    """``readelf -h``'s Machine line: ``AArch64``, ``Advanced Micro Devices X86-64``."""
    readelf = shutil.which("readelf")
    if readelf is None:
        raise AssertionError("readelf is missing: apt-get install binutils")
    header = subprocess.run([readelf, "-h", str(path)], capture_output=True, text=True,
                            check=True).stdout
    return next(line.split(":", 1)[1].strip() for line in header.splitlines()
                if line.strip().startswith("Machine:"))
