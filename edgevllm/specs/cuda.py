"""CUDA binary compatibility: the one owner of "does code built for arch X run on device Y".

Everything that decides whether GPU code runs on a target (``inv verify``, the probe's torch
arch check, anything reading an arch list) asks this module. The facts, as a table
(``RUNS_ON``), for code built for ``X.Y`` (SASS ``sm_XY*``, PTX ``compute_XY*``):

=========  ==========================  ========================================================
variant    SASS runs on                PTX is JIT-compiled by the driver on
=========  ==========================  ========================================================
``a``      exactly X.Y                 exactly X.Y
``f``      X.Z with Z >= Y (family)    X.Z with Z >= Y (family)
plain      X.Z with Z >= Y (family)    any device >= X.Y
=========  ==========================  ========================================================

Levels, best first: ``native`` (SASS for exactly the device's X.Y, whatever its variant),
``compatible`` (SASS for an earlier member of the device's family), ``ptx-jit`` (only PTX the
driver can compile at start-up), ``none``. So on GB10 (12.1) ``sm_121``/``sm_121a``/``sm_121f``
are native, ``sm_120``/``sm_120f`` compatible, ``sm_120a`` none; on Thor (11.0) ``sm_110*`` are
native and nothing from 10.x or 12.x runs (other major).

``sm_XYf`` is SASS for exactly X.Y restricted to the features the whole X family shares (nvcc
13 writes ``-arch sm_121f`` into the cubin, whose ELF header names SM 121): on X.Y it is
``native``, on a later X.Z ``compatible``, as the CUDA docs say of family-specific code ("runs on
devices of the same family with the same or higher minor version").

The kernel plan reads CMake arch lists (``12.0f``, ``8.0+PTX``) and speaks of ``native`` |
``family`` | ``ptx`` | ``none`` (the words of ``kernel_plan`` in targets/*.yaml): ``arch_kind``
gives those words for the levels above (``KIND_OF_LEVEL``), so the plan and ``inv verify`` judge
by this one table.

Spellings accepted for a device (``parse_device``): ``12.1a``, ``12.1``, ``121a``, ``sm_121a``,
``compute_121``, ``sm_110``. Target names (``thor``, ``spark``) are resolved by
``edgevllm.specs.targets.resolve_cuda_target``, which calls this module for everything else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

LEVELS = ("native", "compatible", "ptx-jit", "none")
VARIANTS = ("", "a", "f")

# (kind, variant) → which devices run it: "exact" (same X.Y), "family" (same X, minor >= Y),
# "later" (any device >= X.Y). The whole rule set is this table plus ``level`` below.
RUNS_ON: dict[tuple[str, str], str] = {
    ("sass", "a"): "exact",
    ("sass", "f"): "family",
    ("sass", ""): "family",
    ("ptx", "a"): "exact",
    ("ptx", "f"): "family",
    ("ptx", ""): "later",
}

_DEVICE = re.compile(r"^(?:sm_|compute_)?(\d{1,2})\.(\d)([af]?)\Z"
                     r"|^(?:sm_|compute_)?(\d{2,3})([af]?)\Z")
_CODE = re.compile(r"^(sm|compute)_(\d{2,3})([af]?)\Z")


class ArchParseError(ValueError):
    """Text that is not a compute capability; callers turn it into their own error class."""


@dataclass(frozen=True, order=True)
class CudaArch:
    """A device's compute capability: ``CudaArch(12, 1)`` for GB10, ``CudaArch(11, 0)`` Thor."""

    major: int
    minor: int

    @property
    def sm(self) -> int:
        return self.major * 10 + self.minor

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


@dataclass(frozen=True)
class CodeArch:
    """What one piece of GPU code was built for: ``CodeArch("sass", 12, 0, "f")`` is ``sm_120f``."""

    kind: str  # "sass" or "ptx"
    major: int
    minor: int
    variant: str = ""  # "", "a" or "f"

    @property
    def sm(self) -> int:
        return self.major * 10 + self.minor

    @property
    def name(self) -> str:
        prefix = "compute" if self.kind == "ptx" else "sm"
        return f"{prefix}_{self.sm}{self.variant}"


def split_sm(sm: int) -> tuple[int, int]:
    """``121`` → ``(12, 1)``; ``75`` → ``(7, 5)`` (the last digit is always the minor)."""
    return divmod(int(sm), 10)


def parse_device(text: str) -> CudaArch:
    """``"12.1a"``, ``"12.1"``, ``"121a"``, ``"sm_121a"``, ``"sm_110"`` → the compute capability.

    Raises ``ArchParseError`` for anything else."""
    match = _DEVICE.match(str(text).strip().lower())
    if not match:
        raise ArchParseError(f"{text!r} is not a compute capability such as 11.0a, 12.1a, "
                             "121a or sm_121a")
    if match.group(1) is not None:
        return CudaArch(int(match.group(1)), int(match.group(2)))
    return CudaArch(*split_sm(int(match.group(4))))


