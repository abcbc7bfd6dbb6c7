"""``inv verify --diff A B``: what changed in kernel coverage between two sources.

A source is an image, a tarball (or published manifest), a wheel or a folder, told apart by
what lies at that path. Libraries are matched by their path below the package root (see
``policy.anchors``), so a wheel compares with an image or a site-packages folder. A library is
*changed* when its level cell (level, units that run, units with no code) differs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from edgevllm.image.tarmanifest import is_part_name
from edgevllm.verify.judge import Verdict

_TARBALL_ENDINGS = (".tar", ".tar.gz", ".tgz", ".tar.zst", ".manifest.json")


@dataclass
class Change:
    path: str
    old: str | None  # level cell before (None: added)
    new: str | None  # after (None: removed)


@dataclass
class Diff:
    target: str
    old_source: str
    new_source: str
    changes: list[Change] = field(default_factory=list)
    unchanged: int = 0
    first_start: Change | None = None  # the first-start work, when it differs

    def to_json(self) -> dict:
        start = self.first_start
        return {"target": self.target, "old": self.old_source, "new": self.new_source,
                "unchanged": self.unchanged,
                "first_start": {"old": start.old, "new": start.new} if start else None,
                "changes": [{"path": c.path, "old": c.old, "new": c.new} for c in self.changes]}


def source_kind(text: str) -> dict:
    """``{"path": ...}``, ``{"tarball": ...}`` or ``{"image": ...}`` for one --diff value."""
    path = Path(text)
    if path.is_dir() or (path.is_file() and path.suffix in (".whl", ".so", ".cubin")):
        return {"path": text}
    if path.is_file() and (text.endswith(_TARBALL_ENDINGS) or is_part_name(path.name)):
        return {"tarball": text}
    if path.is_file():
        return {"path": text}
    return {"image": text}


def _key(path: str) -> str:
    from edgevllm.verify.policy import anchors

    return anchors(path.lstrip("./"))[-1]


def _cells(verdict: Verdict) -> dict[str, str]:
    from edgevllm.verify.report import level_cell

    return {_key(lib.report.path): level_cell(lib) for lib in verdict.libraries
            if lib.report.has_device_code or lib.report.corrupt}


def compare(target: str, old: Verdict, new: Verdict) -> Diff:
    before, after = _cells(old), _cells(new)
    result = Diff(target, old.source, new.source)
    for key in sorted(set(before) | set(after)):
        if before.get(key) == after.get(key):
            result.unchanged += 1
        else:
            result.changes.append(Change(key, before.get(key), after.get(key)))
    result.first_start = _first_start_change(old, new)
    return result


def _first_start_change(old: Verdict, new: Verdict) -> Change | None:
    from edgevllm.verify.firststart import first_start_cell

    cells = [first_start_cell(verdict.first_start().compact()) for verdict in (old, new)]
    return None if cells[0] == cells[1] else Change("first start", *cells)


def diff_sources(target: str, old: str, new: str, policy=None, engine=None) -> Diff:
    from edgevllm.verify.api import verify

    verdicts = [verify(target, engine=engine, policy=policy, **source_kind(text))
                for text in (old, new)]
    return compare(verdicts[0].target, *verdicts)


def print_diff(diff: Diff) -> None:
    from edgevllm.common.console import out_console

    console = out_console()
    console.print(f"coverage for {diff.target}: {diff.old_source} → {diff.new_source}",
                  highlight=False, soft_wrap=True)
    for change in diff.changes:
        if change.old is None:
            line = f"  + {change.path}: {change.new}"
        elif change.new is None:
            line = f"  - {change.path}: {change.old}"
        else:
            line = f"  ~ {change.path}: {change.old} → {change.new}"
        console.print(line, highlight=False, soft_wrap=True)
    if diff.first_start:
        console.print(f"  ~ first start: {diff.first_start.old} → {diff.first_start.new}",
                      highlight=False, soft_wrap=True)
    console.print(f"{len(diff.changes)} changed, {diff.unchanged} unchanged", highlight=False)


