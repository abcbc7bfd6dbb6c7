"""The probe's result: a list of checks, each pass / warn / fail / absent, as JSON or one glance.

``passed`` is true when no check failed; warnings and absent optional components do not fail a
probe. ``summary()`` is one short line (it goes into an image label); ``render()`` is the
printout for a person; ``to_json()`` is the machine-readable result.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from edgevllm.common.fsutil import atomic_write_text

PASS, WARN, FAIL, ABSENT = "pass", "warn", "fail", "absent"
STATUSES = (PASS, WARN, FAIL, ABSENT)
_MARK = {PASS: "ok  ", WARN: "WARN", FAIL: "FAIL", ABSENT: "--  "}


@dataclass
class Check:
    id: str
    status: str
    message: str
    remedy: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"check {self.id}: status {self.status!r} not in {STATUSES}")


@dataclass
class ProbeResult:
    image: str
    target: str
    level: int
    checks: list[Check] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)  # versions, timings, image id
    log_tail: list[str] = field(default_factory=list)
    duration_s: float | None = None

    def add(self, check_id: str, status: str, message: str, remedy: str | None = None,
            **detail: Any) -> Check:
        check = Check(check_id, status, message, remedy, detail)
        self.checks.append(check)
        return check

    def by_status(self, status: str) -> list[Check]:
        return [c for c in self.checks if c.status == status]

    def get(self, check_id: str) -> Check | None:
        return next((c for c in self.checks if c.id == check_id), None)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and not self.by_status(FAIL)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["passed"] = self.passed
        data["summary"] = self.summary()
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def write_json(self, path: Path | str) -> Path:
        """Write the JSON result atomically: an interrupted write leaves no file under ``path``."""
        return atomic_write_text(path, self.to_json())

    def summary(self) -> str:
        """One short line, e.g. ``level1 pass (9 ok, 2 warn)`` or ``level2 fail: health``."""
        counts = f"{len(self.by_status(PASS))} ok, {len(self.by_status(WARN))} warn"
        if self.passed:
            return f"level{self.level} pass ({counts})"
        if not self.checks:
            return f"level{self.level} fail: no checks ran"
        failed = ", ".join(c.id for c in self.by_status(FAIL)[:4])
        more = len(self.by_status(FAIL)) - 4
        return f"level{self.level} fail: {failed}" + (f" +{more} more" if more > 0 else "")

    def render(self) -> str:
        """The printout for a person: one line per check, remedies under failures/warnings."""
        lines = [f"probe level {self.level}: {self.image} for target {self.target}"]
        for check in self.checks:
            lines.append(f"  [{_MARK[check.status]}] {check.id}: {check.message}")
            if check.detail.get("line"):
                lines.append(f"         seen (line {check.detail.get('line_no')}): "
                             f"{str(check.detail['line'])[:160]}")
            if check.remedy and check.status in (FAIL, WARN):
                lines.append(f"         remedy: {check.remedy}")
        if self.log_tail and not self.passed:
            lines.append("  log tail:")
            lines += [f"    | {line}" for line in self.log_tail[-15:]]
        verdict = "PASSED" if self.passed else "FAILED"
        lines.append(f"{verdict}: {self.summary()}")
        return "\n".join(lines)
