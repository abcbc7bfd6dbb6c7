"""What the byte pipelines need of a stream: ``read`` or ``write``, nothing more.

Our own pipe stages (part writers, counters, tees, concatenated parts) have just those methods.
zstandard's and gzip's type stubs ask for ``IO[bytes]`` (gzip: also ``seek``, used only to
rewind), but a forward read calls only ``read`` on a source and ``write`` on a sink, so
``as_binary_io`` hands such a stage to them under that name.
"""

from __future__ import annotations

from typing import IO, Protocol, cast


class ByteReader(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class ByteWriter(Protocol):
    def write(self, data: bytes, /) -> int: ...


def as_binary_io(stream: ByteReader | ByteWriter) -> IO[bytes]:
    """``stream`` where a stub asks for ``IO[bytes]`` (zstandard: ``copy_stream``,
    ``stream_writer``; ``gzip.GzipFile`` read forward): only the method the protocol names is
    ever called."""
    return cast(IO[bytes], stream)
