"""Folders others gave, read through directory descriptors and never re-listed by path.

A folder others can write to may change while it is read: a folder listed as a folder can be a
link to anywhere by the time it is opened by path. So a folder is opened once (``open_root``),
each folder below it from its parent's descriptor with ``O_DIRECTORY|O_NOFOLLOW`` and checked to
be the one listed (device and inode: ``open_folder``), and each file from its folder's descriptor
with ``O_NOFOLLOW`` (``open_file``): a folder or file swapped for a link is one line of the
caller's error class, never followed. ``copy_tree`` copies such a folder that way (a mod folder,
an eugr mod), links copied as links only when relative without ``..``; the supplied dependency
folders of ``--cmake-dep`` (``sources/depfolder.py``) walk with the same calls and their own gate.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path
from typing import Iterable

from edgevllm.common.errors import EdgeVllmError

_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CHANGED = "the folder changed while it was read (supply one nothing writes to)"


def open_root(path: Path, what: str, error: type[EdgeVllmError]) -> int:
    """The folder named (a link the user named as the folder is theirs), opened once."""
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise error(f"{what}: cannot be read as a folder ({exc.strerror})") from None


def open_folder(parent: int, name: str, listed: os.stat_result, what: str,
                error: type[EdgeVllmError]) -> int:
    """The folder ``name`` of the open folder ``parent``, the one listed (``listed``: its lstat
    then); a link or anything else put in its place since is refused, never followed."""
    try:
        fd = os.open(name, _FOLDER, dir_fd=parent)
    except OSError as exc:
        why = ("a link now" if exc.errno in (errno.ELOOP, errno.ENOTDIR)
               else exc.strerror or "unreadable")
        raise error(f"{what}: was a folder when listed and is {why}; {_CHANGED}") from None
    now = os.fstat(fd)
    if (now.st_dev, now.st_ino) != (listed.st_dev, listed.st_ino):
        os.close(fd)
        raise error(f"{what}: another folder was put in its place while it was read; "
                    "supply one nothing writes to")
    return fd


def open_file(parent: int, name: str, what: str, error: type[EdgeVllmError]) -> int:
    """The regular file ``name`` of the open folder ``parent``; a link, pipe or device put in
    its place is refused (never followed, never waited on)."""
    try:
        fd = os.open(name, _FILE, dir_fd=parent)
    except OSError as exc:
        raise error(f"{what}: cannot be read ({exc.strerror}); it changed while the folder was "
                    "read, or is not readable") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise error(f"{what}: not a regular file any more; {_CHANGED}")
    return fd


def copy_tree(source: Path, dest: Path, *, what: str, error: type[EdgeVllmError],
              skip: Iterable[str] = ()) -> int:
    """Copy the folder ``source`` into ``dest`` (made; may exist) through descriptors: files
    with their executable bit, links as links (relative, no ``..``), names in ``skip`` left
    out; a device, pipe or socket, a link out, or a swap mid-copy is one line of ``error``.
    The number of files copied comes back."""
    fd = open_root(source, what, error)
    try:
        return _copy_folder(fd, Path(dest), "", what, error, frozenset(skip))
    finally:
        os.close(fd)


def _copy_folder(fd: int, dest: Path, folder: str, what: str, error: type[EdgeVllmError],
                 skip: frozenset[str]) -> int:
    """The open folder ``fd`` listed whole (names and lstat) first, then copied entry by entry:
    what changes after the listing is found at its open, not followed."""
    dest.mkdir(parents=True, exist_ok=True)
    with os.scandir(fd) as found:
        listed = sorted(((i.name, i.stat(follow_symlinks=False)) for i in found
                         if i.name not in skip), key=lambda pair: pair[0])
    copied = 0
    for name, info in listed:
        rel = f"{folder}/{name}" if folder else name
        if stat.S_ISDIR(info.st_mode):
            child = open_folder(fd, name, info, f"{what}: {rel}", error)
            try:
                copied += _copy_folder(child, dest / name, rel, what, error, skip)
            finally:
                os.close(child)
        elif stat.S_ISLNK(info.st_mode):
            os.symlink(_inside_link(fd, name, f"{what}: {rel}", error), dest / name)
        elif stat.S_ISREG(info.st_mode):
            _copy_file(fd, name, dest / name, f"{what}: {rel}", error)
            copied += 1
        else:
            raise error(f"{what}: {rel} is not a file, folder or link (a device, pipe or "
                        "socket); remove it")
    return copied


def _inside_link(parent: int, name: str, what: str, error: type[EdgeVllmError]) -> str:
    target = os.readlink(name, dir_fd=parent)
    if os.path.isabs(target) or ".." in Path(target).parts:
        raise error(f"{what}: a link to {target[:200]!r}, which may lead out of the folder; "
                    "only relative links without '..' are copied (put the file itself there)")
    return target


def _copy_file(parent: int, name: str, out: Path, what: str,
               error: type[EdgeVllmError]) -> None:
    fd = open_file(parent, name, what, error)
    with os.fdopen(fd, "rb") as handle, open(out, "wb") as copy:
        shutil.copyfileobj(handle, copy, 1 << 20)
        executable = bool(os.fstat(handle.fileno()).st_mode & stat.S_IXUSR)
    os.chmod(out, 0o755 if executable else 0o644)
