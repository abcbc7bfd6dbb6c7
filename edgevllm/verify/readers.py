"""Where libraries come from: a folder, a wheel, a (compressed, split) tarball, or an image.

Folders are walked and each candidate (``.so``/``.so.N``/``.o``/``.cubin``) is mmapped, several
files at once (zstd and page faults release the GIL). A ``.whl`` is read as the zip it is: each
candidate member is inflated in memory, nothing is unpacked to disk.

Tarballs are streamed, never extracted: docker-save archives (old ``<id>/layer.tar`` or OCI
``blobs/sha256/...`` layers, themselves plain, gzip or zstd) are read layer by layer, each
library parsed as it passes, then the layers are stacked in ``manifest.json`` order (or in an
OCI ``index.json``'s, see oci.py) so that whiteouts (``.wh.``) hide deleted files and later
layers override earlier ones. A tarball with neither is taken as a plain root filesystem
(``docker export``). Memory peak: the largest single library.
"""

from __future__ import annotations

import errno
import functools
import json
import mmap
import os
import shutil
import struct
import tarfile
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Callable

from edgevllm.common.errors import NotATarballError, ResourceLimitError, ScanError
from edgevllm.verify.elf import is_elf
from edgevllm.verify.library import LibraryReport, inspect_buffer, is_library_name
from edgevllm.verify.limits import DEFLATE_RATIO, SPILL_BYTES, check_declared
from edgevllm.verify.oci import JSON_BLOB_LIMIT, oci_layers
from edgevllm.verify.streams import ParseStream, sniff, unpacked

Inspect = Callable[[str, object], LibraryReport]
_WHITEOUT, _OPAQUE = ".wh.", ".wh..wh..opq"


def _entries(folder: str) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as listing:
            return sorted(listing, key=lambda entry: entry.name)
    except OSError as exc:
        raise ScanError(f"{folder}: cannot read this folder ({exc.strerror}); fix its "
                        "permissions or scan as a user who can read it") from None


def _check_link(entry: os.DirEntry) -> None:
    """Symlinks are not followed (so nothing is counted twice); one that loops is an error."""
    try:
        os.stat(entry.path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ScanError(f"{entry.path}: a symlink loop; remove it or scan the folder it "
                            "should name") from None


def _library_files(root: Path) -> list[Path]:
    """Library files under ``root``, depth first in name order; only symlinks cost a stat."""
    files, pending = [], [str(root)]
    while pending:
        folders = []
        for entry in _entries(pending.pop()):
            if entry.is_symlink():
                _check_link(entry)
            elif entry.is_dir(follow_symlinks=False):
                folders.append(entry.path)
            elif is_library_name(entry.name) and entry.is_file(follow_symlinks=False):
                files.append(Path(entry.path))
        pending.extend(reversed(folders))
    return files


def scan_directory(root: Path, inspect: Inspect = inspect_buffer) -> list[LibraryReport]:
    """Every ELF library and cubin under ``root`` (symlinks are not followed, so none is
    counted twice), in path order. An unreadable folder or a symlink loop stops the scan."""
    files = _library_files(root)
    labels = [str(full.relative_to(root)) for full in files]
    inspect_all = functools.partial(_inspect_or_unreadable, inspect=inspect)
    if len(files) < 8:
        results = list(map(inspect_all, files, labels))
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(8, (os.cpu_count() or 2) * 2)) as pool:
            results = list(pool.map(inspect_all, files, labels))
    return [report for report in results if report is not None]


def scan_wheel(wheel: Path, inspect: Inspect = inspect_buffer) -> list[LibraryReport]:
    """Every ELF library and cubin inside a wheel (a zip), read without unpacking to disk."""
    import zipfile

    reports = []
    try:
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                if info.is_dir() or not is_library_name(info.filename):
                    continue
                report = _wheel_member(archive, info, inspect)
                if report is not None:
                    reports.append(report)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, zlib.error,
            NotImplementedError, ValueError, RuntimeError, IndexError, struct.error) as exc:
        # zipfile's own ways to fail on a damaged archive (an extra field cut short: IndexError)
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise NotATarballError(f"{wheel}: not a readable wheel (zip) file ({detail}); download "
                               "it again") from None
    return sorted(reports, key=lambda r: r.path)


_CUBIN_HEAD = 16384  # a raw cubin's ELF header and ptxas note (its arch) lie in its first bytes


def _wheel_member(archive, info, inspect: Inspect) -> LibraryReport | None:
    """One zip member; a raw cubin is only inflated as far as its header and arch note, unless
    the inspector needs whole files (cuobjdump)."""
    from edgevllm.verify.elf import is_cuda_elf

    _check_member_size(info)
    with archive.open(info) as member:
        head = member.read(64)
        if not is_elf(head):
            return None
        whole = getattr(inspect, "whole_files", False)
        if is_cuda_elf(head) and not whole:
            report = inspect(info.filename, head + member.read(_CUBIN_HEAD - len(head)))
            report.size = info.file_size
            return report
        return inspect(info.filename, _read_rest(member, head, info.file_size))


