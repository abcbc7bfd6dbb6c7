"""Where libraries come from: a folder, a wheel, a (compressed, split) tarball, or an image.

Folders are walked and each candidate (``.so``/``.so.N``/``.o``/``.cubin``) is mmapped, several
files at once (zstd and page faults release the GIL). A ``.whl`` is read as the zip it is: each
candidate member is inflated in memory, nothing is unpacked to disk.

Tarballs are streamed, never extracted, by the one layer reader (archive.py): each library is
parsed as its layer passes, then the layers are stacked so that whiteouts hide deleted files.
Memory peak: the largest single library.
"""

from __future__ import annotations

import errno
import functools
import mmap
import os
import shutil
import struct
import tarfile
import tempfile
import zlib
from pathlib import Path
from typing import IO, Callable

from edgevllm.common.errors import NotATarballError, ResourceLimitError, ScanError
from edgevllm.verify.archive import read_image, regular, stack
from edgevllm.verify.elf import is_elf
from edgevllm.verify.library import LibraryReport, inspect_buffer, is_library_name
from edgevllm.verify.limits import DEFLATE_RATIO, SPILL_BYTES, check_declared

Inspect = Callable[[str, object], LibraryReport]


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


class LibraryKeep:
    """The layer reader's ``keep``: an ELF library's report, for a library's name; its
    ``inspect`` is what a reader that opens the libraries itself (``storelayer``) calls."""

    def __init__(self, inspect: Inspect):
        self.inspect = inspect

    def __call__(self, tar: tarfile.TarFile, member: tarfile.TarInfo, path: str
                 ) -> LibraryReport | None:
        name = path.rpartition("/")[2]
        return _read_library(tar, member, path, self.inspect) if is_library_name(name) else None


def library_keep(inspect: Inspect) -> LibraryKeep:
    return LibraryKeep(inspect)


def _read_library(tar: tarfile.TarFile, member, path: str, inspect: Inspect
                  ) -> LibraryReport | None:
    handle = regular(tar, member)
    head = handle.read(4)
    if not is_elf(head):
        return None
    check_declared(member.size, path)
    if member.size <= SPILL_BYTES:
        return inspect(path, head + handle.read())
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
            return inspect(path, view)


def scan_tar_stream(stream: IO[bytes], label: str,
                    inspect: Inspect = inspect_buffer) -> list[LibraryReport]:
    """Scan a docker-save archive or a root-filesystem tarball from a byte stream."""
    libraries = stack(read_image(stream, label, library_keep(inspect)), label)
    return sorted(libraries.values(), key=lambda r: r.path)


def scan_image_stream(engine, ref: str, inspect: Inspect = inspect_buffer) -> list[LibraryReport]:
    """``docker save`` piped straight into the tar scanner; raises ImageNotFoundError first."""
    engine.image_inspect(ref)
    with engine.save_stream([ref]) as stream:
        return scan_tar_stream(stream, f"image {ref}", inspect)
