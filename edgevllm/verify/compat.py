"""Levels of fatbin entries, units and libraries on a device. The rules themselves live in
``edgevllm.specs.cuda`` (the one owner); this module only applies them to parsed entries.

A *unit* is one fatbin container (one translation unit, or one raw ``.cubin`` file). A unit is
as good as its best entry; a library's weakest-unit ``library_level`` is as good as its worst
unit, and ``unit_levels`` gives every unit's level for coverage counts.
"""

from __future__ import annotations

from edgevllm.common.errors import ConfigError
from edgevllm.specs import cuda
from edgevllm.specs.cuda import LEVELS, CudaArch, best, meets, worst
from edgevllm.verify.fatbin import FatbinEntry

__all__ = ["LEVELS", "CudaArch", "best", "meets", "worst", "parse_arch", "entry_level",
           "unit_levels", "library_level"]


def parse_arch(text: str) -> CudaArch:
    """``"12.1a"``, ``"121a"``, ``"sm_121a"`` → ``CudaArch(12, 1)``; ConfigError otherwise."""
    try:
        return cuda.parse_device(text)
    except cuda.ArchParseError as exc:
        raise ConfigError(f"cuda arch {exc}") from None


def code_arch(entry: FatbinEntry) -> cuda.CodeArch:
    return cuda.CodeArch(entry.kind, *cuda.split_sm(entry.sm), entry.variant)


def entry_level(entry: FatbinEntry, target: CudaArch) -> str:
    return cuda.level(code_arch(entry), target)


def unit_levels(entries: list[FatbinEntry], target: CudaArch) -> dict[int, str]:
    """Unit (container index) → the best level any of its entries reaches."""
    by_unit: dict[int, list[str]] = {}
    for entry in entries:
        by_unit.setdefault(entry.container, []).append(entry_level(entry, target))
    return {unit: best(levels) for unit, levels in by_unit.items()}


def library_level(entries: list[FatbinEntry], target: CudaArch) -> str:
    """Each unit must have something that runs: the library is as good as its weakest unit."""
    return worst(unit_levels(entries, target).values())