def _check_member_size(info) -> None:
    """A member's declared size against the ceiling and what its stored bytes can inflate to,
    before its buffer is allocated (a 768-byte wheel may say 4 GB)."""
    import zipfile

    ratio = {zipfile.ZIP_STORED: 1, zipfile.ZIP_DEFLATED: DEFLATE_RATIO}.get(info.compress_type, 0)
    check_declared(info.file_size, info.filename, info.compress_size, ratio)


def _read_rest(member, head: bytes, size: int) -> bytearray:
    """The whole member in one buffer of its final size (no second copy of a 300 MB library);
    the size was checked by ``_check_member_size``."""
    buf = bytearray(max(size, len(head)))
    buf[:len(head)] = head
    view, got = memoryview(buf), len(head)
    while got < size:
        count = member.readinto(view[got:got + (16 << 20)])  # zip reads copy: keep them small
        if not count:
            break
        got += count
    view.release()
    return buf if got == len(buf) else buf[:got]


def _inspect_or_unreadable(path: Path, label: str, inspect: Inspect) -> LibraryReport | None:
    """An unreadable file is a table row too: it must not stop the scan."""
    try:
        return inspect_file(path, label, inspect)
    except OSError as exc:
        return LibraryReport(path=label, size=0, status=f"corrupt: cannot read ({exc.strerror})")


def inspect_file(path: Path, label: str, inspect: Inspect = inspect_buffer) -> LibraryReport | None:
    """One file on disk through mmap; ``None`` when it is not ELF (e.g. a linker script)."""
    with open(path, "rb") as handle:
        if not is_elf(handle.read(4)):
            return None
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
            return inspect(label, view)


@dataclass
class Layer:
    libraries: dict[str, LibraryReport] = field(default_factory=dict)
    present: set[str] = field(default_factory=set)  # every non-directory path in the layer
    whiteouts: list[str] = field(default_factory=list)
    opaque: list[str] = field(default_factory=list)


def _clean(name: str) -> str:
    while name.startswith("./"):
        name = name[2:]
    return name.lstrip("/")


def _add_member(layer: Layer, tar: tarfile.TarFile, member: tarfile.TarInfo,
                inspect: Inspect) -> None:
    path = _clean(member.name)
    folder, _, base = path.rpartition("/")
    if base == _OPAQUE:
        layer.opaque.append(folder)
    elif base.startswith(_WHITEOUT):
        layer.whiteouts.append(f"{folder}/{base[len(_WHITEOUT):]}".lstrip("/"))
    elif not member.isdir():
        layer.present.add(path)
        if member.isfile() and is_library_name(base):
            _read_library(layer, tar, member, path, inspect)


def _regular(tar: tarfile.TarFile, member: tarfile.TarInfo) -> IO[bytes]:
    """A regular member's bytes (``extractfile`` gives None for links and devices)."""
    handle = tar.extractfile(member)
    if handle is None:
        raise NotATarballError(f"{member.name}: not a regular file")
    return handle


def _read_library(layer: Layer, tar: tarfile.TarFile, member, path: str, inspect: Inspect) -> None:
    handle = _regular(tar, member)
    head = handle.read(4)
    if not is_elf(head):
        return
    check_declared(member.size, path)
    if member.size <= SPILL_BYTES:
        layer.libraries[path] = inspect(path, head + handle.read())
        return
    with tempfile.TemporaryFile(prefix="edgevllm-verify-") as spill:  # memory stays bounded
        try:
            spill.write(head)
            shutil.copyfileobj(handle, spill, 1 << 20)
            spill.flush()
        except OSError as exc:
            raise ResourceLimitError(f"{path}: cannot stream {member.size >> 20} MiB through a "
                                     f"temporary file ({exc.strerror}); free space in "
                                     f"{tempfile.gettempdir()} or set TMPDIR") from None
        with mmap.mmap(spill.fileno(), 0, access=mmap.ACCESS_READ) as view:
            layer.libraries[path] = inspect(path, view)


class _EndSeen(tarfile.TarInfo):
    """Notes on its archive when the end-of-archive block was read: ``tarfile`` takes a stream
    that simply stops between members for a whole archive, and so would a truncated one."""

    @classmethod
    def fromtarfile(cls, tar):
        try:
            return super().fromtarfile(tar)
        except tarfile.EOFHeaderError:  # type: ignore[attr-defined]  # not in the stubs
            tar.edgevllm_end_seen = True
            raise


