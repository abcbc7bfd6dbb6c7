"""The pieces tests/e2e/test_cross_real_tree_e2e.py needs around the real vLLM 0.33.0 tree on the
cross road. The downloads are cached under ``${EDGEVLLM_TEST_CACHE}/cross-real`` so CI's second
run is warm (the same wheels as the CLI's wheelhouse: .ci/run hard-links them); what is unpacked
from them (10 GB) is made again in each run's temporary folder and removed after the module.

- ``wheel_set``: wheels with their dependencies for one platform (pip download, PyPI), e.g. the
  x86_64 torch 2.14.0 and vLLM's build requirements for the build Python, the aarch64 torch and
  its CUDA wheels for the target side.
- ``unpacked_site``: such a set unpacked as a venv's ``lib/python3.X/site-packages`` (the target
  side, as the closure's venv is mounted into a compiling step).
- ``cmake_dep_dirs``: what vLLM's CMake clones. First the tree's own pins through the build's own
  fetch (``sources/cmakedeps.fetch_cmake_deps``, GitHub); where that cannot reach GitHub (this
  project's machines reach PyPI only), stand-ins any such machine can make, each folder with an
  ``EDGEVLLM-STANDIN`` note saying what it is (``docs/build-modes.md`` lists them): CUTLASS's
  headers from PyPI's ``nvidia-cutlass`` wheel, and for every other dependency empty files at the
  paths the tree's own ``cmake/external_projects/*.cmake`` name (what its configure checks or
  reads). The slice compiles none of their code.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from .downloads import file_lock, pypi_download, test_cache_dir

STANDIN_FILE = "EDGEVLLM-STANDIN"

# The cross road's two sides as the real-tree tests make them (each list is a cache key of
# wheel_set/unpacked_site, so every test names them from here):
PYTHON = "3.13"   # the cross base's (Debian trixie)
TORCH = "torch==2.14.0"
# vLLM 0.33.0's requirements/build/cuda.txt, torch's family aside (it is TORCH above).
BUILD_REQUIREMENTS = ["cmake>=3.26.1", "ninja", "packaging>=24.2", "setuptools>=78.1.1,<81",
                      "setuptools-scm>=8", "setuptools-rust>=1.9.0", "wheel", "jinja2>=3.1.6",
                      "regex"]
TARGET_REQUIREMENTS = [TORCH, "nvidia-cuda-runtime==13.0.96", "nvidia-cuda-crt==13.0.88",
                       "nvidia-cuda-cccl"]
GLIBC = (17, 18, 24, 25, 26, 27, 28, 31, 34)


def _platform_args(arch: str) -> list[str]:
    machine = {"amd64": "x86_64", "arm64": "aarch64"}[arch]
    tags = [f"manylinux_2_{g}_{machine}" for g in GLIBC]
    tags += [f"manylinux2014_{machine}", f"linux_{machine}"]
    if machine == "x86_64":
        tags += ["manylinux2010_x86_64", "manylinux1_x86_64", "manylinux_2_5_x86_64",
                 "manylinux_2_12_x86_64"]
    return [arg for tag in tags for arg in ("--platform", tag)]


def wheel_set(arch: str, requirements: list[str], python_version: str) -> Path:
    """``requirements`` and their dependencies as wheels for linux/<arch> (cached)."""
    key = hashlib.sha256("|".join([arch, python_version, *requirements]).encode()).hexdigest()
    root = test_cache_dir("cross-real")
    final = root / f"wheels-{arch}-cp{python_version.replace('.', '')}-{key[:12]}"
    with file_lock(root / f".{final.name}.lock"):
        if final.is_dir():
            return final
        partial = final.with_name(final.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:",
             *_platform_args(arch), "--python-version", python_version, "--implementation",
             "cp", "-d", str(partial), *requirements], capture_output=True, text=True)
        if proc.returncode != 0:
            raise AssertionError(f"pip download of {requirements} for {arch} failed: "
                                 f"{proc.stderr.strip()[-1500:]}; check access to PyPI")
        os.replace(partial, final)
    return final


def unpacked_site(arch: str, requirements: list[str], python_version: str, dest: Path) -> Path:
    """``requirements`` for linux/<arch> unpacked under ``dest`` as a venv's site-packages (the
    target side, as the closure's venv is mounted into a compiling step), from the cached wheel
    set; returns ``dest`` (``lib/python3.X/site-packages`` below it). Unpacked again each run
    into the caller's temporary folder: 5 GB the shared CI disk does not keep between runs."""
    site = dest / "lib" / f"python{python_version}" / "site-packages"
    site.mkdir(parents=True, exist_ok=True)
    for wheel in sorted(wheel_set(arch, requirements, python_version).glob("*.whl")):
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(site)
    return dest


