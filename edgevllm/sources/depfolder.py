"""Folders a user supplies for what the tree's CMake would clone (``--cmake-dep NAME=FOLDER``):
the road for a builder that cannot reach the repositories (no GitHub, a mirror, a stand-in).

Such a folder is data from others, read through one gate (``survey`` in preflight, stat only;
``take`` when the build's dependency folder is written):
- regular files and folders; a link only with a relative target that stays inside the folder;
  no device, pipe or socket; every name UTF-8 and a plain file name (``common/foreign.py``);
- at most ``MAX_FILES`` files and ``MAX_BYTES`` bytes in all (``Caps``), the cap named when
  passed; a file that changes while it is read is refused;
- a ``.git`` in it (a folder, or a submodule's file) is skipped: git is never run there, since a
  repository's config and hooks could run code, and git keeps no ``.git`` in a tree either.

``take`` copies the folder into the build's own dependency folder (the user's stays untouched)
and hashes every byte it copies, as git would (``sources/gittree.py``): that tree hash is the
folder's identity, proven against a lock's (``sources/cmakedeps.py``) or recorded in the lock.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from edgevllm.common.errors import MissingInputError, SuppliedFolderError
from edgevllm.common.foreign import file_name, path_inside
from edgevllm.common.grammar import flag_int
from edgevllm.sources.gittree import EXECUTABLE, FILE, LINK, Entry, blob_hasher, blob_id

MAX_FILES = 200_000       # vLLM 0.33.0's largest pin (flash-attention with CUTLASS) has ~15,000
MAX_BYTES = 8 << 30       # 8 GiB; the largest pin is under 1 GiB
MAX_DEPTH = 64            # folders inside folders
FILES_VAR, BYTES_VAR = "EDGEVLLM_CMAKE_DEP_MAX_FILES", "EDGEVLLM_CMAKE_DEP_MAX_BYTES"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Caps:
    files: int = MAX_FILES
    bytes: int = MAX_BYTES

    @classmethod
    def from_env(cls) -> Caps:
        """The caps, where the builder raises (or lowers) them: ``FILES_VAR``, ``BYTES_VAR``."""
        env = os.environ
        return cls(files=flag_int(env.get(FILES_VAR) or MAX_FILES, FILES_VAR, 1),
                   bytes=flag_int(env.get(BYTES_VAR) or MAX_BYTES, BYTES_VAR, 1, 10**12 - 1))


@dataclass(frozen=True)
class Supplied:
    """A folder that passed the gate in preflight: what stands in for the dependency ``name``."""

    name: str
    folder: Path
    files: int
    size: int
    caps: Caps = Caps()

    def describe(self) -> str:
        return f"{self.folder} ({self.files} files, {self.size / 1e6:.1f} MB)"


def _what(name: str, folder: Path | str) -> str:
    return f"--cmake-dep {name}={folder}"


def survey(name: str, folder: Path | str, caps: Caps | None = None) -> Supplied:
    """The folder checked whole through the gate without reading a byte of its files (``caps``:
    ``Caps.from_env()`` where None)."""
    caps = caps or Caps.from_env()
    root = _root(name, folder)
    files = size = 0
    for _rel, info, target in _walk(root, _what(name, folder), caps):
        files += 1
        size += info.st_size if target is None else 0
    return Supplied(name=name, folder=root, files=files, size=size, caps=caps)


def _root(name: str, folder: Path | str) -> Path:
    path = Path(folder).expanduser()
    if not path.exists():
        raise MissingInputError(f"{_what(name, folder)}: no such folder; give the folder that "
                                f"holds {name}'s files")
    if not path.is_dir():
        raise SuppliedFolderError(f"{_what(name, folder)}: not a folder; give the folder that "
                                  f"holds {name}'s files")
    return path.absolute()


def _walk(root: Path, what: str, caps: Caps) -> Iterator[tuple[str, os.stat_result, str | None]]:
    """(relative path, lstat, a link's target or None) of every file and link under ``root``,
    links never followed, ``.git`` skipped, each checked by the gate and counted against
    ``caps``."""
    files = size = 0
    pending = [""]
    while pending:
        folder = pending.pop()
        with os.scandir(root / folder) as found:
            items = sorted(found, key=lambda item: item.name)
        for item in items:
            if item.name == ".git":
                continue
            rel = f"{folder}/{item.name}" if folder else item.name
            file_name(item.name, what=f"{what}: {folder or '.'}", error=SuppliedFolderError)
            info = item.stat(follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                if rel.count("/") >= MAX_DEPTH:
                    raise SuppliedFolderError(f"{what}: {rel} is more than {MAX_DEPTH} folders "
                                              "deep (the cap of a dependency folder)")
                pending.append(rel)
                continue
            target = _link_target(root, rel, what) if stat.S_ISLNK(info.st_mode) else None
            if target is None and not stat.S_ISREG(info.st_mode):
                raise SuppliedFolderError(f"{what}: {rel} is not a file, folder or link (a "
                                          "device, pipe or socket); remove it")
            files += 1
            size += info.st_size if target is None else 0
            _check_caps(what, files, size, caps)
            yield rel, info, target


def _link_target(root: Path, rel: str, what: str) -> str:
    target = os.readlink(root / rel)
    if os.path.isabs(target):
        raise SuppliedFolderError(f"{what}: {rel} is a link to the absolute path {target!r}; "
                                  "only relative links inside the folder are taken")
    path_inside(root, rel, what=f"{what}: link {rel} -> {target}", error=SuppliedFolderError)
    return target


def _check_caps(what: str, files: int, size: int, caps: Caps) -> None:
    if files > caps.files:
        raise SuppliedFolderError(f"{what}: more than {caps.files} files, the cap of a dependency "
                                  f"folder ({FILES_VAR}); give the dependency's own files only")
    if size > caps.bytes:
        raise SuppliedFolderError(f"{what}: more than {caps.bytes} bytes in all, the cap of a "
                                  f"dependency folder ({BYTES_VAR}); give the dependency's own "
                                  "files only")


def take(supplied: Supplied, dest: Path, algorithm: str = "sha1") -> list[Entry]:
    """Copy the folder into ``dest`` through the gate, hashing every byte copied: its entries as
    git would store them (``gittree.tree_hash`` gives their tree)."""
    what = _what(supplied.name, supplied.folder)
    dest.mkdir(parents=True, exist_ok=True)
    entries = []
    for rel, _info, target in _walk(supplied.folder, what, supplied.caps):
        out = dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        if target is not None:
            os.symlink(target, out)
            entries.append(Entry(rel, LINK, blob_id(os.fsencode(target), algorithm)))
        else:
            mode, oid = _copy_file(supplied.folder / rel, out, f"{what}: {rel}", algorithm)
            entries.append(Entry(rel, mode, oid))
    return entries


def _copy_file(source: Path, out: Path, what: str, algorithm: str) -> tuple[str, str]:
    """(git mode, blob id) of ``source``, copied to ``out`` as read: a file swapped for a link,
    a pipe or a device after the walk, or one that changes size while read, is refused."""
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise SuppliedFolderError(f"{what}: cannot be read ({exc.strerror}); it changed while "
                                  "the folder was read, or is not readable") from None
    with os.fdopen(fd, "rb") as handle, open(out, "xb") as copy:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise SuppliedFolderError(f"{what}: not a regular file any more; the folder changed "
                                      "while it was read")
        digest, left = blob_hasher(info.st_size, algorithm), info.st_size
        while block := handle.read(min(_CHUNK, left + 1)):
            left -= len(block)
            if left < 0:
                break
            digest.update(block)
            copy.write(block)
        if left != 0:
            raise SuppliedFolderError(f"{what}: changed size while it was read; supply a folder "
                                      "nothing writes to")
    executable = bool(info.st_mode & stat.S_IXUSR)
    os.chmod(out, 0o755 if executable else 0o644)
    return (EXECUTABLE if executable else FILE), digest.hexdigest()