def read_tar(stream: IO[bytes], label: str, on_member: Callable) -> None:
    """Every member of a tar stream through ``on_member(tar, member)``; raises NotATarballError
    when the archive stops before its end-of-archive block (truncated)."""
    with tarfile.open(fileobj=stream, mode="r|", tarinfo=_EndSeen) as tar:
        for member in tar:
            on_member(tar, member)
        if not getattr(tar, "edgevllm_end_seen", False):
            raise NotATarballError(f"{label}: the tar archive stops before its end (truncated "
                                   "after its last whole member); copy or save it again")


def scan_layer(stream: IO[bytes], inspect: Inspect, label: str = "layer") -> Layer:
    layer = Layer()
    read_tar(stream, label, lambda tar, member: _add_member(layer, tar, member, inspect))
    return layer


def _is_layer_name(name: str) -> bool:
    return name.endswith("/layer.tar") or name.startswith("blobs/")


@dataclass
class _Outer:
    layers: dict[str, Layer] = field(default_factory=dict)
    rootfs: Layer = field(default_factory=Layer)
    manifest: list | None = None
    index: dict | None = None  # OCI index.json, used when there is no manifest.json
    json_blobs: dict[str, bytes] = field(default_factory=dict)


def _outer_member(state: _Outer, tar: tarfile.TarFile, member, inspect: Inspect) -> None:
    name = _clean(member.name)
    small = member.isfile() and member.size <= JSON_BLOB_LIMIT
    if name in ("manifest.json", "index.json") and small:
        setattr(state, name[:-5], _json_or_none(_regular(tar, member).read()))
    elif member.isfile() and _is_layer_name(name):
        head, stream = sniff(_regular(tar, member))
        inner = unpacked(head, stream)
        if inner is not None:
            state.layers[name] = scan_layer(inner, inspect, f"layer {name}")
        elif head.startswith(b"{") and member.size <= JSON_BLOB_LIMIT:
            state.json_blobs[name] = stream.read()
    else:
        _add_member(state.rootfs, tar, member, inspect)


def _json_or_none(data: bytes):
    """A top-level manifest.json / index.json, or None when it is some other file of that name."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def scan_tar_stream(stream: IO[bytes], label: str,
                    inspect: Inspect = inspect_buffer) -> list[LibraryReport]:
    """Scan a docker-save archive or a root-filesystem tarball from a byte stream."""
    state = _Outer()
    with ParseStream(label):
        head, raw = sniff(stream)
        plain = unpacked(head, raw)
        if plain is None:
            raise NotATarballError(f"{label}: not a tar archive (expected .tar, .tar.gz, .tar.zst "
                                   "or split .tar.zst.partNNN from 'inv publish')")
        read_tar(plain, label, lambda tar, member: _outer_member(state, tar, member, inspect))
    return _stack(state, label)


def _layer_order(state: _Outer, label: str) -> list[str] | None:
    if isinstance(state.manifest, list) and state.manifest and state.layers:
        first = state.manifest[0]
        layers = first.get("Layers", []) if isinstance(first, dict) else None
        if not isinstance(layers, list) or not all(isinstance(n, str) for n in layers):
            raise NotATarballError(f"{label}: manifest.json does not list its layers as file "
                                   "names; the archive is not one docker save wrote")
        return layers
    if isinstance(state.index, dict) and state.layers:
        return oci_layers(state.index, state.json_blobs, label)
    return None


def _stack(state: _Outer, label: str) -> list[LibraryReport]:
    order = _layer_order(state, label)
    if order is None:
        return sorted(state.rootfs.libraries.values(), key=lambda r: r.path)
    files: dict[str, LibraryReport] = {}
    for name in order:
        layer = state.layers.get(_clean(name))
        if layer is None:
            raise NotATarballError(f"{label}: layer {name} named in the image manifest is missing; "
                                   "the archive is incomplete, save it again")
        _apply(files, layer)
    return sorted(files.values(), key=lambda r: r.path)


def _apply(files: dict[str, LibraryReport], layer: Layer) -> None:
    """Stack one layer on the files below it (OCI whiteout semantics)."""
    for folder in layer.opaque:
        for path in [p for p in files if p.startswith(folder + "/")]:
            del files[path]
    for gone in layer.whiteouts:
        for path in [p for p in files if p == gone or p.startswith(gone + "/")]:
            del files[path]
    for path in layer.present:
        files.pop(path, None)
    files.update(layer.libraries)


def scan_image_stream(engine, ref: str, inspect: Inspect = inspect_buffer) -> list[LibraryReport]:
    """``docker save`` piped straight into the tar scanner; raises ImageNotFoundError first."""
    engine.image_inspect(ref)
    with engine.save_stream([ref]) as stream:
        return scan_tar_stream(stream, f"image {ref}", inspect)
