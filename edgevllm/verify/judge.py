"""Judge scanned libraries against a target and a policy: the verify gate's verdict.

Per library: its units (fatbin containers, or the cubin file itself) are counted by level
(``Coverage``), the units with no code for the target are named (kernels, demangled), and the
policy rule's mode decides pass/fail (see policy.py). ``level`` is what the running units reach
(``Coverage.headline``); ``reason`` says why a failing library fails.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from edgevllm.specs.cuda import LEVELS, ArchParseError, CudaArch, cmake_arch_codes, meets, worst
from edgevllm.verify.compat import unit_levels
from edgevllm.verify.library import LibraryReport, short_path

if TYPE_CHECKING:  # policy.py pulls in pydantic and yaml: not needed to judge
    from edgevllm.verify.policy import Policy, Rule

NO_GPU_CODE = "gated but carries no GPU code"


@dataclass
class ShortUnit:
    """A unit with no SASS that runs on the target: PTX-JIT only, or nothing at all."""

    unit: int
    level: str  # "ptx-jit" or "none"
    arches: list[str]  # what it does carry, e.g. ["sm_90a"]
    kernels: list[str] = field(default_factory=list)  # demangled when possible

    def to_json(self) -> dict:
        return {"unit": self.unit, "level": self.level, "arches": self.arches,
                "kernels": self.kernels}


@dataclass
class Coverage:
    """Units of one library by level, and the units without SASS for the target."""

    total: int = 0
    counts: dict[str, int] = field(default_factory=dict)  # level → units
    short: list[ShortUnit] = field(default_factory=list)
    empty: int = 0  # units left out: no SASS for the target and not one kernel (link glue)

    @property
    def headline(self) -> str:
        """What the library's running units reach: the worst SASS level among units with SASS
        that runs, else ptx-jit, else none. The units below it are ``below``."""
        for candidates in (("native", "compatible"), ("ptx-jit",)):
            present = [level for level in candidates if self.counts.get(level)]
            if present:
                return worst(present)
        return "none"

    @property
    def at_headline(self) -> int:
        reached = LEVELS[:LEVELS.index(self.headline) + 1]
        return sum(self.counts.get(level, 0) for level in reached) if self.headline != "none" else 0

    @property
    def below(self) -> list[ShortUnit]:
        if self.headline == "ptx-jit":
            return [unit for unit in self.short if unit.level == "none"]
        return self.short

    def reaching(self, required: str) -> int:
        return sum(n for level, n in self.counts.items()
                   if level != "none" and meets(level, required))

    def to_json(self) -> dict:
        return {"total": self.total, **{level: self.counts.get(level, 0) for level in LEVELS},
                "without_kernels": self.empty,
                "short_units": [unit.to_json() for unit in self.short]}


@dataclass
class LibraryVerdict:
    report: LibraryReport
    rule: str  # policy rule name, "-" for none
    required: str  # native | compatible | ptx-jit | report
    level: str  # native | compatible | ptx-jit | none | "-" (no device code) | corrupt
    passed: bool
    note: str = ""  # a cuobjdump disagreement
    mode: str = "report"  # every-unit | coverage | report
    coverage: Coverage = field(default_factory=Coverage)
    reason: str = ""  # why it fails when it does, e.g. "20/111 units below native"
    # units below ``required`` that carry the PTX the kernel plan gives this extension (vLLM's
    # own choice, e.g. Marlin's 8.0+PTX kernels on a 12.1a build): they JIT at first start
    as_planned: int = 0

    @property
    def gated(self) -> bool:
        return self.mode != "report"

    def to_json(self) -> dict:
        return dict(self.report.to_json(), rule=self.rule, required=self.required, level=self.level,
                    mode=self.mode, passed=self.passed, note=self.note, reason=self.reason,
                    ptx_as_planned=self.as_planned,
                    units=self.coverage.to_json(), sass=self.report.arches("sass"),
                    ptx=self.report.arches("ptx"))


@dataclass
class Verdict:
    target: str
    cuda_arch: CudaArch
    source: str
    libraries: list[LibraryVerdict]
    scanned: int  # ELF files read, with or without device code
    cuobjdump_checked: bool = False  # cuobjdump ran on every library with device code
    notes: list[str] = field(default_factory=list)  # verdict-wide failures (e.g. nothing found)
    # how an image's layers were had (``layered.Reading``: cache, layer store, docker save);
    # not part of the verdict, which is the same whichever road was taken
    reading: Any = field(default=None, compare=False, repr=False)

    @property
    def passed(self) -> bool:
        return all(lib.passed for lib in self.libraries) and not self.notes

    @property
    def failures(self) -> list[LibraryVerdict]:
        return [lib for lib in self.libraries if not lib.passed]

    def summary(self) -> str:
        gated = [lib for lib in self.libraries if lib.gated]
        head = (f"{'PASS' if self.passed else 'FAIL'}: {self.source} for {self.target} "
                f"(compute {self.cuda_arch}): {len(gated)} gated, "
                f"{len(self.libraries) - len(gated)} reported, {self.scanned} ELF files scanned")
        if self.cuobjdump_checked and not any(lib.note for lib in self.libraries):
            head += ", cuobjdump agrees"
        if self.notes:
            head += "; " + "; ".join(self.notes)
        if self.failures:
            worst_ = ", ".join(f"{short_path(f.report.path)} ({f.note or f.reason or f.level})"
                               for f in self.failures[:3])
            more = f" and {len(self.failures) - 3} more" if len(self.failures) > 3 else ""
            head += f"; failing: {worst_}{more}"
        return head

    def first_start(self):
        """What the first start on the target compiles (``firststart.FirstStart``)."""
        from edgevllm.verify.firststart import first_start

        return first_start(self)

    def summary_dict(self) -> dict:
        """A compact record for build metadata (the image's verify label): the verdict without
        per-entry detail, and the first-start work in short."""
        return {"passed": self.passed, "target": self.target, "cuda_arch": str(self.cuda_arch),
                "summary": self.summary(), "scanned": self.scanned,
                "gated": sum(1 for lib in self.libraries if lib.gated),
                "failures": [{"path": lib.report.path, "level": lib.level, "note": lib.note}
                             for lib in self.failures],
                "first_start": self.first_start().compact()}

    def to_json(self) -> dict:
        return {"target": self.target, "cuda_arch": str(self.cuda_arch), "source": self.source,
                "passed": self.passed, "scanned": self.scanned, "summary": self.summary(),
                "cuobjdump_checked": self.cuobjdump_checked, "notes": self.notes,
                "first_start": self.first_start().to_json(),
                "libraries": [lib.to_json() for lib in self.libraries]}


@functools.lru_cache(maxsize=512)
def _arch_order(arch: str) -> tuple[int, str]:
    return int("".join(c for c in arch if c.isdigit()) or 0), arch


def coverage_of(report: LibraryReport, cuda_arch: CudaArch) -> tuple[Coverage, dict[int, str]]:
    # A unit that cannot run here but holds no kernel either (nvlink's device-link glue, a TU
    # of device globals) can never fail a launch: it is counted apart, not judged.
    empty = {unit for unit, names in report.unit_kernels.items() if names == []}
    levels = {unit: found for unit, found in unit_levels(report.entries, cuda_arch).items()
              if unit not in empty}
    by_unit: dict[int, set[str]] = {}
    for entry in report.entries:
        by_unit.setdefault(entry.container, set()).add(entry.arch)
    short = []
    for unit in sorted(u for u, found in levels.items() if found in ("ptx-jit", "none")):
        arches = sorted(by_unit[unit], key=_arch_order)
        kernels = list(report.unit_kernels.get(unit) or [])
        short.append(ShortUnit(unit, levels[unit], arches, kernels))
    cover = Coverage(len(levels), dict(Counter(levels.values())), short, len(empty))
    return cover, levels


def as_planned(cover: Coverage, planned_ptx: frozenset[str]) -> int:
    """Units that run only through PTX the kernel plan gives their extension (``8.0+PTX``
    -> ``compute_80``): what the tree's CMake chose for them, not a missing arch."""
    return sum(1 for unit in cover.short
               if unit.level == "ptx-jit" and planned_ptx & set(unit.arches))


def _decide(rule: Rule, cover: Coverage, levels: dict[int, str],
            planned: int = 0) -> tuple[bool, str]:
    """(passed, why it failed) for a library with device code; ``planned``: units below the
    rule that the kernel plan builds as PTX (excused, every-unit only)."""
    if rule.mode == "every-unit":
        below = sum(1 for found in levels.values() if not meets(found, rule.require)) - planned
        why = f"{below}/{cover.total} units below {rule.require}"
        return below == 0, why + (f" ({planned} more PTX as the kernel plan says)"
                                  if planned else "")
    if rule.mode == "report":
        return True, ""
    reaching = cover.reaching(rule.require)
    wanted = max(1, rule.min_coverage * cover.total)
    return reaching >= wanted, f"{reaching}/{cover.total} units reach {rule.require}"


def judge_library(report: LibraryReport, cuda_arch: CudaArch, policy: Policy,
                  note: str = "", planned_ptx: frozenset[str] = frozenset()) -> LibraryVerdict:
    rule = policy.rule_of(report.path)
    verdict = LibraryVerdict(report, rule.name, rule.require, "-", True, note, rule.mode)
    if report.corrupt:
        verdict.level, verdict.passed = "corrupt", rule.mode == "report"
        verdict.reason = report.status
    elif not report.has_device_code:
        if rule.mode != "report":
            verdict.passed, verdict.reason = False, NO_GPU_CODE
    else:
        verdict.coverage, levels = coverage_of(report, cuda_arch)
        verdict.level = verdict.coverage.headline
        if rule.mode == "every-unit" and rule.require != "ptx-jit":
            verdict.as_planned = as_planned(verdict.coverage, planned_ptx)
        verdict.passed, verdict.reason = _decide(rule, verdict.coverage, levels,
                                                 verdict.as_planned)
    verdict.passed = verdict.passed and not note
    return verdict


def judge(reports: list[LibraryReport], cuda_arch: CudaArch, policy: Policy, source: str = "",
          target: str = "", notes: dict[str, str] | None = None,
          cuobjdump_checked: bool | None = None, every_name: bool = True,
          planned: Mapping[str, Sequence[str]] | None = None) -> Verdict:
    """Gated libraries must meet their rule; the rest are listed when they carry device code,
    are corrupt, or disagree with cuobjdump (``notes``: path → disagreement). ``planned``: the
    kernel plan's arches by extension (a compile's lock), whose ``+PTX`` units pass as planned."""
    checked = notes is not None if cuobjdump_checked is None else cuobjdump_checked
    notes = notes or {}
    listed = []
    for report in reports:
        verdict = judge_library(report, cuda_arch, policy, notes.get(report.path, ""),
                                planned_ptx_codes(planned, report.path))
        if verdict.gated or report.has_device_code or report.corrupt or verdict.note:
            listed.append(verdict)
    _demangle(listed, every_name)
    return Verdict(target or str(cuda_arch), cuda_arch, source, listed, len(reports),
                   cuobjdump_checked=checked)


def planned_ptx_codes(planned: Mapping[str, Sequence[str]] | None, path: str) -> frozenset[str]:
    """The PTX codes the kernel plan gives the extension library ``path`` is (``vllm/
    _moe_C_stable_libtorch.abi3.so`` -> ``_moe_C_stable_libtorch``): ``{"compute_80"}`` for
    ``8.0+PTX``. Arches that are not CMake's spelling give nothing."""
    arches = (planned or {}).get(extension_name(path), ())
    codes = set()
    for arch in arches:
        try:
            codes |= {code.name for code in cmake_arch_codes(arch) if code.kind == "ptx"}
        except ArchParseError:
            continue
    return frozenset(codes)


def extension_name(path: str) -> str:
    """A library's extension name, as the kernel plan calls it: the file name to its first dot."""
    return PurePosixPath(path).name.split(".")[0]


def _demangle(libraries: list[LibraryVerdict], every_name: bool) -> None:
    """Readable kernel names: all of them for JSON, else only each unit's first (what a table
    cell can show) since c++filt takes a while on long CUTLASS templates."""
    names = [k for lib in libraries for unit in lib.coverage.short
             for k in (unit.kernels if every_name else unit.kernels[:1])]
    if not names:
        return
    from edgevllm.verify.demangle import demangle

    readable = demangle(names)
    for lib in libraries:
        for unit in lib.coverage.short:
            unit.kernels = [readable.get(k, k) for k in unit.kernels]
