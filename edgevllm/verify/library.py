"""One scanned library: its path, its fatbin entries, and whether it could be read."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from edgevllm.kernel.errors import VerifyError
from edgevllm.verify.fatbin import FatbinEntry, parse_library

# Shared objects (libfoo.so, libfoo.so.13, _C.abi3.so) and relocatable objects.
_LIBRARY_NAME = re.compile(r"(\.so(\.\d+)*|\.o)$")


def is_library_name(path: str) -> bool:
    return bool(_LIBRARY_NAME.search(path))


def short_path(path: str) -> str:
    """``.../torch/lib/libtorch_cuda.so`` for a path under site-packages (the JSON keeps it all)."""
    for marker in ("site-packages/", "dist-packages/"):
        if marker in path:
            return ".../" + path.split(marker, 1)[1]
    return path


@dataclass
class LibraryReport:
    path: str
    size: int
    entries: list[FatbinEntry] = field(default_factory=list)
    status: str = "ok"  # "ok", "no device code" or "corrupt: <why>"

    @property
    def corrupt(self) -> bool:
        return self.status.startswith("corrupt")

    @property
    def has_device_code(self) -> bool:
        return bool(self.entries)

    def arches(self, kind: str) -> list[str]:
        """Distinct arches of one kind (``"sass"`` / ``"ptx"``), in SM order."""
        found = {(e.sm, e.variant, e.arch) for e in self.entries if e.kind == kind}
        return [arch for _, _, arch in sorted(found)]

    def to_json(self) -> dict:
        return {"path": self.path, "size": self.size, "status": self.status,
                "entries": [e.to_json() for e in self.entries]}


def inspect_buffer(path: str, buf) -> LibraryReport:
    """Parse one ELF image held in memory; a corrupt one becomes a report, never an exception."""
    report = LibraryReport(path=path, size=len(buf))
    try:
        report.entries = parse_library(buf)
    except VerifyError as exc:
        report.status = f"corrupt: {exc}"
        return report
    if not report.entries:
        report.status = "no device code"
    return report