def looks_like_arch(text: str) -> bool:
    return bool(_DEVICE.match(str(text).strip().lower()))


def parse_code(text: str) -> CodeArch | None:
    """``"sm_121a"`` → SASS 12.1a; ``"compute_90"`` → PTX 9.0; None for other text."""
    match = _CODE.match(str(text).strip().lower())
    if not match:
        return None
    kind = "ptx" if match.group(1) == "compute" else "sass"
    return CodeArch(kind, *split_sm(int(match.group(2))), match.group(3))


def runs_on(code: CodeArch, device: CudaArch) -> bool:
    """Can the device load this code (SASS directly, PTX through the driver's JIT)?"""
    rule = RUNS_ON.get((code.kind, code.variant))
    same_major = code.major == device.major
    if rule == "exact":
        return (code.major, code.minor) == (device.major, device.minor)
    if rule == "family":
        return same_major and code.minor <= device.minor
    if rule == "later":
        return (code.major, code.minor) <= (device.major, device.minor)
    return False  # LTO IR and unknown kinds are not loadable as they are


def level(code: CodeArch, device: CudaArch) -> str:
    """One of ``LEVELS`` for one piece of code on one device."""
    if not runs_on(code, device):
        return "none"
    if code.kind == "ptx":
        return "ptx-jit"
    exact = (code.major, code.minor) == (device.major, device.minor)
    return "native" if exact else "compatible"


def best(levels: Iterable[str]) -> str:
    levels = list(levels)
    return min(levels, key=LEVELS.index) if levels else "none"


def worst(levels: Iterable[str]) -> str:
    levels = list(levels)
    return max(levels, key=LEVELS.index) if levels else "none"


def meets(found: str, required: str) -> bool:
    """Does level ``found`` satisfy ``required`` (a level name; ``report`` always does)?"""
    if required == "report":
        return True
    return LEVELS.index(found) <= LEVELS.index(required)


def arch_list_coverage(device: CudaArch, names: Iterable[str]) -> tuple[str, list[str]]:
    """How an arch list (torch's ``sm_90``, ``compute_120`` ...) covers a device: the best level
    and the names reaching it (unparsable names are ignored)."""
    by_level: dict[str, list[str]] = {}
    for name in names:
        code = parse_code(name)
        if code is not None:
            by_level.setdefault(level(code, device), []).append(name)
    runnable = [found for found in by_level if found != "none"]
    if not runnable:
        return "none", []
    found = best(runnable)
    return found, by_level[found]


# --- CMake arch lists (the kernel plan) ---------------------------------------------------------
# The kernel plan's words for the levels: targets/*.yaml's kernel_plan.required uses them.
KIND_OF_LEVEL = {"native": "native", "compatible": "family", "ptx-jit": "ptx", "none": "none"}
_CMAKE_ARCH = re.compile(r"^(\d{1,2})\.(\d)([af]?)(\+PTX)?\Z")


def cmake_arch_codes(arch: str) -> list[CodeArch]:
    """A CMake/torch arch (``12.0f``, ``12.1a``, ``8.0+PTX``) as the code nvcc emits for it:
    SASS, plus PTX of the same arch with ``+PTX``. Raises ``ArchParseError`` for other text."""
    match = _CMAKE_ARCH.match(str(arch).strip())
    if not match:
        raise ArchParseError(f"{arch!r} is not a CMake arch such as 12.0f, 12.1a or 8.0+PTX")
    major, minor, variant = int(match.group(1)), int(match.group(2)), match.group(3)
    codes = [CodeArch("sass", major, minor, variant)]
    if match.group(4):
        codes.append(CodeArch("ptx", major, minor, variant))
    return codes


def arch_kind(arch: str, device: str) -> str:
    """The kernel plan's word for code built for CMake ``arch`` on ``device`` (``12.1a``);
    ``none`` for text that is not an arch."""
    try:
        codes, target = cmake_arch_codes(arch), parse_device(device)
    except ArchParseError:
        return "none"
    return KIND_OF_LEVEL[best(level(code, target) for code in codes)]


def _kind_rank(kind: str) -> int:
    """Higher is better; words that are no level (``cpu``) rank below ``none``."""
    levels = {word: name for name, word in KIND_OF_LEVEL.items()}
    return len(LEVELS) - LEVELS.index(levels[kind]) if kind in levels else 0


def best_kind(kinds: Iterable[str]) -> str:
    """The best of the plan's words (``none`` for none)."""
    return max(kinds, key=_kind_rank, default="none")


def kind_meets(found: str, minimum: str) -> bool:
    """Does a plan word reach ``minimum`` (``native`` | ``family`` | ``ptx``)?"""
    return _kind_rank(found) >= _kind_rank(minimum)
