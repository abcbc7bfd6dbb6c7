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


_PIECE = 1 << 20
# The most one entry is decompressed to, whole, in memory (to list its kernels): the largest
# cubin of a real library (libtorch_cuda's, vLLM's) is a few MiB to tens of MiB.
MAX_UNIT_BYTES = 128 << 20


def _zstd_bytes(data, limit: int) -> bytes:
    import zstandard

    pieces, got = [], 0
    try:  # the reader takes the (mmap-backed) buffer as it is: no copy of the payload
        with _zstd().stream_reader(data, read_across_frames=False) as reader:
            while got < limit:  # read(n) allocates n bytes first: never ask for a declared size
                piece = reader.read(min(_PIECE, limit - got))
                if not piece:
                    break
                pieces.append(piece)
                got += len(piece)
    except zstandard.ZstdError as exc:
        raise CorruptBinaryError(f"ZSTD payload does not decompress ({exc})") from None
    if got > MAX_UNIT_BYTES:  # refused before the pieces are joined (that would double them)
        _too_big("zstd")
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def _too_big(compression: str) -> None:
    from edgevllm.common.errors import ResourceLimitError
    from edgevllm.verify.limits import human

    raise ResourceLimitError(f"a {compression} fatbin entry decompresses to over "
                             f"{human(MAX_UNIT_BYTES)}, the most one entry is read whole to; "
                             "its kernels are not listed")


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
        _copy_match(out, distance, min(match + 4, limit - len(out)))
    return bytes(out[:limit])


def _copy_match(out: bytearray, distance: int, length: int) -> None:
    """An overlapping match (``distance < length``) repeats the last ``distance`` bytes: built
    in one step, not byte by byte (a distance of 1 over megabytes would take minutes)."""
    start = len(out) - distance
    if length <= distance:
        out += out[start:start + length]
    else:
        pattern = bytes(out[start:])
        out += (pattern * (length // distance + 1))[:length]


def payload_bytes(data, compression: str, limit: int):
    """The first ``limit`` bytes of an entry's payload, decompressed as needed (an uncompressed
    payload comes back as a view of ``data``, not a copy). ``limit`` may be a size the entry
    declares: it is held to the library ceiling and to what LZ4 can make of the stored bytes."""
    from edgevllm.verify.limits import LZ4_RATIO, check_declared

    if compression in ("zstd", "lz4") and limit > 64:
        ratio = LZ4_RATIO if compression == "lz4" else 0
        check_declared(limit, f"a {compression} fatbin entry", len(data), ratio)
    if compression not in ("zstd", "lz4"):
        return memoryview(data)[:limit]
    # What is decoded is held whole: at most MAX_UNIT_BYTES, whatever the entry declares (zstd
    # alone inflates 32,768:1, so a 100 KB entry can make 3 GiB).
    bound = min(limit, MAX_UNIT_BYTES + 1)
    out = _zstd_bytes(data, bound) if compression == "zstd" else lz4_block(data, bound)
    if len(out) > MAX_UNIT_BYTES:
        _too_big(compression)
    return out
