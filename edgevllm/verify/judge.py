"""Judge scanned libraries against a target and a policy: the verify gate's verdict."""

from __future__ import annotations

from dataclasses import dataclass, field

from edgevllm.verify.compat import CudaArch, library_level, meets
from edgevllm.verify.library import LibraryReport, short_path
from edgevllm.verify.policy import Policy


@dataclass
class LibraryVerdict:
    report: LibraryReport
    rule: str  # policy rule name, "-" for none
    required: str  # native | compatible | ptx-jit | report
    level: str  # native | compatible | ptx-jit | none | "-" (no device code) | corrupt
    passed: bool
    note: str = ""  # e.g. a cuobjdump disagreement

    @property
    def gated(self) -> bool:
        return self.required != "report"

    def to_json(self) -> dict:
        return dict(self.report.to_json(), rule=self.rule, required=self.required, level=self.level,
                    passed=self.passed, note=self.note, sass=self.report.arches("sass"),
                    ptx=self.report.arches("ptx"))


@dataclass
class Verdict:
    target: str
    cuda_arch: CudaArch
    source: str
    libraries: list[LibraryVerdict]
    scanned: int  # ELF libraries read, with or without device code
    cuobjdump_checked: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(lib.passed for lib in self.libraries)

    @property
    def failures(self) -> list[LibraryVerdict]:
        return [lib for lib in self.libraries if not lib.passed]

    def summary(self) -> str:
        gated = [lib for lib in self.libraries if lib.gated]
        head = (f"{'PASS' if self.passed else 'FAIL'}: {self.source} for {self.target} "
                f"(compute {self.cuda_arch}): {len(gated)} gated, "
                f"{len(self.libraries) - len(gated)} reported, {self.scanned} ELF files scanned")
        if self.cuobjdump_checked:
            head += ", cuobjdump agrees" if not any(l.note for l in self.libraries) else ""
        if self.failures:
            worst = ", ".join(f"{short_path(l.report.path)} ({l.note or l.level})" for l in self.failures[:3])
            more = f" and {len(self.failures) - 3} more" if len(self.failures) > 3 else ""
            head += f"; failing: {worst}{more}"
        return head

    def summary_dict(self) -> dict:
        """A compact record for build metadata: the verdict without per-entry detail."""
        return {"passed": self.passed, "target": self.target, "cuda_arch": str(self.cuda_arch),
                "summary": self.summary(), "scanned": self.scanned,
                "gated": sum(1 for lib in self.libraries if lib.gated),
                "failures": [{"path": lib.report.path, "level": lib.level, "note": lib.note}
                             for lib in self.failures]}

    def to_json(self) -> dict:
        return {"target": self.target, "cuda_arch": str(self.cuda_arch), "source": self.source,
                "passed": self.passed, "scanned": self.scanned, "summary": self.summary(),
                "cuobjdump_checked": self.cuobjdump_checked, "notes": self.notes,
                "libraries": [lib.to_json() for lib in self.libraries]}


def judge_library(report: LibraryReport, cuda_arch: CudaArch, policy: Policy,
                  note: str = "") -> LibraryVerdict:
    rule, required = policy.rule_for(report.path)
    if report.corrupt:
        level, ok = "corrupt", required == "report"
    elif not report.has_device_code:
        level, ok = "-", True
    else:
        level = library_level(report.entries, cuda_arch)
        ok = meets(level, required)
    return LibraryVerdict(report, rule, required, level, ok and not note, note)


def judge(reports: list[LibraryReport], cuda_arch: CudaArch, policy: Policy, source: str = "",
          target: str = "", notes: dict[str, str] | None = None) -> Verdict:
    """Gated libraries must meet their rule; the rest are listed when they carry device code,
    are corrupt, or disagree with cuobjdump (``notes``: path → disagreement)."""
    checked, notes = notes is not None, notes or {}
    listed = []
    for report in reports:
        verdict = judge_library(report, cuda_arch, policy, notes.get(report.path, ""))
        if verdict.gated or report.has_device_code or report.corrupt or verdict.note:
            listed.append(verdict)
    return Verdict(target or str(cuda_arch), cuda_arch, source, listed, len(reports),
                   cuobjdump_checked=checked)
