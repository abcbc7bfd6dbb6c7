"""Cross-check the parser against NVIDIA's cuobjdump (``--cuobjdump``): any disagreement fails.

cuobjdump is found via ``$EDGEVLLM_CUOBJDUMP``, ``PATH``, the PyPI package nvidia-cuda-cuobjdump
(``site-packages/nvidia/cu13/bin/cuobjdump``, no console script) or a CUDA toolkit.
Its quirk: ``--list-elf`` prints family cubins without the ``f`` (sm_110 for sm_110f) while
``--list-ptx`` keeps it; the expected listing is spelled the same way before comparing.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import site
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from edgevllm.kernel.errors import CuobjdumpMismatch, CuobjdumpNotFoundError
from edgevllm.verify.fatbin import FatbinEntry

_LINE = re.compile(r"^(ELF|PTX) file\s+\d+: .*\.(sm_\d+[af]?)\.(?:cubin|ptx)$")


def _site_dirs() -> list[str]:
    dirs = list(sys.path)
    try:
        dirs += site.getsitepackages() + [site.getusersitepackages()]
    except AttributeError:  # virtualenvs without site.getsitepackages
        pass
    return dirs


def find_cuobjdump() -> Path:
    candidates = [os.environ.get("EDGEVLLM_CUOBJDUMP"), shutil.which("cuobjdump")]
    candidates += [os.path.join(d, "nvidia", "cu13", "bin", "cuobjdump") for d in _site_dirs()]
    candidates += sorted(glob.glob("/usr/local/cuda*/bin/cuobjdump"), reverse=True)
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return Path(candidate)
    raise CuobjdumpNotFoundError("cuobjdump not found: pip install nvidia-cuda-cuobjdump, install "
                                 "a CUDA toolkit, or set EDGEVLLM_CUOBJDUMP=/path/to/cuobjdump")


@dataclass(frozen=True)
class Listing:
    """Multisets of arch names, as cuobjdump spells them (``sm_110a``, ``sm_121f`` for PTX)."""

    elf: tuple[str, ...]
    ptx: tuple[str, ...]


def run_cuobjdump(binary: Path, library: Path) -> Listing:
    found: dict[str, list[str]] = {"ELF": [], "PTX": []}
    for flag in ("--list-elf", "--list-ptx"):
        proc = subprocess.run([str(binary), flag, str(library)], capture_output=True, text=True)
        for line in proc.stdout.splitlines():
            match = _LINE.match(line.strip())
            if match:
                found[match.group(1)].append(match.group(2))
    return Listing(tuple(sorted(found["ELF"])), tuple(sorted(found["PTX"])))


def expected_listing(entries: list[FatbinEntry]) -> Listing:
    """What cuobjdump should print for the parser's entries."""
    elf = [f"sm_{e.sm}{'a' if e.variant == 'a' else ''}" for e in entries if e.kind == "sass"]
    ptx = [f"sm_{e.sm}{e.variant}" for e in entries if e.kind == "ptx"]
    return Listing(tuple(sorted(elf)), tuple(sorted(ptx)))


def disagreement(expected: Listing, actual: Listing) -> str | None:
    """A one-line description of the first difference, or None when both agree."""
    for kind in ("elf", "ptx"):
        want, got = Counter(getattr(expected, kind)), Counter(getattr(actual, kind))
        if want != got:
            extra, lacking = sorted((got - want).elements()), sorted((want - got).elements())
            return f"{kind}: cuobjdump has extra {extra or '[]'}, lacks {lacking or '[]'}"
    return None


def check(binary: Path, library: Path, entries: list[FatbinEntry], label: str) -> None:
    problem = disagreement(expected_listing(entries), run_cuobjdump(binary, library))
    if problem:
        raise CuobjdumpMismatch(f"{label}: parser and cuobjdump disagree ({problem})")
