"""Write outputs so that an interrupted run never leaves a half-written file under a final name.

Everything is written to a temporary sibling (``.<name>.tmp-<pid>``) and renamed into place only
once complete; on any exception, Ctrl-C included, the temporary is removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Iterator

from edgevllm.common.errors import OutputFolderError


def _tmp_sibling(final: Path) -> Path:
    return final.with_name(f".{final.name}.tmp-{os.getpid()}-{threading.get_ident()}")


def move_into_place(ready: Path | str, final: Path | str) -> Path:
    """Rename a complete file or folder to its final name (the one rename into place edgevllm
    does; tests/test_common_fsutil.py fails on any other)."""
    _not_special(Path(final))
    os.replace(ready, final)
    return Path(final)


def _not_special(final: Path) -> None:
    """A device, pipe or socket under the final name is never replaced: as root, a rename onto
    ``--out /dev/null`` would put a file where every program's /dev/null is."""
    try:
        mode = os.lstat(final).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        raise OutputFolderError(f"{final}: is a device, pipe or socket, not a file; give the "
                                "path of a file to write")


class StagedFile:
    """A file (or a folder a tool makes at ``tmp``) under a temporary sibling name, put in place
    only by ``commit``: write it, check it (a sha256, a digest), then commit. ``abort``, or
    leaving the ``with`` block without a commit, removes it; nothing half-done keeps the name."""

    def __init__(self, final: Path | str):
        self.final = Path(final)
        self.final.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = _tmp_sibling(self.final)
        self._handle: IO | None = None
        self.committed = False

    def open(self, mode: str = "wb") -> IO:
        self._handle = open(self.tmp, mode)
        return self._handle

    def _close(self, sync: bool) -> None:
        if self._handle is not None and not self._handle.closed:
            if sync:
                self._handle.flush()
                os.fsync(self._handle.fileno())
            self._handle.close()

    def commit(self) -> Path:
        self._close(sync=True)
        move_into_place(self.tmp, self.final)
        self.committed = True
        return self.final

    def abort(self) -> None:
        self._close(sync=False)
        if self.tmp.is_dir() and not self.tmp.is_symlink():
            shutil.rmtree(self.tmp, ignore_errors=True)
        else:
            self.tmp.unlink(missing_ok=True)

    def __enter__(self) -> StagedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.committed:
            self.abort()


@contextlib.contextmanager
def atomic_open(final: Path | str, mode: str = "wb") -> Iterator[IO]:
    """Open a temporary sibling of ``final`` for writing; rename it to ``final`` on success."""
    final = Path(final)
    _check_file_destination(final)
    with StagedFile(final) as staged:
        with staged.open(mode) as handle:
            yield handle
            staged.commit()


def _check_file_destination(final: Path) -> None:
    """An output file's path must name a file: a folder there, or a file where a parent folder
    should be, is one line (exit 2), not a traceback after the work is done."""
    from edgevllm.common.errors import ConfigError

    _not_special(final)
    if final.is_dir():
        raise ConfigError(f"{final}: is a folder; give the path of a file to write")
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ConfigError(f"{final}: a parent of this path is a file, not a folder") from None
    except OSError as exc:
        raise ConfigError(f"{final.parent}: cannot create the folder ({exc.strerror})") from None


def atomic_write_text(final: Path | str, text: str) -> Path:
    with atomic_open(final, "w") as handle:
        handle.write(text)
    return Path(final)


def atomic_write_bytes(final: Path | str, data: bytes) -> Path:
    with atomic_open(final, "wb") as handle:
        handle.write(data)
    return Path(final)


def atomic_write_json(final: Path | str, obj: object) -> Path:
    return atomic_write_text(final, json.dumps(obj, indent=2, sort_keys=True) + "\n")


