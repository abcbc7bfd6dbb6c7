"""One layer of the local engine's overlay2 store read for its verdict alone: the member list
from the layer's tar-split headers, and of the files only the libraries, mapped in place.

What a layer's record needs (``archive.Layer``) is its member names (whiteouts, opaque folders,
the library-named paths that hide lower ones) and each library's report. The names and kinds
come from each member's own tar header, kept in tar-split (``LocalLayerStore.headers``), read by
``tarfile`` and held to the same member rules as a replayed tar (``common.archives.walk``, then
``archive.add_member``), so the record is the one the replay would give. Only a library-named
regular file is opened (``layerstore.open_file``: inside the layer's folder, a regular file of
the size its header says); an ELF one is mapped and parsed where it lies, so the pages read are
those the parse touches (the ELF headers, the fatbin entries' headers and the first bytes of each
SASS entry, the whole entries of the units that lack code for the target). The rest of the
layer's bytes are not read, nor hashed against the diff id: ``docs/verify.md`` (the verify
cache's trust) says why that is sound for the local store and how to ask for the hash.

Libraries are parsed on a few threads while the headers are walked (zstd and page faults release
the GIL); memory holds the reports and the mapped pages of the libraries in flight.
"""

from __future__ import annotations

import io
import mmap
import os
import tarfile
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

from edgevllm.common.archives import open_tar, walk
from edgevllm.common.errors import NotATarballError
from edgevllm.verify.archive import Layer, add_member
from edgevllm.verify.elf import is_elf
from edgevllm.verify.library import LibraryReport, is_library_name
from edgevllm.verify.limits import check_declared

WORKERS = 3  # libraries parsed at once (each holds only its mapped pages)


class _Headers:
    """What ``walk`` asks of a ``tarfile.TarFile`` (``next()``, ``members``), over a layer's
    header blocks alone: each member parsed by ``tarfile`` from its own blocks."""

    def __init__(self, headers: Iterator[tuple[bytes, int]], label: str):
        self.headers, self.label = headers, label
        self.members: list[tarfile.TarInfo] = []

    def next(self) -> tarfile.TarInfo | None:
        found = next(self.headers, None)
        if found is None:
            return None
        blocks, size = found
        member = header_info(blocks, self.label)
        if member.size != size:
            raise NotATarballError(f"{self.label}: member '{member.name[:200]}' says "
                                   f"{member.size} bytes, its tar-split entry {size}")
        return member


def header_info(blocks: bytes, label: str) -> tarfile.TarInfo:
    """One member's header, as ``tarfile`` reads it from the member's header blocks (a single
    ustar block, or extended headers before it); its contents are not there and not read."""
    if len(blocks) == tarfile.BLOCKSIZE:
        return tarfile.TarInfo.frombuf(blocks, tarfile.ENCODING, "surrogateescape")
    with open_tar(io.BytesIO(blocks + bytes(2 * tarfile.BLOCKSIZE)), label,
                  NotATarballError) as tar:
        member = tar.next()
    if member is None:
        raise tarfile.HeaderError("no member in its header blocks")
    return member


def read_store_layer(store, chain_id: str, label: str, inspect) -> Layer:
    """The layer's record (its libraries' reports by ``inspect``, its library paths,
    whiteouts and opaque folders), reading only its headers and its ELF libraries.

    Raises ``StoreUnusable`` (the store cannot give it) or ``NotATarballError`` (its headers
    break the member rules a replayed tar is held to)."""
    from edgevllm.image.layerstore import open_file

    diff = store.diff_dir(chain_id)
    layer = Layer()
    pending: dict[str, Future] = {}
    headers = _Headers(store.headers(chain_id), label)

    def keep(_tar: Any, member: tarfile.TarInfo, path: str) -> None:
        if is_library_name(path.rpartition("/")[2]) and member.size >= 4:
            pending[path] = pool.submit(_library, open_file, diff, member.name, member.size,
                                        path, inspect)
        return None

    with ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="edgevllm-layer") as pool:
        try:
            for member in walk(cast(tarfile.TarFile, headers), label, NotATarballError,
                               filesystem=True):
                add_member(layer, cast(tarfile.TarFile, headers), member, keep, label)
        except BaseException:
            for future in pending.values():
                future.cancel()
            raise
        for path, future in pending.items():
            report = future.result()
            if report is not None:
                layer.kept[path] = report
    return layer


def _library(open_file, diff: Path, name: str, size: int, path: str, inspect
             ) -> LibraryReport | None:
    """One library-named file's report, mapped where it lies; None when it is no ELF."""
    from edgevllm.image.layerstore import StoreUnusable

    with open_file(diff, name, size) as handle:
        try:
            if not is_elf(handle.read(4)):
                return None
            check_declared(size, path)
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
                report = inspect(path, view)
        except OSError as exc:
            raise StoreUnusable(f"{diff / name}: {exc.strerror or exc}") from None
    return cast(LibraryReport, report)


def hash_layers() -> bool:
    """``EDGEVLLM_VERIFY_HASH_LAYERS=1``: replay every layer read from the store and hash it
    against its diff id, as ``docker save`` does, instead of reading its libraries alone."""
    return os.environ.get("EDGEVLLM_VERIFY_HASH_LAYERS", "").strip() not in ("", "0")
