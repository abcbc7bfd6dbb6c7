"""Parse the CUDA fatbin containers in an ELF section into entries.

Layout (little-endian; see docs/verify.md): containers back to back, each 8-byte aligned, with a
16-byte header (magic, version, header size, payload size); entries follow until the payload
ends, each with its own header holding kind, SM number, a/f variant flags and compression flags.
A SASS entry's cubin names its SM again in its own ELF header; that is checked for every entry,
compressed ones through their first 64 decompressed bytes (decompress.py).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from edgevllm.common.errors import CorruptBinaryError
from edgevllm.verify.decompress import payload_bytes
from edgevllm.verify.elf import cubin_sm, fatbin_sections_at, is_elf

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
    section: str = ".nv_fatbin"  # or "__nv_relfatbin" (relocatable device code)
    # Where the payload lies in the file and how big it is once decompressed: kept to list a
    # unit's kernels later; not part of an entry's identity.
    offset: int = field(default=0, compare=False, repr=False)
    stored_size: int = field(default=0, compare=False, repr=False)
    full_size: int = field(default=0, compare=False, repr=False)

    @property
    def arch(self) -> str:
        """``sm_110a`` for SASS, ``compute_121f`` for PTX (nvcc's spelling)."""
        prefix = "compute" if self.kind == "ptx" else "sm"
        return f"{prefix}_{self.sm}{self.variant}"

    def to_json(self) -> dict:
        return {"kind": self.kind, "sm": self.sm, "variant": self.variant,
                "compression": self.compression, "container": self.container,
                "section": self.section, "arch": self.arch}


def _variant(flags: int) -> str:
    return "a" if flags & FLAG_A else "f" if flags & FLAG_F else ""


def _compression(flags: int) -> str:
    return "zstd" if flags & FLAG_ZSTD else "lz4" if flags & FLAG_LZ4 else "none"


def _entry(data, offset: int, end: int, container: int,
           where: tuple[str, int]) -> tuple[FatbinEntry, int]:
    if offset + _ENTRY_MIN > end:
        raise CorruptBinaryError(f"truncated fatbin entry header at +{offset:#x}")
    kind, _, header_size, payload_size, compressed_size = _ENTRY.unpack_from(data, offset)
    sm = struct.unpack_from("<I", data, offset + 0x1C)[0]
    flags, _, full_size = struct.unpack_from("<QQQ", data, offset + 0x28)
    if header_size < _ENTRY_MIN or offset + header_size + payload_size > end:
        raise CorruptBinaryError(f"fatbin entry at +{offset:#x} runs past its container")
    compression = _compression(flags)
    stored = compressed_size if compression != "none" and 0 < compressed_size <= payload_size \
        else payload_size
    start = offset + header_size
    entry = FatbinEntry(KINDS.get(kind, f"kind-{kind}"), sm, _variant(flags), compression,
                        container, where[0], where[1] + start, stored, full_size or stored)
    _check_cubin(entry, data[start:start + stored], offset)
    return entry, start + payload_size


def _check_cubin(entry: FatbinEntry, payload, offset: int) -> None:
    """A cubin names its SM again in its own ELF header: they must agree."""
    if entry.kind != "sass":
        return
    head = payload_bytes(payload, entry.compression, 64)
    if entry.compression != "none" and not is_elf(head):
        raise CorruptBinaryError(f"fatbin entry at +{offset:#x} ({entry.compression}) does not "
                                 "decompress to a cubin")
    sm = cubin_sm(head)
    if sm is not None and sm != entry.sm & 0xFF:
        raise CorruptBinaryError(f"fatbin entry at +{offset:#x} says sm_{entry.sm}, "
                                 f"its cubin sm_{sm}")


def parse_section(data, first_container: int = 0, where: tuple[str, int] = (".nv_fatbin", 0)
                  ) -> list[FatbinEntry]:
    """Every entry of every container in one fatbin section's contents (``where``: the section's
    name and file offset)."""
    entries: list[FatbinEntry] = []
    offset, container = 0, first_container
    while offset + 8 <= len(data):
        if struct.unpack_from("<Q", data, offset)[0] == 0:  # padding between/after containers
            offset += 8
            continue
        end = _container_end(data, offset)
        cursor = offset + _CONTAINER.unpack_from(data, offset)[2]
        while cursor < end:
            entry, cursor = _entry(data, cursor, end, container, where)
            entries.append(entry)
        offset, container = (end + 7) & ~7, container + 1
    return entries


def _container_end(data, offset: int) -> int:
    if offset + _CONTAINER.size > len(data):
        raise CorruptBinaryError(f"truncated fatbin container header at +{offset:#x}")
    magic, _, header_size, payload_size = _CONTAINER.unpack_from(data, offset)
    if magic != MAGIC or header_size < _CONTAINER.size:
        raise CorruptBinaryError(f"no fatbin container magic at +{offset:#x}")
    end = offset + header_size + payload_size
    if end > len(data):
        raise CorruptBinaryError(f"fatbin container at +{offset:#x} is truncated")
    return end


def parse_library(buf) -> list[FatbinEntry]:
    """All fatbin entries of an ELF file (empty: no device code). Raises on corrupt input."""
    entries: list[FatbinEntry] = []
    for name, contents, file_offset in fatbin_sections_at(buf):
        containers = len({e.container for e in entries})
        entries += parse_section(contents, containers, (name, file_offset))
    return entries
