"""A minimal ELF64 little-endian reader: just enough to find the fatbin sections.

Works on any buffer (bytes, mmap, memoryview) so a library read from a file, an mmap or a tar
member is handled alike. Every offset is bounds-checked: a truncated file raises
``CorruptBinaryError`` with the reason instead of an IndexError or struct.error.
"""

from __future__ import annotations

import re
import struct

from edgevllm.common.errors import CorruptBinaryError, NotElfError

ELF_MAGIC = b"\x7fELF"
FATBIN_SECTIONS = (".nv_fatbin", "__nv_relfatbin")
_SHT_NOBITS = 8
_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")  # e_ident .. e_shstrndx (64 bytes)
_SHDR = struct.Struct("<IIQQQQIIQQ")  # sh_name .. sh_entsize (64 bytes)


def is_elf(head: bytes) -> bool:
    return bytes(head[:4]) == ELF_MAGIC


def _header(buf) -> tuple:
    if len(buf) < 4 or not is_elf(buf):
        raise NotElfError("not an ELF file")
    if len(buf) < _EHDR.size:
        raise CorruptBinaryError("truncated ELF header")
    fields = _EHDR.unpack_from(buf, 0)
    ident = fields[0]
    if ident[4] != 2 or ident[5] != 1:
        raise CorruptBinaryError("not a 64-bit little-endian ELF "
                                 "(only ELF64 LE carries CUDA code here)")
    return fields


def _section_headers(buf) -> tuple[list[tuple], int]:
    """The section headers and the index of the section-name table among them."""
    fields = _header(buf)
    shoff, shentsize, shnum, shstrndx = fields[6], fields[11], fields[12], fields[13]
    if shoff == 0 or shnum == 0:
        return [], 0
    if shentsize < _SHDR.size or shoff + shentsize * shnum > len(buf):
        raise CorruptBinaryError("section header table lies past the end of the file (truncated?)")
    headers = [_SHDR.unpack_from(buf, shoff + i * shentsize) for i in range(shnum)]
    if shstrndx >= shnum:
        raise CorruptBinaryError("section name table index out of range")
    return headers, shstrndx


def _name(strtab, offset: int, limit: int = 64) -> str:
    end = bytes(strtab[offset:offset + limit]).find(b"\0")
    return bytes(strtab[offset:offset + (end if end >= 0 else limit)]).decode("latin-1")


def _contents(buf, header: tuple) -> memoryview:
    offset, size = header[4], header[5]
    if header[1] == _SHT_NOBITS:
        return memoryview(b"")
    if offset + size > len(buf):
        raise CorruptBinaryError("a section lies past the end of the file (truncated?)")
    return memoryview(buf)[offset:offset + size]


def fatbin_sections(buf) -> list[tuple[str, memoryview]]:
    """``[(section name, contents)]`` for each ``.nv_fatbin`` / ``__nv_relfatbin`` section."""
    return [(name, contents) for name, contents, _ in fatbin_sections_at(buf)]


def fatbin_sections_at(buf) -> list[tuple[str, memoryview, int]]:
    """Like ``fatbin_sections``, with each section's file offset."""
    headers, shstrndx = _section_headers(buf)
    if not headers:
        return []
    strtab = _contents(buf, headers[shstrndx])
    found: list[tuple[str, memoryview, int]] = []
    for header in headers:
        name = _name(strtab, header[0])
        if name in FATBIN_SECTIONS:
            found.append((name, _contents(buf, header), header[4]))
    return found


EM_CUDA = 190
_ABI_V7_MAX = 7  # e_ident[EI_ABIVERSION]: CUDA <= 12.x cubins say 7 (or less), CUDA 13 says 8


def is_cuda_elf(buf) -> bool:
    """A raw cubin (``e_machine`` EM_CUDA), not a host library."""
    return len(buf) >= 20 and is_elf(buf) and struct.unpack_from("<H", buf, 18)[0] == EM_CUDA


def cubin_sm(payload) -> int | None:
    """The SM number an uncompressed cubin was built for, from its ELF header's ``e_flags``.

    Cubin ELF ABI version 8 (CUDA 13) keeps the SM in bits 8-15 (``0x6006e02`` → 110); ABI
    version 7 and older (CUDA 11.x-12.x) in bits 0-7 (``0x4b054b`` → 75)."""
    if len(payload) < _EHDR.size or not is_elf(payload):
        return None
    flags = _EHDR.unpack_from(payload, 0)[7]
    if payload[8] <= _ABI_V7_MAX:
        return flags & 0xFF
    return (flags >> 8) & 0xFF


_ARCH_NOTE = re.compile(rb"-arch sm_(\d+)([af]?)\b")


def cubin_variant(cubin) -> str:
    """``a``/``f``/"" of a raw cubin: e_flags does not say, ptxas's own command line does (kept
    in the ``.note.nv.tkinfo`` note near the start of the file)."""
    match = _ARCH_NOTE.search(bytes(cubin[:16384]))
    return match.group(2).decode() if match else ""


def text_symbols(cubin) -> list[str]:
    """Kernel names of a whole (uncompressed) cubin: its ``.text.<name>`` sections, in order."""
    try:
        headers, shstrndx = _section_headers(cubin)
    except (CorruptBinaryError, NotElfError, struct.error):
        return []
    if not headers:
        return []
    table = bytes(_contents(cubin, headers[shstrndx]))  # one copy; names are sliced out of it
    kernels = []
    for header in headers:
        start = header[0]
        if table.startswith(b".text.", start):
            end = table.find(b"\0", start)
            kernels.append(table[start + 6:end if end >= 0 else len(table)].decode("latin-1"))
    return kernels
