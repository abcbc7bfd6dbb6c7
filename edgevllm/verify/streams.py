"""Byte streams for tarballs: split parts joined, gzip/zstd sniffed and decompressed on the fly."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import re
import tarfile
import zlib
from pathlib import Path
from typing import IO, Iterator

import zstandard

from edgevllm.kernel.errors import NotATarballError

_GZIP, _ZSTD = b"\x1f\x8b", b"\x28\xb5\x2f\xfd"
_PART = re.compile(r"\.part\d+$")


class _Prefixed(io.RawIOBase):
    """``head`` followed by the rest of ``stream``: lets us sniff a stream that cannot seek."""

    def __init__(self, head: bytes, stream: IO[bytes]):
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


def _read_full(stream: IO[bytes], size: int) -> bytes:
    chunks, got = [], 0
    while got < size:
        chunk = stream.read(size - got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def sniff(stream: IO[bytes], size: int = 512) -> tuple[bytes, IO[bytes]]:
    head = _read_full(stream, size)
    return head, io.BufferedReader(_Prefixed(head, stream), 1 << 20)


def unpacked(head: bytes, stream: IO[bytes]) -> IO[bytes] | None:
    """A plain tar stream from ``stream`` (gzip/zstd undone), or None if it holds no tar."""
    if head.startswith(_GZIP):
        plain = gzip.GzipFile(fileobj=stream, mode="rb")
    elif head.startswith(_ZSTD):
        plain = zstandard.ZstdDecompressor().stream_reader(stream, read_across_frames=True)
    else:
        return stream if head[257:262] == b"ustar" else None
    inner_head, inner = sniff(plain)
    return inner if inner_head[257:262] == b"ustar" else None


class _Concat(io.RawIOBase):
    """Several files read as one stream (the split parts of a published tarball)."""

    def __init__(self, paths: list[Path]):
        self.paths, self.handle = list(paths), None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while True:
            if self.handle is None:
                if not self.paths:
                    return 0
                self.handle = open(self.paths.pop(0), "rb")
            count = self.handle.readinto(buffer)
            if count:
                return count
            self.handle.close()
            self.handle = None

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
        super().close()


def _manifest_for(base: Path) -> Path | None:
    """``x.tar.zst`` → ``x.tar.zst.manifest.json`` or ``x.manifest.json`` when present."""
    stem = base.name.split(".tar")[0]
    for candidate in (base.with_name(base.name + ".manifest.json"), base.with_name(stem + ".manifest.json")):
        if candidate.is_file():
            return candidate
    return None


def _parts_from_manifest(manifest: Path) -> list[Path]:
    try:
        files = [part["file"] for part in json.loads(manifest.read_text())["parts"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise NotATarballError(f"{manifest}: not a split-tarball manifest with 'parts' "
                               f"[{{'file': ...}}] ({type(exc).__name__})") from None
    return [manifest.parent / name for name in files]


def tarball_files(path: Path) -> list[Path]:
    """The file(s) making up a tarball: itself, or its parts in order."""
    if path.name.endswith(".manifest.json"):
        parts = _parts_from_manifest(path)
    else:
        base = path.with_name(_PART.sub("", path.name))
        if path.is_file() and base == path:
            return [path]
        manifest = _manifest_for(base)
        parts = _parts_from_manifest(manifest) if manifest else sorted(base.parent.glob(base.name + ".part*"))
        if not parts:
            raise NotATarballError(f"{path}: no such file (nor split parts {base.name}.partNNN)")
    missing = [p.name for p in parts if not p.is_file()]
    if missing:
        raise NotATarballError(f"{path}: split part {missing[0]} is missing; copy all parts beside the manifest")
    return parts


@contextlib.contextmanager
def open_tarball_stream(path: Path) -> Iterator[IO[bytes]]:
    if path.is_dir():
        raise NotATarballError(f"{path}: is a folder; use --path for a folder of libraries")
    raw = _Concat(tarball_files(path))
    with io.BufferedReader(raw, 1 << 20) as stream:
        yield stream


class ParseStream(contextlib.AbstractContextManager):
    """Turn the many ways a damaged archive fails into one NotATarballError line."""

    _ERRORS = (tarfile.TarError, EOFError, zlib.error, zstandard.ZstdError, gzip.BadGzipFile,
               json.JSONDecodeError, UnicodeDecodeError)

    def __init__(self, label: str):
        self.label = label

    def __exit__(self, kind, exc, tb) -> bool:
        if exc is not None and isinstance(exc, self._ERRORS):
            raise NotATarballError(f"{self.label}: corrupt or truncated archive "
                                   f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'no detail'})") from None
        return False
