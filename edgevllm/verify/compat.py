"""Can a fatbin entry run on a given compute capability? The CUDA binary-compatibility rules.

- SASS ``sm_XYa``: only on exactly X.Y.
- SASS ``sm_XY`` / ``sm_XYf``: on X.Z for Z >= Y (same major); exactly X.Y counts as native.
- PTX ``compute_XY``: JIT-compiled by the driver on any X.Y or later device.
- PTX ``compute_XYf``: JIT on the same family (X.Z, Z >= Y); ``compute_XYa``: only on X.Y.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from edgevllm.kernel.errors import ConfigError
from edgevllm.verify.fatbin import FatbinEntry

# Best first: a library is as good as the best entry of its worst container.
LEVELS = ("native", "compatible", "ptx-jit", "none")
_ARCH = re.compile(r"^(?:sm_|compute_)?(\d+)\.?(\d)([af]?)$")


@dataclass(frozen=True)
class CudaArch:
    """A device's compute capability, e.g. ``CudaArch(12, 1)`` for GB10."""

    major: int
    minor: int

    @property
    def sm(self) -> int:
        return self.major * 10 + self.minor

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


def parse_arch(text: str) -> CudaArch:
    """``"12.1a"``, ``"12.1"``, ``"121"`` or ``"sm_121a"`` → ``CudaArch(12, 1)``."""
    match = _ARCH.match(str(text).strip())
    if not match:
        raise ConfigError(f"cuda arch {text!r}: expected a compute capability such as '11.0a' or '12.1a'")
    digits = match.group(1) + match.group(2)
    return CudaArch(int(digits[:-1]), int(digits[-1]))


def entry_level(entry: FatbinEntry, target: CudaArch) -> str:
    major, minor = divmod(entry.sm, 10)
    if entry.kind == "sass":
        return _sass_level(major, minor, entry.variant, target)
    if entry.kind == "ptx":
        return _ptx_level(major, minor, entry.variant, target)
    return "none"  # LTO IR and unknown kinds are not loadable by the driver as they are


def _sass_level(major: int, minor: int, variant: str, target: CudaArch) -> str:
    if (major, minor) == (target.major, target.minor):
        return "native"
    if variant != "a" and major == target.major and minor < target.minor:
        return "compatible"
    return "none"


def _ptx_level(major: int, minor: int, variant: str, target: CudaArch) -> str:
    if variant == "a":
        ok = (major, minor) == (target.major, target.minor)
    elif variant == "f":
        ok = major == target.major and minor <= target.minor
    else:
        ok = major * 10 + minor <= target.sm
    return "ptx-jit" if ok else "none"


def best(levels) -> str:
    levels = list(levels)
    return min(levels, key=LEVELS.index) if levels else "none"


def worst(levels) -> str:
    levels = list(levels)
    return max(levels, key=LEVELS.index) if levels else "none"


def library_level(entries: list[FatbinEntry], target: CudaArch) -> str:
    """Each container (one per translation unit) must have something that runs; the library is
    as good as its weakest container's best entry."""
    by_container: dict[int, list[str]] = {}
    for entry in entries:
        by_container.setdefault(entry.container, []).append(entry_level(entry, target))
    return worst(best(levels) for levels in by_container.values())


def meets(level: str, required: str) -> bool:
    """Does ``level`` satisfy a policy requirement (a level name, or ``report`` for no gate)?"""
    if required == "report":
        return True
    return LEVELS.index(level) <= LEVELS.index(required)