@contextlib.contextmanager
def atomic_dir(final: Path | str) -> Iterator[Path]:
    """Yield a temporary folder beside ``final``; it replaces ``final`` only if the block
    succeeds. For edgevllm's own folders (caches, build trees and contexts under ``--out``): the
    parent's marker records ``final`` as edgevllm's, and a ``final`` it does not record (the
    user's, or written before records were kept) is moved aside, never deleted. A folder the
    user names goes through ``output_dir``."""
    final = Path(final)
    with atomic_dir_staging(final) as tmp:
        yield tmp
        install_dir(tmp, final)


def install_dir(ready: Path, final: Path) -> None:
    """Rename the complete folder ``ready`` (on ``final``'s file system) to ``final``: an older
    ``final`` goes if the parent's marker records it as edgevllm's, else it is moved aside."""
    marker = read_marker(final.parent)
    ours = marker[1] if marker else set()
    if (final.exists() or final.is_symlink()) and final.name not in ours:
        _move_aside(final)
    _swap_in(ready, final)
    _record(final.parent, ours | {final.name}, marker[0] if marker else "build")


def _move_aside(final: Path) -> None:
    from edgevllm.common import console

    kept = final.with_name(f"{final.name}.kept-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
    move_into_place(final, kept)
    console.warn(f"{final}: edgevllm has no record of writing it; kept it as {kept.name} "
                 "(delete it when you no longer need it)")


# An output folder edgevllm wrote holds this file: a header naming the command kind that wrote
# it and the folder it was written in (device and inode), then the names it wrote there, one per
# line. Only those names are ever replaced or removed; anything else in the folder is the
# user's. A marker that arrived from elsewhere (a cloned repository, someone's unpacked out/)
# names another folder, so it is no record of edgevllm's: it is never trusted for anything.
OUTPUT_MARKER = ".edgevllm-output"
_HEADER = "# edgevllm-output 2"
_MARKER_LIMIT = 1 << 20


def _identity(folder: Path) -> str:
    info = folder.stat()
    return f"{info.st_dev}:{info.st_ino}"


def _marker_text(folder: Path, names: set[str] | list[str], kind: str) -> str:
    header = f"{_HEADER} kind={kind} folder={_identity(folder)}\n"
    return header + "".join(f"{n}\n" for n in sorted(names))


def plain_name(name: str) -> bool:
    """A name that stays inside its folder: no separator, no ``.``/``..``, nothing unprintable."""
    return bool(name) and name not in (".", "..") and "/" not in name and "\\" not in name \
        and name.isprintable() and not name.startswith(OUTPUT_MARKER)


def read_marker(folder: Path) -> tuple[str, set[str]] | None:
    """(kind, names) that edgevllm recorded writing in ``folder``; None when no marker there was
    written by edgevllm for this very folder. Only plain names are ever returned."""
    try:
        with open(folder / OUTPUT_MARKER, "rb") as handle:
            raw = handle.read(_MARKER_LIMIT + 1)
        identity = _identity(folder)
    except OSError:
        return None
    lines = raw.decode("utf-8", "replace").split("\n") if len(raw) <= _MARKER_LIMIT else []
    fields = dict(part.split("=", 1) for part in (lines[0] if lines else "").split()[2:]
                  if "=" in part)
    if not lines or not lines[0].startswith(_HEADER + " ") or fields.get("folder") != identity:
        return None
    return fields.get("kind", ""), {name for name in lines[1:] if plain_name(name)}


def _record(folder: Path, names: set[str], kind: str) -> None:
    """The names edgevllm wrote in ``folder``, in its marker (written whole, then renamed)."""
    tmp = folder / f"{OUTPUT_MARKER}.tmp-{os.getpid()}"
    tmp.write_text(_marker_text(folder, names, kind))
    move_into_place(tmp, folder / OUTPUT_MARKER)


def _written_by_us(folder: Path) -> set[str] | None:
    """The names edgevllm wrote into ``folder`` (None when edgevllm did not write it)."""
    marker = read_marker(folder)
    return marker[1] if marker else None


def check_output_dir(final: Path | str, force: bool = False, kind: str = "output") -> None:
    """Refuse (one line) an output path edgevllm may not write: a file, a folder the output of
    another kind of command owns, or a folder with contents it did not write (unless ``force``:
    then those stay, beside what is written)."""
    final = Path(final)
    if final.exists() and not final.is_dir():
        raise OutputFolderError(f"{final}: exists and is not a folder; choose a folder path")
    if not final.is_dir():
        return
    marker = read_marker(final)
    if marker and marker[0] != kind and not force:
        raise OutputFolderError(
            f"{final}: holds what inv {marker[0]} wrote; inv {kind} would replace it: choose "
            "another folder, or pass --force to write beside it")
    if force:
        return
    ours = marker[1] if marker else None
    foreign = sorted(p.name for p in final.iterdir() if p.name != OUTPUT_MARKER
                     and (ours is None or p.name not in ours))
    if ours is None and foreign:
        raise OutputFolderError(
            f"{final}: the folder holds files edgevllm did not write ({foreign[0]!r}"
            f"{', ...' if len(foreign) > 1 else ''}); choose an empty or new folder, or pass "
            "--force to write beside them (nothing of yours is deleted)")


@contextlib.contextmanager
def output_dir(final: Path | str, force: bool = False, kind: str = "output") -> Iterator[Path]:
    """``atomic_dir`` for a folder the user names (``--out``) with the output of one command
    ``kind``: marked as edgevllm's, and never deleting what edgevllm did not write there.
    Refused up front by ``check_output_dir``."""
    final = Path(final)
    check_output_dir(final, force, kind)
    with atomic_dir_staging(final) as tmp:
        yield tmp
        check_output_dir(final, force, kind)  # again: the folder may have changed meanwhile
        marker = read_marker(final) if final.is_dir() else None
        ours = marker[1] if marker and marker[0] == kind else None
        if not final.exists() or (ours is not None and set(_names(final)) <= ours):
            (tmp / OUTPUT_MARKER).write_text(_marker_text(tmp, _names(tmp), kind))
            _swap_in(tmp, final)  # the rename keeps the folder's identity
        else:
            _merge_in(tmp, final, ours or set(), force, kind)


def _names(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name != OUTPUT_MARKER]


def _swap_in(tmp: Path, final: Path) -> None:
    """``final`` holds only what edgevllm wrote (or does not exist): replace it whole."""
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        move_into_place(final, old)
        move_into_place(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        move_into_place(tmp, final)


def _merge_in(tmp: Path, final: Path, ours: set[str], force: bool, kind: str) -> None:
    """``final`` also holds the user's files: remove only our old names, move the new ones in."""
    new = set(_names(tmp))
    clash = sorted(n for n in new - ours if (final / n).exists() or (final / n).is_symlink())
    if clash and not force:
        raise OutputFolderError(f"{final / clash[0]}: edgevllm did not write it and would replace "
                                "it; move it away or pass --force")
    for name in sorted(n for n in ours | new if plain_name(n)):
        old = final / name
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old)
        elif old.exists() or old.is_symlink():
            old.unlink()
    for name in sorted(new):
        move_into_place(tmp / name, final / name)
    _record(final, new, kind)


@contextlib.contextmanager
def atomic_dir_staging(final: Path) -> Iterator[Path]:
    """A temporary folder beside ``final``, removed on the way out whatever happened; the
    parent folders it had to make go too when the block failed (a refused render leaves no
    empty ``out/``)."""
    made = [p for p in [final.parent, *final.parent.parents] if not p.exists()]
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    done = False
    try:
        yield tmp
        done = True
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        for parent in [] if done else made:  # innermost first; one that holds files stays
            with contextlib.suppress(OSError):
                parent.rmdir()


def sha256_file(path: Path | str, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def dir_entries(folder: Path | str) -> list[os.DirEntry]:
    """``folder``'s entries (a cache's prune walks them), none where it cannot be listed."""
    try:
        with os.scandir(folder) as entries:
            return list(entries)
    except OSError:
        return []
