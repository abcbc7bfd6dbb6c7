"""Decompress a zstd stream in bounded pieces and still tell a truncated stream from a whole one.

Why not ``decompressobj()``: one call returns everything its input decodes to, and 1 MiB of
zstd can decode to 32 GiB (an RLE block is 4 bytes for 128 KiB). Why not ``stream_reader()``
alone: it ends silently when the input stops inside a frame. So the output comes from
``stream_reader`` (at most ``CHUNK`` bytes a read) while ``FrameWalker`` follows the frame and
block headers of the compressed bytes as they go by (it decodes nothing) and says at the end
whether the input stopped between frames.
"""

from __future__ import annotations

import io
from typing import Callable, Iterator

import zstandard

from edgevllm.common.errors import IntegrityError
from edgevllm.common.streams import ByteReader, as_binary_io

CHUNK = 1 << 20
_ZSTD_MAGIC = 0xFD2FB528
_SKIPPABLE = range(0x184D2A50, 0x184D2A60)


class FrameWalker:
    """Follows zstd frames through their headers (RFC 8878, section 3.1)."""

    def __init__(self) -> None:
        self.frames = 0
        self._pending = bytearray()  # a header split across two feeds
        self._want = 4  # bytes the current step needs
        self._step: Callable[[bytes], None] = self._magic
        self._skip = 0  # block contents / skippable payload still to pass over
        self._checksum = False

    @property
    def between_frames(self) -> bool:
        return self._step == self._magic and not self._pending and not self._skip

    def feed(self, data) -> None:
        view, index = memoryview(data), 0
        while index < len(view):
            if self._skip:
                taken = min(self._skip, len(view) - index)
                self._skip -= taken
                index += taken
                continue
            taken = min(self._want - len(self._pending), len(view) - index)
            self._pending += view[index:index + taken]
            index += taken
            if len(self._pending) == self._want:
                field, self._pending = bytes(self._pending), bytearray()
                self._step(field)

    def _magic(self, field: bytes) -> None:
        magic = int.from_bytes(field, "little")
        if magic in _SKIPPABLE:
            self._want, self._step = 4, self._skippable_size
        elif magic == _ZSTD_MAGIC:
            self._want, self._step = 1, self._descriptor
        else:  # the decoder reports it with its own words; stop following
            self._want, self._step = 1 << 62, self._magic

    def _skippable_size(self, field: bytes) -> None:
        self._skip = int.from_bytes(field, "little")
        self._frame_done()

    def _descriptor(self, field: bytes) -> None:
        fhd = field[0]
        single_segment = bool(fhd & 0x20)
        self._checksum = bool(fhd & 0x04)
        size = (0 if single_segment else 1) + (0, 1, 2, 4)[fhd & 3]
        size += (1 if single_segment else 0, 2, 4, 8)[fhd >> 6]
        self._want, self._step = size, self._header_rest
        if size == 0:
            self._header_rest(b"")

    def _header_rest(self, _field: bytes) -> None:
        self._want, self._step = 3, self._block

    def _block(self, field: bytes) -> None:
        header = int.from_bytes(field, "little")
        last, kind, size = header & 1, (header >> 1) & 3, header >> 3
        self._skip = 1 if kind == 1 else size  # an RLE block stores one byte
        if not last:
            return
        if self._checksum:
            self._want, self._step = 4, self._checksum_done
        else:
            self._frame_done()

    def _checksum_done(self, _field: bytes) -> None:
        self._frame_done()

    def _frame_done(self) -> None:
        self.frames += 1
        self._want, self._step = 4, self._magic


class _Watched(io.RawIOBase):
    """``raw`` as read, each block also shown to ``FrameWalker``."""

    def __init__(self, raw: ByteReader, walker: FrameWalker):
        self.raw, self.walker = raw, walker

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.raw.read(len(buffer))
        buffer[:len(data)] = data
        self.walker.feed(data)
        return len(data)


def zstd_chunks(raw: ByteReader, label: str, window_log: int) -> Iterator[bytes]:
    """The decompressed stream, at most ``CHUNK`` bytes at a time; raises ``IntegrityError`` on
    a corrupt, truncated or empty stream, or a frame that needs a larger window."""
    walker = FrameWalker()
    dctx = zstandard.ZstdDecompressor(max_window_size=1 << window_log)
    source = as_binary_io(_Watched(raw, walker))
    reader = dctx.stream_reader(source, read_size=CHUNK, read_across_frames=True)
    held = None  # one piece is held back until the next read succeeds: a checksum that fails
    try:  # at a frame's end then keeps its last piece (and the tar's end blocks) from the reader
        while block := reader.read(CHUNK):
            if held is not None:
                yield held
            held = block
    except zstandard.ZstdError as exc:
        if "too much memory" in str(exc) or "window" in str(exc).lower():
            raise IntegrityError(
                f"{label}: a zstd frame needs a window over {1 << window_log >> 20} MiB (the most "
                "its manifest declares, else zstd's default); decompress it with "
                "'zstd -d --long=31'"
            ) from None
        raise IntegrityError(
            f"{label}: the zstd stream is corrupt ({exc}); copy it again"
        ) from None
    if not walker.between_frames or not walker.frames:
        raise IntegrityError(
            f"{label}: the zstd stream is truncated (it ends inside a frame); "
            "copy it again or check that every part is there"
        )
    if held is not None:
        yield held
