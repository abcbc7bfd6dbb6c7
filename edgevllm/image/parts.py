"""The compressed stream of a published set: part files of at most a given size, hashed while
written and renamed only when the whole set is complete, and the compressors that fill them."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable

from edgevllm.common.fsutil import move_into_place
from edgevllm.common.streams import as_binary_io
from edgevllm.image.layercache import ZstdSettings
from edgevllm.image.tarball import CHUNK
from edgevllm.image.tarmanifest import part_name

DEFAULT_LEVEL = {"zst": 3, "gz": 6}
GZIP_BLOCK = 8 << 20  # one gzip member per block, compressed in parallel


@dataclass
class WrittenPart:
    tmp: Path
    size: int = 0
    sha256: str = ""
    final: Path | None = None


class PartWriter:
    """A write-only stream that fills part files of at most ``part_size`` bytes under temporary
    names, hashing each as it goes. ``commit`` renames them all; ``discard`` removes them."""

    def __init__(self, directory: Path, stem: str, part_size: int | None):
        self.directory, self.stem, self.part_size = directory, stem, part_size
        self.parts: list[WrittenPart] = []
        self._handle: IO[bytes] | None = None
        self._digest = hashlib.sha256()
        self.renamed: list[Path] = []

    def _open_next(self) -> IO[bytes]:
        self._close_current()
        tmp = self.directory / f"{self._tmp_prefix()}{len(self.parts):03d}"
        # Registered before the file exists: a Ctrl-C between the two cannot leak the file.
        self.parts.append(WrittenPart(tmp))
        self._digest = hashlib.sha256()
        self._handle = open(tmp, "wb")
        return self._handle

    def _tmp_prefix(self) -> str:
        return f".{self.stem}.tmp-{os.getpid()}-"

    def _close_current(self) -> None:
        if self._handle is not None:
            self._handle.flush()
            os.fsync(self._handle.fileno())
            self._handle.close()
            self._handle = None
            self.parts[-1].sha256 = self._digest.hexdigest()

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        written = len(view)
        while view:
            handle = self._handle
            if handle is None or (self.part_size and self.parts[-1].size >= self.part_size):
                handle = self._open_next()
            room = len(view) if not self.part_size else self.part_size - self.parts[-1].size
            chunk = view[:room]
            handle.write(chunk)
            self._digest.update(chunk)
            self.parts[-1].size += len(chunk)
            view = view[len(chunk) :]
        return written

    def flush(self) -> None:
        if self._handle is not None:
            self._handle.flush()

    def finish(self) -> None:
        if not self.parts:
            self._open_next()  # an empty stream still makes one (empty) part
        self._close_current()

    def final_names(self, suffix: str) -> list[str]:
        if len(self.parts) == 1:
            return [f"{self.stem}{suffix}"]
        return [part_name(f"{self.stem}{suffix}", i) for i in range(len(self.parts))]

    def commit(self, suffix: str) -> list[Path]:
        """Rename every part to its final name; the final paths, in order."""
        for part, name in zip(self.parts, self.final_names(suffix), strict=True):
            part.final = self.directory / name
            move_into_place(part.tmp, part.final)
            self.renamed.append(part.final)
        return list(self.renamed)

    def reset(self) -> None:
        """Drop everything written so far and start again from the first part."""
        self.discard()
        self.parts, self.renamed = [], []

    def discard(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        leftovers = {part.tmp for part in self.parts}
        leftovers |= set(self.directory.glob(glob_escape(self._tmp_prefix()) + "*"))
        for path in leftovers:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        for path in self.renamed:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


class CountingReader:
    """Wraps the ``docker save`` pipe: counts bytes read and reports them to ``on_bytes``."""

    def __init__(self, stream: IO[bytes], on_bytes: Callable[[int], None]):
        self.stream, self.on_bytes, self.count = stream, on_bytes, 0

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size)
        self.count += len(data)
        self.on_bytes(len(data))
        return data


def compress_zstd(src: CountingReader, dst: PartWriter, settings: ZstdSettings) -> None:
    # The frame carries a checksum: without it a flipped byte can decompress silently.
    settings.compressor().copy_stream(as_binary_io(src), as_binary_io(dst), read_size=CHUNK,
                                      write_size=CHUNK)


def _gzip_member(block: bytes, level: int) -> bytes:
    # zlib releases the GIL while it compresses, so members compress in parallel threads.
    compressor = zlib.compressobj(level, zlib.DEFLATED, 31)
    return compressor.compress(block) + compressor.flush()


def compress_gzip(src: CountingReader, dst: PartWriter, settings: ZstdSettings) -> None:
    """Multi-member gzip (as pigz -i / bgzip): gunzip, Python and ``docker load`` read it whole.

    Of ``settings`` only the level and the thread count apply."""
    level, threads = settings.level, settings.threads
    workers = max(1, threads if threads > 0 else (os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        pending = []
        try:
            while block := _read_block(src, GZIP_BLOCK):
                pending.append(pool.submit(_gzip_member, block, level))
                while len(pending) > workers * 2 or (pending and pending[0].done()):
                    dst.write(pending.pop(0).result())
            for future in pending:
                dst.write(future.result())
        except BaseException:
            for future in pending:
                future.cancel()
            raise


def _read_block(src: CountingReader, size: int) -> bytes:
    chunks, got = [], 0
    while got < size:
        data = src.read(min(CHUNK, size - got))
        if not data:
            break
        chunks.append(data)
        got += len(data)
    return b"".join(chunks)


COMPRESSORS = {"zst": compress_zstd, "gz": compress_gzip}


def glob_escape(text: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", text)
