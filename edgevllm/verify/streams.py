"""Byte streams inside tarballs: gzip/zstd layers sniffed and decompressed on the fly.

The published tarball itself (parts, checksums) is read by ``edgevllm.image.tarball``."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import tarfile
import zlib
from typing import IO, Literal

import zstandard

from edgevllm.common.errors import NotATarballError
from edgevllm.common.streams import ByteReader

_GZIP, _ZSTD = b"\x1f\x8b", b"\x28\xb5\x2f\xfd"


class _Prefixed(io.RawIOBase):
    """``head`` followed by the rest of ``stream``: lets us sniff a stream that cannot seek."""

    def __init__(self, head: bytes, stream: ByteReader):
        self.head, self.stream = head, stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self.head:
            count = min(len(buffer), len(self.head))
            buffer[:count], self.head = self.head[:count], self.head[count:]
            return count
        data = self.stream.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)


def _read_full(stream: ByteReader, size: int) -> bytes:
    chunks, got = [], 0
    while got < size:
        chunk = stream.read(size - got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def sniff(stream: ByteReader, size: int = 512) -> tuple[bytes, IO[bytes]]:
    head = _read_full(stream, size)
    return head, io.BufferedReader(_Prefixed(head, stream), 1 << 20)


def unpacked(head: bytes, stream: IO[bytes]) -> IO[bytes] | None:
    """A plain tar stream from ``stream`` (gzip/zstd undone), or None if it holds no tar."""
    plain: ByteReader
    if head.startswith(_GZIP):
        plain = gzip.GzipFile(fileobj=stream, mode="rb")
    elif head.startswith(_ZSTD):
        plain = zstandard.ZstdDecompressor().stream_reader(stream, read_across_frames=True)
    else:
        return stream if _is_tar(head) else None
    inner_head, inner = sniff(plain)
    return inner if _is_tar(inner_head) else None


def _is_tar(head: bytes) -> bool:
    """A ustar header, or a zero block: an empty archive (the layer of a step that changed
    nothing, e.g. ``RUN pip uninstall`` of an absent package, is 1024 zero bytes)."""
    return head[257:262] == b"ustar" or (len(head) == 512 and not any(head))


class ParseStream(contextlib.AbstractContextManager):
    """Turn the many ways a damaged archive fails into one NotATarballError line."""

    _ERRORS = (tarfile.TarError, EOFError, zlib.error, zstandard.ZstdError, gzip.BadGzipFile,
               json.JSONDecodeError, UnicodeDecodeError, RecursionError)

    def __init__(self, label: str):
        self.label = label

    def __exit__(self, kind, exc, tb) -> Literal[False]:
        if exc is not None and isinstance(exc, self._ERRORS):
            detail = str(exc).splitlines()[0] if str(exc) else "no detail"
            raise NotATarballError(f"{self.label}: corrupt or truncated archive "
                                   f"({type(exc).__name__}: {detail})") from None
        return False
