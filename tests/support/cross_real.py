"""The pieces tests/e2e/test_cross_real_tree_e2e.py needs around the real vLLM 0.33.0 tree on the
cross road, each cached under ``${EDGEVLLM_TEST_CACHE}/cross-real`` so CI's second run is warm.

- ``wheel_set``: wheels with their dependencies for one platform (pip download, PyPI), e.g. the
  x86_64 torch 2.14.0 and vLLM's build requirements for the build Python, the aarch64 torch and
  its CUDA wheels for the target side.
- ``unpacked_site``: such a set unpacked as a venv's ``lib/python3.X/site-packages`` (the target
  side, as the closure's venv is mounted into a compiling step); the wheels then go.
- ``cmake_dep_dirs``: what vLLM's CMake clones. First the tree's own pins through the build's own
  fetch (``sources/cmakedeps.fetch_cmake_deps``, GitHub); where that cannot reach GitHub, the
  stand-ins kept in the cache, each folder with an ``EDGEVLLM-STANDIN`` file saying what it is
  (``docs/build-modes.md`` lists them). A dependency with neither fails, naming the folder.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from .downloads import file_lock, test_cache_dir

STANDIN_FILE = "EDGEVLLM-STANDIN"
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


def unpacked_site(arch: str, requirements: list[str], python_version: str) -> Path:
    """``requirements`` for linux/<arch> unpacked as a venv's site-packages (cached; the wheels
    are removed once unpacked: the disk holds them once); returns the venv folder
    (``lib/python3.X/site-packages`` below it)."""
    key = hashlib.sha256("|".join([arch, python_version, *requirements]).encode()).hexdigest()
    root = test_cache_dir("cross-real")
    final = root / f"site-{arch}-cp{python_version.replace('.', '')}-{key[:12]}"
    with file_lock(root / f".{final.name}.lock"):
        if final.is_dir():
            return final
        wheels = wheel_set(arch, requirements, python_version)
        partial = final.with_name(final.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        site = partial / "lib" / f"python{python_version}" / "site-packages"
        site.mkdir(parents=True)
        for wheel in sorted(wheels.glob("*.whl")):
            with zipfile.ZipFile(wheel) as zf:
                zf.extractall(site)
        os.replace(partial, final)
        shutil.rmtree(wheels)
    return final


def standin_root() -> Path:
    return test_cache_dir("cross-real", "deps")


def cmake_dep_dirs(deps, dest: Path) -> tuple[Path, dict[str, str]]:
    """(the folder holding every dependency under its name, dep name -> where it came from:
    ``pinned <commit>`` or the first line of the stand-in's note)."""
    from edgevllm.common.errors import EdgeVllmError
    from edgevllm.sources.cmakedeps import fetch_cmake_deps

    try:
        records = fetch_cmake_deps(deps, dest)
        return dest, {name: f"pinned {r.commit[:12]}" for name, r in records.items()}
    except EdgeVllmError as exc:
        why = str(exc)
    origins = {}
    for dep in deps:
        note = standin_root() / dep.name / STANDIN_FILE
        if not note.is_file():
            raise AssertionError(
                f"CMake dependency {dep.name} ({dep.repo} {dep.tag}): the pin cannot be fetched "
                f"({why}) and {note.parent} holds no stand-in; put a checkout there with an "
                f"{STANDIN_FILE} file saying what it is (docs/build-modes.md lists them)")
        origins[dep.name] = note.read_text().strip().splitlines()[0]
    return standin_root(), origins
