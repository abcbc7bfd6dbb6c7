"""Whose cache files edgevllm believes: the user's own, as ssh treats its files.

A cache record can stand for what a check would find or let a step be skipped: a verify record
is a layer's libraries, a probe record an image's facts, a layer cache entry the bytes published
under a diff id, a folder of compiled wheels a compile. Checksums only show that a record is
whole, not who wrote it. So a record is used only when it and every folder from the cache's root
down to it are owned by this user (or root) and not writable by group or others, and nothing
below the root is a symbolic link; anything else is ignored, with one warning line per cache
root, and the work is done again (nothing is removed). Folders edgevllm makes for a cache are
0700 (``private_dir``) and its records lose their group and other write bits (``seal``), so
normal use keeps working whatever the umask.

A cache shared by a team is opt-in: ``EDGEVLLM_CACHE_SHARED_GROUP=<group>`` also trusts the
members of that group (as the group database lists them: ``getent group <group>``) as owners,
and that group's write bit. Writable by others is never trusted.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from edgevllm.common import console

SHARED_SETTING = "EDGEVLLM_CACHE_SHARED_GROUP"
_warned: set[str] = set()


def trusted_path(path: Path | str, root: Path | str, what: str = "cache") -> bool:
    """Whether ``path`` (under the cache root ``root``) may be believed; False once warned
    (one line per root and process). A part that is not there yet is no reason to distrust:
    reading it is a miss."""
    why = untrusted_because(Path(path), Path(root))
    if why is None:
        return True
    if str(root) not in _warned:
        _warned.add(str(root))
        console.warn(f"{what} {root}: {why}; not used (a cache others can write could decide a "
                     f"verdict): chown it to you and chmod go-w, or see {SHARED_SETTING} in "
                     "docs/security.md")
    return False


def untrusted_because(path: Path, root: Path) -> str | None:
    """Why ``path`` may not be believed (owner, write bits, a link below ``root``), or None."""
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        return f"{path} is outside the cache"
    shared_gid, shared_uids = _shared()
    where = root
    try:
        found = os.stat(root)  # the root as named: a link the user made there is followed
        for part in (None, *parts):
            if part is not None:
                where = where / part
                found = os.lstat(where)
                if stat.S_ISLNK(found.st_mode):
                    return f"{where} is a symbolic link"
                if not (stat.S_ISREG(found.st_mode) or stat.S_ISDIR(found.st_mode)):
                    return f"{where} is neither a file nor a folder"  # a FIFO: opening hangs
            why = _mode_problem(found, where, shared_gid, shared_uids)
            if why:
                return why
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{where} cannot be examined ({exc.strerror})"
    return None


def _mode_problem(found: os.stat_result, where: Path, shared_gid: int | None,
                  shared_uids: set[int]) -> str | None:
    if found.st_uid not in (os.geteuid(), 0) and found.st_uid not in shared_uids:
        return f"{where} is owned by uid {found.st_uid}, not by you"
    if found.st_mode & stat.S_IWOTH:
        return f"{where} is writable by others"
    if found.st_mode & stat.S_IWGRP and found.st_gid != shared_gid:
        return f"{where} is writable by its group"
    return None


def _shared() -> tuple[int | None, set[int]]:
    """The group a shared cache trusts (``EDGEVLLM_CACHE_SHARED_GROUP``) and its members' uids;
    (None, empty) when none is named or it does not exist (warned once)."""
    import grp
    import pwd

    name = os.environ.get(SHARED_SETTING, "").strip()
    if not name:
        return None, set()
    try:
        group = grp.getgrnam(name)
    except (KeyError, OverflowError):
        if SHARED_SETTING not in _warned:
            _warned.add(SHARED_SETTING)
            console.warn(f"{SHARED_SETTING}={name[:64]!r}: no such group; caches are trusted "
                         "only when they are yours")
        return None, set()
    uids = set()
    for member in group.gr_mem:
        try:
            uids.add(pwd.getpwnam(member).pw_uid)
        except KeyError:
            continue
    return group.gr_gid, uids


def private_dir(path: Path | str) -> Path:
    """``path`` and any missing folder above it made 0700 (whatever the umask), so that a cache
    edgevllm makes is one ``trusted_path`` believes; folders already there are left as they
    are."""
    path = Path(path)
    missing = []
    where = path
    while not where.exists() and where != where.parent:
        missing.append(where)
        where = where.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            continue  # another process made it first
    if not path.is_dir():
        path.mkdir(mode=0o700, exist_ok=True)  # raises what mkdir says (a file in the way)
    return path


def seal(path: Path | str) -> None:
    """Drop the group and other write bits of a record edgevllm wrote (a umask of 002 would
    leave them, and ``trusted_path`` would then ignore the record)."""
    found = os.lstat(path)
    mode = stat.S_IMODE(found.st_mode)
    if mode & 0o022 and not stat.S_ISLNK(found.st_mode):
        os.chmod(path, mode & ~0o022)
