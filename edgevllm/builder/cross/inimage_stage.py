"""Runs inside the compile's build stage on a cross road (standard library only): checks the
cross g++ and assembles the target's CUDA folder the build platform's nvcc compiles against.

    python3 inimage_stage.py --compiler aarch64-linux-gnu-g++ --min-gcc 13 \\
        --target-dir sbsa-linux --alias aarch64-linux --target-venv /opt/edgevllm-target

``$CUDA_HOME/targets/<target-dir>`` gets ``include/`` (the build's own CUDA headers, which do not
depend on the CPU, with the target's CUDA wheels' headers over them) and ``lib/`` (links to the
target's CUDA libraries in the closure's venv, mounted at ``--target-venv`` by every step that
compiles, with the unversioned ``libX.so`` names the linker looks for, and a ``libcuda.so`` stub
built with the cross compiler: the driver library comes with the device, never with an image).
Debian's and Ubuntu's Python headers pick ``pyconfig.h`` by the compiler's architecture; the
cross compiler then asks for the target's, which a build base of the build platform lacks: the
build platform's stands in (both LP64, little-endian glibc: the sizes and features an extension
reads agree), under the cross compiler's own include folder. Nothing is downloaded. A failure
is one line on stderr and exit code 1, which fails the step.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

STUB_SONAME = "libcuda.so.1"


def fail(message: str) -> None:
    print(f"edgevllm cross: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(1)


def check_compiler(compiler: str, min_gcc: int) -> str:
    """The cross g++'s version, or the step fails saying what the base image lacks."""
    if shutil.which(compiler) is None:
        fail(f"{compiler} is not in the build base image: add its package to apt_packages "
             f"(g++-aarch64-linux-gnu on Ubuntu 24.04 / Debian trixie) or give a build base "
             f"that has gcc >= {min_gcc} for the target")
    version = subprocess.run([compiler, "-dumpfullversion"], capture_output=True,
                             text=True).stdout.strip()
    major = re.match(r"(\d+)", version)
    if major is None or int(major[1]) < min_gcc:
        fail(f"{compiler} is gcc {version or '(no version)'}; vLLM's kernels need gcc >= "
             f"{min_gcc}: use a build base with a newer cross g++ (Ubuntu 24.04: 13, Debian "
             "trixie: 14)")
    return version


def cuda_home() -> Path:
    home = Path(os.environ.get("CUDA_HOME") or "/usr/local/cuda").resolve()
    if not (home / "bin" / "nvcc").is_file():
        fail(f"no nvcc in {home}/bin: the build base must be a CUDA devel image (CUDA_HOME)")
    return home


