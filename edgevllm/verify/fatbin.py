"""Parse the CUDA fatbin containers in an ELF section into entries, without decompressing.

Layout (little-endian; see docs/verify.md): containers back to back, each 8-byte aligned, with a
16-byte header (magic, version, header size, payload size); entries follow until the payload
ends, each with its own header holding kind, SM number, a/f variant flags and compression flags.
"""

from __future__ import annotations

import struct
from dataclasses import asdict, dataclass

from edgevllm.kernel.errors import CorruptBinaryError
from edgevllm.verify.elf import cubin_sm, fatbin_sections

MAGIC = 0xBA55ED50
_CONTAINER = struct.Struct("<IHHQ")
_ENTRY = struct.Struct("<HHIQI")  # kind, (unused), header size, payload size, compressed size
_ENTRY_MIN = 0x40
KINDS = {1: "ptx", 2: "sass"}
FLAG_A, FLAG_F = 0x100000, 0x200000
FLAG_ZSTD, FLAG_LZ4 = 0x8000, 0x2000


@dataclass(frozen=True)
class FatbinEntry:
    """One PTX or SASS image inside a fatbin container."""

    kind: str  # "sass", "ptx" or "kind-<n>" for anything else (e.g. LTO IR)
    sm: int  # 110, 121, ...
    variant: str  # "" (plain), "a" (arch-specific) or "f" (family)
    compression: str  # "none", "zstd" or "lz4"
    container: int  # index of the container within the library (one per translation unit)

    @property
    def arch(self) -> str:
        """``sm_110a`` for SASS, ``compute_121f`` for PTX (nvcc's spelling)."""
        prefix = "compute" if self.kind == "ptx" else "sm"
        return f"{prefix}_{self.sm}{self.variant}"

    def to_json(self) -> dict:
        return dict(asdict(self), arch=self.arch)


def _variant(flags: int) -> str:
    return "a" if flags & FLAG_A else "f" if flags & FLAG_F else ""


def _compression(flags: int) -> str:
    return "zstd" if flags & FLAG_ZSTD else "lz4" if flags & FLAG_LZ4 else "none"


def _entry(data, offset: int, end: int, container: int) -> tuple[FatbinEntry, int]:
    if offset + _ENTRY_MIN > end:
        raise CorruptBinaryError(f"truncated fatbin entry header at +{offset:#x}")
    kind, _, header_size, payload_size, _ = _ENTRY.unpack_from(data, offset)
    sm = struct.unpack_from("<I", data, offset + 0x1C)[0]
    flags = struct.unpack_from("<Q", data, offset + 0x28)[0]
    if header_size < _ENTRY_MIN or offset + header_size + payload_size > end:
        raise CorruptBinaryError(f"fatbin entry at +{offset:#x} runs past its container")
    entry = FatbinEntry(KINDS.get(kind, f"kind-{kind}"), sm, _variant(flags), _compression(flags),
                        container)
    _check_cubin(entry, data[offset + header_size:offset + header_size + payload_size], offset)
    return entry, offset + header_size + payload_size


def _check_cubin(entry: FatbinEntry, payload, offset: int) -> None:
    """An uncompressed cubin names its SM again in its own ELF header: they must agree."""
    if entry.kind != "sass" or entry.compression != "none":
        return
    sm = cubin_sm(payload)
    if sm is not None and sm != entry.sm & 0xFF:
        raise CorruptBinaryError(f"fatbin entry at +{offset:#x} says sm_{entry.sm}, its cubin sm_{sm}")


def parse_section(data, first_container: int = 0) -> list[FatbinEntry]:
    """Every entry of every container in one fatbin section's contents."""
    entries: list[FatbinEntry] = []
    offset, container = 0, first_container
    while offset + 8 <= len(data):
        if struct.unpack_from("<Q", data, offset)[0] == 0:  # padding between/after containers
            offset += 8
            continue
        if offset + _CONTAINER.size > len(data):
            raise CorruptBinaryError(f"truncated fatbin container header at +{offset:#x}")
        magic, _, header_size, payload_size = _CONTAINER.unpack_from(data, offset)
        if magic != MAGIC or header_size < _CONTAINER.size:
            raise CorruptBinaryError(f"no fatbin container magic at +{offset:#x}")
        end = offset + header_size + payload_size
        if end > len(data):
            raise CorruptBinaryError(f"fatbin container at +{offset:#x} is truncated")
        cursor = offset + header_size
        while cursor < end:
            entry, cursor = _entry(data, cursor, end, container)
            entries.append(entry)
        offset, container = (end + 7) & ~7, container + 1
    return entries


def parse_library(buf) -> list[FatbinEntry]:
    """All fatbin entries of an ELF file (empty: no device code). Raises on corrupt input."""
    entries: list[FatbinEntry] = []
    for _, contents in fatbin_sections(buf):
        containers = len({e.container for e in entries})
        entries += parse_section(contents, containers)
    return entries
