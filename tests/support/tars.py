"""Tar archives made in memory for tests (layers, published sets): regular files and folders,
each with the modification time the test gives."""

from __future__ import annotations

import io
import tarfile
from typing import Iterable


def tar_bytes(members: Iterable[tuple[str, bytes | None, int]],
              format: int = tarfile.DEFAULT_FORMAT) -> bytes:
    """A tar of ``(name, data, mtime)`` members: a file holding ``data``, or a folder where
    ``data`` is None."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=format) as tar:
        for name, data, mtime in members:
            info = tarfile.TarInfo(name)
            info.mtime = mtime
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()
