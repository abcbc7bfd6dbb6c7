"""Real Python environments for mod tests: PyPI wheels installed with ``pip install --target``.

``site_with(key, specs)`` installs the wheels (downloaded and cached by ``pypi_download``) into a
cached pristine folder once; ``working_copy`` gives each test a hard-linked copy. The applier
replaces files by rename, so the pristine copy is never modified through the links.
``stage_and_apply`` stages mods exactly as a build does (``stage_mods``) and runs the staged,
self-contained ``inimage_applier.py`` in a subprocess, as the image build does.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Sequence

from .downloads import file_lock, pypi_download, test_cache_dir
from .platforms import native_wheel_tags

GLIBC = "2_28"   # the manylinux tag most of the mods' wheels carry
PY = f"{sys.version_info.major}.{sys.version_info.minor}"


def wheel(spec: str, platform: bool = True, glibc: str | None = None) -> Path:
    """One cached wheel for this host's platform (``platform=False``: a pure-Python wheel;
    ``glibc``: another manylinux tag, e.g. ``"2_17"`` for wheels published as manylinux2014 only).
    The wheels are installed into folders this host's Python (or a native container) imports."""
    tags = native_wheel_tags(glibc or GLIBC)
    return pypi_download(spec, tags if platform else (), PY if platform else None)


def site_with(key: str, wheels: Sequence[Path]) -> Path:
    """A cached folder with ``wheels`` installed (no deps, in the order given, one pip call)."""
    root = test_cache_dir("mod-sites")
    # The wheel list is part of the key: a changed list never reuses a stale cached site.
    digest = hashlib.sha256("|".join(sorted(w.name for w in wheels)).encode()).hexdigest()[:10]
    key = f"{key}-{digest}"
    final = root / key
    with file_lock(root / f".{key}.lock"):
        if final.is_dir():
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.tmp-", dir=root))
        try:
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--no-deps",
                    "--no-compile",
                    "--target",
                    str(tmp),
                    *map(str, wheels),
                ],
                capture_output=True,
                text=True,
            )
            if proc.returncode != 0:
                raise RuntimeError(f"pip install --target failed: {proc.stderr.strip()[-300:]}")
            os.replace(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def working_copy(pristine: Path, dest: Path) -> Path:
    shutil.copytree(pristine, dest, copy_function=os.link, symlinks=True)
    return dest


def cuda_bindings_wheels() -> list[Path]:
    """What cutlass-dsl imports besides itself: cuda-python's bindings (no GPU needed to import)
    and numpy. Installed into the same site, so the test does not depend on the host's packages."""
    return [
        wheel("cuda-bindings==13.0.3"),
        wheel("cuda-pathfinder==1.3.3", platform=False),
        wheel("numpy==2.2.6", glibc="2_17"),
    ]


def stage_and_apply(
    mods: list[str],
    target: str,
    site: Path,
    work: Path,
    extra: Sequence[str] = (),
    record: bool = True,
) -> tuple[int, dict | None, str, str]:
    """Stage ``mods`` for ``target`` into ``work/stage`` and run the staged applier on ``site``."""
    from edgevllm.mods.catalog import stage_mods

    stage = work / "stage"
    if not stage.exists():
        stage_mods(mods, target, stage)
    record_path = work / "out" / "mods.json"
    argv = [
        sys.executable,
        str(stage / "inimage_applier.py"),
        "apply",
        "--plan",
        str(stage / "plan.json"),
        "--site-packages",
        str(site),
        *extra,
    ]
    if record:
        argv += ["--record", str(record_path)]
    # the applier's own temporary files (downloaded wheels) must not outlive it: in an image
    # build they would stay in the mods layer
    scratch = work / "applier-tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(argv, capture_output=True, text=True,
                          env={**os.environ, "TMPDIR": str(scratch)})
    # (a verify step's import may leave its package's own cache there, e.g. CuTe DSL's)
    left = sorted(p.name for p in scratch.glob("edgevllm-*"))
    assert not left, f"the applier left temporary files behind: {left}"
    data = json.loads(record_path.read_text()) if record and record_path.is_file() else None
    return proc.returncode, data, proc.stdout, proc.stderr


def outcome(record: dict, name: str) -> dict:
    return next(m for m in record["mods"] if m["name"] == name)


def step_outcomes(mod: dict) -> list[str]:
    return [s["outcome"] for s in mod["steps"]]