def target_site(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python3*/site-packages"))
    if not found:
        fail(f"the closure's venv ({venv}) has no site-packages")
    return found[0]


def target_cuda_trees(site: Path) -> list[Path]:
    """The target's CUDA wheels' trees (nvidia/cu13, nvidia/<lib>), where headers and libraries
    live: each folder right under nvidia/ that holds include/ or lib/ (not the include folders
    nested inside headers, such as libcu++'s own)."""
    nvidia = site / "nvidia"
    trees = [p.parent for pattern in ("*/lib", "*/include") for p in nvidia.glob(pattern)
             if p.is_dir()]
    return sorted(set(trees))


def assemble_include(cuda: Path, dest: Path, trees: list[Path]) -> int:
    """The build's headers, then the target wheels' over them (one of ~1,900 differs)."""
    shutil.copytree(cuda / "include", dest, symlinks=True, dirs_exist_ok=True)
    for tree in trees:
        if (tree / "include").is_dir():
            shutil.copytree(tree / "include", dest, symlinks=True, dirs_exist_ok=True)
    return sum(1 for _ in dest.rglob("*.h*"))


def assemble_lib(dest: Path, trees: list[Path]) -> int:
    """Links to the target's libraries, and each ``libX.so`` for a ``libX.so.N``."""
    dest.mkdir(parents=True, exist_ok=True)
    count = 0
    for tree in trees:
        for lib in sorted((tree / "lib").glob("lib*")):
            if lib.is_file() and (".so" in lib.name or lib.suffix == ".a"):
                link = dest / lib.name
                if not link.exists():
                    link.symlink_to(lib)
                    count += 1
                plain = re.sub(r"\.so(\.\d+)+\Z", ".so", lib.name)
                if plain != lib.name and not (dest / plain).exists():
                    (dest / plain).symlink_to(lib.name)
    return count


# CUDA_ERROR_STUB_LIBRARY: what every function of NVIDIA's own stub libcuda answers.
STUB_ANSWER = 34
DRIVER_FUNCTION = re.compile(r"\bCUresult\s+(cu[A-Z][A-Za-z0-9_]*)\s*\(")


def driver_functions(compiler: str, include: Path) -> list[str]:
    """The driver API's functions as the linker sees them: ``cuda.h`` of ``include`` through the
    preprocessor (its macros give the exported names, e.g. ``cuMemAlloc_v2``)."""
    proc = subprocess.run([compiler, "-E", "-P", "-x", "c", f"-I{include}", "-"],
                          input="#include <cuda.h>\n", capture_output=True, text=True)
    names = sorted(set(DRIVER_FUNCTION.findall(proc.stdout))) if proc.returncode == 0 else []
    if not names:
        fail(f"no driver API in {include}/cuda.h for the libcuda stub "
             f"({proc.stderr.strip()[-200:] or 'no CUresult functions'}): the build base's CUDA "
             "must have its headers (a CUDA devel image)")
    return names


def driver_stub(dest: Path, compiler: str, include: Path) -> int:
    """``stubs/libcuda.so`` (soname libcuda.so.1), built with the cross compiler: every driver
    function of ``cuda.h``, answering as NVIDIA's stub does. A linker that drops libraries no
    symbol is taken from (``--as-needed``) then still records libcuda.so.1 as needed, as a
    native build against the driver does; the device's driver answers at run time. Returns the
    number of functions."""
    names = driver_functions(compiler, include)
    stubs = dest / "stubs"
    stubs.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "stub.c"
        source.write_text("".join(f"int {name}(void) {{ return {STUB_ANSWER}; }}\n"
                                  for name in names))
        proc = subprocess.run([compiler, "-shared", "-fPIC", "-x", "c", str(source), "-o",
                               str(stubs / "libcuda.so"), f"-Wl,-soname,{STUB_SONAME}"],
                              capture_output=True, text=True)
    if proc.returncode != 0:
        fail(f"{compiler} could not link a shared library: {proc.stderr.strip()[-300:]}")
    if not (dest / "libcuda.so").exists():
        (dest / "libcuda.so").symlink_to("stubs/libcuda.so")
    return len(names)


WRAPPED = re.compile(r"#\s*include\s+<([A-Za-z0-9_.-]+)/(python3\.\d+)/pyconfig\.h>")


def python_config(triple: str, root: Path = Path("/")) -> list[Path]:
    """For each multiarch ``pyconfig.h`` of the build base, the target triple's, from the build
    platform's (the one the wrapper names that exists); the files written."""
    written = []
    for wrapper in sorted((root / "usr" / "include").glob("python3*/pyconfig.h")):
        named = WRAPPED.findall(wrapper.read_text(errors="replace"))
        own = [root / "usr" / "include" / arch / version / "pyconfig.h"
               for arch, version in named]
        present = [p for p in own if p.is_file()]
        if not present or not any(arch == triple for arch, _ in named):
            continue
        version = named[0][1]
        dest = root / "usr" / triple / "include" / triple / version / "pyconfig.h"
        if not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(present[0], dest)
            written.append(dest)
    return written


def assemble(args: argparse.Namespace) -> None:
    cuda = cuda_home()
    site = target_site(Path(args.target_venv))
    trees = target_cuda_trees(site)
    folder = cuda / "targets" / args.target_dir
    headers = assemble_include(cuda, folder / "include", trees)
    libraries = assemble_lib(folder / "lib", trees)
    if not (folder / "lib" / "libcudart_static.a").exists() and not any(
            (folder / "lib").glob("libcudart.so*")):
        fail(f"the closure holds no CUDA runtime for the target (nvidia-cuda-runtime under "
             f"{site}/nvidia): the closure must carry the target's CUDA wheels (torch's "
             "cuda-toolkit set does)")
    functions = driver_stub(folder / "lib", args.compiler, folder / "include")
    for alias in args.alias:
        link = cuda / "targets" / alias
        if not link.exists():
            link.symlink_to(args.target_dir)
    configs = python_config(args.triple)
    print(f"edgevllm cross: {folder}: {headers} headers, {libraries} target libraries from "
          f"{len(trees)} CUDA wheel trees, the libcuda stub ({functions} driver functions); "
          f"{len(configs)} pyconfig.h for {args.triple}", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compiler", required=True)
    parser.add_argument("--triple", required=True)
    parser.add_argument("--min-gcc", type=int, required=True)
    parser.add_argument("--target-dir", required=True)
    parser.add_argument("--alias", action="append", default=[])
    parser.add_argument("--target-venv", required=True)
    args = parser.parse_args(argv)
    version = check_compiler(args.compiler, args.min_gcc)
    print(f"edgevllm cross: {args.compiler} {version}", flush=True)
    assemble(args)


if __name__ == "__main__":
    main()
