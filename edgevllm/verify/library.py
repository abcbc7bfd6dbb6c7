"""One scanned file: its path, its fatbin entries, and whether it could be read.

Two kinds are scanned: host ELF files (shared objects, relocatable objects) whose
``.nv_fatbin`` / ``__nv_relfatbin`` sections hold fatbin containers, and raw cubins (an ELF
with ``e_machine`` EM_CUDA: flashinfer-cubin, JIT caches), which are one unit of SASS each.

With a target (``inspect_buffer(path, buf, target)``), the kernel names of every unit with no
SASS that runs on that target (PTX-JIT only, or nothing) are read while the file is at hand
(the unit's smallest entry is decompressed), so a report can name what is missing without
reading the file again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from edgevllm.common.errors import VerifyError
from edgevllm.verify.fatbin import FatbinEntry, parse_library

# Shared objects (libfoo.so, libfoo.so.13, _C.abi3.so), relocatable objects and raw cubins.
_LIBRARY_NAME = re.compile(r"(\.so(\.\d+)*|\.o|\.cubin)$")
_PTX_ENTRY = re.compile(rb"\.entry\s+([A-Za-z_$][\w$]*)")


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
    kind: str = "library"  # "library" (host ELF) or "cubin" (raw cubin file)
    # unit → kernel names (mangled), for units with no SASS that runs on the scan's target;
    # [] = the unit holds no kernel at all (e.g. nvlink glue), None = it could not be read
    unit_kernels: dict[int, list[str] | None] = field(default_factory=dict)

    @property
    def corrupt(self) -> bool:
        return self.status.startswith("corrupt")

    @property
    def has_device_code(self) -> bool:
        return bool(self.entries)

    @property
    def units(self) -> int:
        return len({e.container for e in self.entries})

    def arches(self, kind: str) -> list[str]:
        """Distinct arches of one kind (``"sass"`` / ``"ptx"``), in SM order."""
        found = {(e.sm, e.variant, e.arch) for e in self.entries if e.kind == kind}
        return [arch for _, _, arch in sorted(found)]

    def to_json(self) -> dict:
        return {"path": self.path, "size": self.size, "status": self.status, "kind": self.kind,
                "entries": [e.to_json() for e in self.entries]}


def inspect_buffer(path: str, buf, target=None) -> LibraryReport:
    """Parse one ELF image held in memory; a corrupt one becomes a report, never an exception.

    ``target`` (a ``CudaArch``): also read the kernel names of the units with no SASS for it."""
    from edgevllm.verify.elf import is_cuda_elf

    report = LibraryReport(path=path, size=len(buf))
    try:
        if is_cuda_elf(buf):
            report.kind, report.entries = "cubin", [_cubin_entry(buf)]
        else:
            report.entries = parse_library(buf)
        if target is not None and report.entries:
            report.unit_kernels = _missing_kernels(report, buf, target)
    except VerifyError as exc:
        report.status = f"corrupt: {exc}"
        return report
    if not report.entries:
        report.status = "no device code"
    return report


def _cubin_entry(buf) -> FatbinEntry:
    from edgevllm.common.errors import CorruptBinaryError
    from edgevllm.verify.elf import cubin_sm, cubin_variant

    sm = cubin_sm(buf)
    if not sm:
        raise CorruptBinaryError("a CUDA ELF whose header names no SM")
    return FatbinEntry("sass", sm, cubin_variant(buf), "none", 0, "cubin", 0, len(buf), len(buf))


def _missing_kernels(report: LibraryReport, buf, target) -> dict[int, list[str] | None]:
    from edgevllm.verify.compat import unit_levels

    short = [unit for unit, found in unit_levels(report.entries, target).items()
             if found in ("ptx-jit", "none")]
    return {unit: unit_kernel_names(report, buf, unit) for unit in short}


def unit_kernel_names(report: LibraryReport, buf, unit: int) -> list[str] | None:
    """The kernels of one unit, from its smallest SASS entry (else its smallest PTX entry);
    None when that entry cannot be read."""
    from edgevllm.verify.decompress import payload_bytes
    from edgevllm.verify.elf import text_symbols

    if report.kind == "cubin":  # its file name says more than its symbols, and costs nothing
        return [report.path.rsplit("/", 1)[-1]]
    entries = [e for e in report.entries if e.container == unit and e.kind in ("sass", "ptx")]
    if not entries:
        return None
    entry = min(entries, key=lambda e: (e.kind != "sass", e.full_size))
    stored = memoryview(buf)[entry.offset:entry.offset + entry.stored_size]
    try:
        data = payload_bytes(stored, entry.compression, entry.full_size)
    except VerifyError:
        return None
    if entry.kind == "sass":
        return text_symbols(data)
    return [name.decode() for name in _PTX_ENTRY.findall(data)]


def cubin_group(path: str) -> str:
    """The group a raw cubin is reported in: its package folder (``flashinfer_cubin``) when
    it lies below a package root, else its own folder."""
    from edgevllm.verify.policy import anchors

    cut = anchors(path.lstrip("./"))
    inner = cut[-1]
    if len(cut) > 1 or "/" in inner:
        prefix = path[:len(path) - len(inner)] + inner.split("/", 1)[0]
    else:
        prefix = path.rsplit("/", 1)[0] if "/" in path else "."
    return prefix


def group_cubins(reports: list[LibraryReport]) -> list[LibraryReport]:
    """Raw cubins folded into one report per ``cubin_group`` (``<group>/**/*.cubin``), one unit
    per file, so that 15,970 FlashInfer cubins make one table row; corrupt ones stay rows."""
    groups: dict[str, list[LibraryReport]] = {}
    others = []
    for report in reports:
        if report.kind == "cubin" and not report.corrupt:
            groups.setdefault(cubin_group(report.path), []).append(report)
        else:
            others.append(report)
    for prefix, members in groups.items():
        merged = LibraryReport(f"{prefix}/**/*.cubin", sum(m.size for m in members), kind="cubins")
        for unit, member in enumerate(sorted(members, key=lambda m: m.path)):
            entry = member.entries[0]
            merged.entries.append(FatbinEntry(entry.kind, entry.sm, entry.variant, "none", unit,
                                              "cubin"))
            if member.unit_kernels:
                merged.unit_kernels[unit] = [member.path.rsplit("/", 1)[-1]]
        merged.status = f"ok: {len(members)} cubins"
        others.append(merged)
    return sorted(others, key=lambda r: r.path)