# CUTLASS's headers as PyPI ships them (cutlass_library/source/{include,tools/util/include}).
CUTLASS_WHEEL = "nvidia-cutlass==4.2.0.0"
CUTLASS_IN_WHEEL = "cutlass_library/source/"
# A path a dependency's CMake names under its folder: ${<name>_SOURCE_DIR}/path/file.ext (a file)
# or ${<name>_SOURCE_DIR}/path/folder (a folder: no dot in its last part)
_NAMED_PATH = re.compile(r"\$\{([\w-]+)_SOURCE_DIR\}/([\w./+-]+)")
# set(VAR "${<name>_SOURCE_DIR}/sub"), and a path under such a variable: ${VAR}/x.py, ${VAR}/d/
_ALIAS = re.compile(r'set\((\w+)\s+"?\$\{([\w-]+)_SOURCE_DIR\}/?([\w./+-]*?)/?"?\)')
_UNDER = re.compile(r"\$\{(\w+)\}/([\w./+-]+)")
# What vLLM's CMake would have taken from CUTLASS's own CMakeLists (headers only).
_CUTLASS_CMAKE = """# edgevllm stand-in: the include folders CUTLASS's own CMakeLists would set
set(CUTLASS_INCLUDE_DIR "${CMAKE_CURRENT_SOURCE_DIR}/include" CACHE PATH "")
set(CUTLASS_TOOLS_UTIL_INCLUDE_DIR "${CMAKE_CURRENT_SOURCE_DIR}/tools/util/include" CACHE PATH "")
"""


def cmake_dep_dirs(deps, dest: Path, tree: Path) -> tuple[Path, dict[str, str]]:
    """(the folder holding every dependency under its name, dep name -> where it came from:
    ``pinned <commit>`` or the stand-in's note)."""
    from edgevllm.common.errors import EdgeVllmError
    from edgevllm.sources.cmakedeps import fetch_cmake_deps

    try:
        records = fetch_cmake_deps(deps, dest)
        return dest, {name: f"pinned {(r.commit or '')[:12]}" for name, r in records.items()}
    except EdgeVllmError as exc:
        why = f"the pins cannot be fetched ({str(exc)[:200]})"
    standins = dest.with_name(dest.name + "-standins")
    named = _named_files(tree)
    origins = {}
    for dep in deps:
        folder = standins / dep.name
        folder.mkdir(parents=True)
        if dep.name == "cutlass":
            note = _cutlass_headers(folder, dep)
        else:
            files = sorted(set(named.get(dep.name, []) + named.get(dep.name.replace("-", "_"), [])))
            for rel in files:
                if rel.endswith("/"):   # a folder: with a file, as git (and --cmake-dep) keep it
                    (folder / rel).mkdir(parents=True, exist_ok=True)
                    (folder / rel / STANDIN_FILE).touch()
                else:
                    (folder / rel).parent.mkdir(parents=True, exist_ok=True)
                    (folder / rel).touch()
            note = (f"stand-in for {dep.repo} {dep.tag}: empty files at the {len(files)} "
                    f"paths vLLM's CMake names; {why}")
        (folder / STANDIN_FILE).write_text(note + "\n")
        if dep.override_subdir:  # where the tree's override points inside the clone (triton's)
            (folder / dep.override_subdir).mkdir(parents=True, exist_ok=True)
            (folder / dep.override_subdir / STANDIN_FILE).write_text(note + "\n")
        origins[dep.name] = note
    return standins, origins


def _named_files(tree: Path) -> dict[str, list[str]]:
    """Per dependency name, the paths the tree's external-project CMake names in its folder,
    directly (``${dep_SOURCE_DIR}/a/b.py``) or under a variable set to a folder of it (as
    fmha_sm100's ``${FMHA_SM100_PY_ROOT}/api.py``): files, and folders (kept with a trailing
    ``/``; include folders, what an install copies or links): an install of a missing one fails
    the build's install step, a link to one leaves a dangling link the wheel cannot copy."""
    named: dict[str, list[str]] = {}
    for cmake in sorted((tree / "cmake" / "external_projects").glob("*.cmake")):
        text = cmake.read_text()
        found = [(name, rel if "." in rel.rstrip("/").rsplit("/", 1)[-1] else
                  rel.rstrip("/") + "/") for name, rel in _NAMED_PATH.findall(text)]
        aliases = {var: (name, sub) for var, name, sub in _ALIAS.findall(text)}
        for var, rest in _UNDER.findall(text):
            if var in aliases and (rest.endswith("/") or "." in rest.rsplit("/", 1)[-1]):
                name, sub = aliases[var]
                found.append((name, f"{sub}/{rest}".lstrip("/")))
        for name, rel in found:
            if ".." not in rel.split("/"):
                named.setdefault(name, []).append(rel)
    return named


def _cutlass_headers(folder: Path, dep) -> str:
    """CUTLASS's include folders from PyPI's wheel, and the CMake lines that name them."""
    wheel = pypi_download(CUTLASS_WHEEL)
    with zipfile.ZipFile(wheel) as zf:
        for member in zf.namelist():
            rel = member[len(CUTLASS_IN_WHEEL):]
            if member.startswith(CUTLASS_IN_WHEEL) and rel.startswith(
                    ("include/", "tools/util/include/")) and not member.endswith("/"):
                (folder / rel).parent.mkdir(parents=True, exist_ok=True)
                (folder / rel).write_bytes(zf.read(member))
    (folder / "CMakeLists.txt").write_text(_CUTLASS_CMAKE)
    return (f"stand-in for {dep.repo} {dep.tag}: CUTLASS {CUTLASS_WHEEL.split('==')[1]}'s "
            f"headers from PyPI's nvidia-cutlass wheel (headers only, as vLLM builds it)")
