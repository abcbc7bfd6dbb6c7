"""Undo a fatbin entry's compression, whole or only its first bytes.

nvcc 13 compresses entries with ZSTD by default (a standard zstd frame) and with LZ4 under
``--compress-mode=speed`` (a raw LZ4 *block*, no frame header). Reading the first 64 bytes is
enough to check the cubin's own ELF header against the entry header; the whole payload is
only needed to list the kernels of a unit that has no code for the target.
"""

from __future__ import annotations

import threading

from edgevllm.common.errors import CorruptBinaryError

_LOCAL = threading.local()  # a ZstdDecompressor must not be shared between threads


def _zstd():
    decompressor = getattr(_LOCAL, "zstd", None)
    if decompressor is None:  # imported on first use: scans without ZSTD never pay for it
        import zstandard

        decompressor = _LOCAL.zstd = zstandard.ZstdDecompressor()
    return decompressor


def _zstd_bytes(data, limit: int) -> bytes:
    import zstandard

    try:  # the reader takes the (mmap-backed) buffer as it is: no copy of the payload
        with _zstd().stream_reader(data, read_across_frames=False) as reader:
            return reader.read(limit)
    except zstandard.ZstdError as exc:
        raise CorruptBinaryError(f"ZSTD payload does not decompress ({exc})") from None


def _run_length(data, cursor: int, start: int) -> tuple[int, int]:
    """An LZ4 length nibble of 15 continues in the following bytes (255 = keep adding)."""
    length = start
    if start == 15:
        while True:
            if cursor >= len(data):
                raise CorruptBinaryError("LZ4 block ends inside a length")
            extra = data[cursor]
            cursor += 1
            length += extra
            if extra != 255:
                break
    return length, cursor


def lz4_block(data, limit: int) -> bytes:
    """Decode an LZ4 block until ``limit`` bytes are out (or the block ends)."""
    out, cursor, size = bytearray(), 0, len(data)
    while cursor < size and len(out) < limit:
        token = data[cursor]
        literals, cursor = _run_length(data, cursor + 1, token >> 4)
        out += data[cursor:cursor + literals]
        cursor += literals
        if cursor >= size or len(out) >= limit:
            break
        if cursor + 2 > size:
            raise CorruptBinaryError("LZ4 block ends inside a match offset")
        distance = data[cursor] | data[cursor + 1] << 8
        match, cursor = _run_length(data, cursor + 2, token & 15)
        if distance == 0 or distance > len(out):
            raise CorruptBinaryError("LZ4 match points before the start of the output")
        _copy_match(out, distance, match + 4)
    return bytes(out[:limit])


def _copy_match(out: bytearray, distance: int, length: int) -> None:
    start = len(out) - distance
    while length > 0:  # an overlapping match repeats the bytes just written
        chunk = out[start:start + min(length, distance)]
        out += chunk
        start += len(chunk)
        length -= len(chunk)


def payload_bytes(data, compression: str, limit: int):
    """The first ``limit`` bytes of an entry's payload, decompressed as needed (an uncompressed
    payload comes back as a view of ``data``, not a copy)."""
    if compression == "zstd":
        return _zstd_bytes(data, limit)
    if compression == "lz4":
        return lz4_block(data, limit)
    return memoryview(data)[:limit]
