"""The one check for names from others that become paths, URLs or command arguments.

A tree, a mod, a recipe or a lock names things that edgevllm then turns into a folder
(``FetchContent_Declare(../../x ...)`` became ``<deps>/../../x``), a file it copies (``cp
/abs/host/file``), a repository git fetches (``file:///root/secrets``, ``/home/me/private``, a
``ext::sh -c ...`` helper) or a ref git is given (``--upload-pack=...``). Each such name passes
here where it enters, and the caller's error class carries one line naming ``what``:

- ``plain_name``         one path component: letters, digits, ``._+-``; not ``.``/``..``
- ``file_name``          one name inside a folder from others (a repository's file: any UTF-8
                         name without a control character, separator or backslash)
- ``path_inside``        a relative path that stays inside its folder, links followed
                         (``inside``: the same answer as the path or None, for a caller that
                         skips such a name, as the eugr import skips a ``cp`` of a host file)
- ``links_out``          the links of a folder that leave it or lead nowhere
- ``remote_repository``  ``https``/``http``/``ssh``/``git`` URLs and ``user@host:path``; never a
                         local path, ``file://``, a transport helper or an option
- ``git_ref``            a branch, tag or SHA as git's ref grammar has it, never an option
"""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from edgevllm.common.errors import EdgeVllmError

_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}", re.A)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
REMOTE_SCHEMES = ("https", "http", "ssh", "git")
_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})|\[[0-9A-Fa-f:.]+\]", re.A)
_SCP = re.compile(r"(?:(?P<user>[A-Za-z0-9_][A-Za-z0-9_.-]{0,63})@)?(?P<host>[A-Za-z0-9]"
                  r"[A-Za-z0-9.-]{0,252}):(?P<path>[A-Za-z0-9_~./][A-Za-z0-9_~./+-]*)", re.A)
_REF = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./+-]{0,254}", re.A)


def _shown(value: str) -> str:
    """A value in a message: control characters escaped, cut to a readable length."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", value[:120])


def plain_name(value: str, *, what: str, error: type[EdgeVllmError]) -> str:
    """``value`` when it is one plain path component (a folder or file name edgevllm makes)."""
    if not isinstance(value, str) or not _PLAIN.fullmatch(value) or value.strip(".") == "":
        raise error(f"{what}: '{_shown(str(value))}' is not a plain name (letters, digits and "
                    "._+-, starting with a letter or digit); it would become a path")
    return value


def file_name(value: str, *, what: str, error: type[EdgeVllmError]) -> str:
    """``value`` when it is one name inside a folder from others as a repository has it (dots,
    spaces, brackets are fine): UTF-8, no control character, separator or backslash, not
    ``.``/``..``."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise error(f"{what}: a name that is not UTF-8; only UTF-8 names are taken") from None
    if (not value or value in (".", "..") or "/" in value or "\\" in value
            or _CONTROL.search(value)):
        raise error(f"{what}: '{_shown(value)}' is not a file name (no control character, '/' or "
                    "'\\', not '.' or '..')")
    return value


def path_inside(base: Path, value: str, *, what: str, error: type[EdgeVllmError]) -> Path:
    """``base / value`` when ``value`` is relative, has no ``..`` and, with every link followed,
    stays inside ``base`` (a link inside the folder may not point out of it)."""
    text = str(value)
    if not text or _CONTROL.search(text) or "\\" in text:
        raise error(f"{what}: '{_shown(text)}' is not a relative path inside its folder")
    parts = PurePosixPath(text).parts
    if PurePosixPath(text).is_absolute() or ".." in parts:
        raise error(f"{what}: '{_shown(text)}' leaves its folder (an absolute path or '..'); "
                    "only paths inside it are taken")
    root = Path(os.path.realpath(base))
    joined = Path(base, *parts)
    real = Path(os.path.realpath(joined))
    if real != root and root not in real.parents:
        raise error(f"{what}: '{_shown(text)}' leads out of its folder through a link; "
                    "only paths inside it are taken")
    return joined


def remote_repository(value: str, *, what: str, error: type[EdgeVllmError]) -> str:
    """``value`` when it names a repository on another machine by a remote scheme."""
    text = str(value)
    bad = not text or text != text.strip() or any(c.isspace() for c in text) \
        or _CONTROL.search(text) or text.startswith("-") or "::" in text.split("/", 1)[0]
    if not bad and "://" in text:
        bad = not _remote_url(text)
    elif not bad:
        scp = _SCP.fullmatch(text)
        bad = scp is None or scp.group("host").startswith("-")
    if bad:
        raise error(f"{what}: repository '{_shown(text)}' is not a remote URL "
                    f"({', '.join(s + '://' for s in REMOTE_SCHEMES)} or user@host:path); "
                    "a local path, file:// or a transport helper is not fetched from data")
    return text


def _remote_url(text: str) -> bool:
    try:
        parts = urlsplit(text)
        host = parts.hostname or ""
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError:
        return False
    netloc_host = parts.netloc.rpartition("@")[2]
    return (parts.scheme.lower() in REMOTE_SCHEMES and bool(host) and not host.startswith("-")
            and _HOST.fullmatch(netloc_host.rsplit(":", 1)[0] if not netloc_host.startswith("[")
                                else netloc_host.rsplit("]", 1)[0] + "]") is not None)


def git_ref(value: str, *, what: str, error: type[EdgeVllmError]) -> str:
    """``value`` when git can only read it as a ref (never an option, a range or a pattern)."""
    text = str(value)
    if (not _REF.fullmatch(text) or ".." in text or text.endswith((".lock", "/", "."))
            or "//" in text or "/." in text):
        raise error(f"{what}: '{_shown(text)}' is not a branch, tag or commit name")
    return text


def inside(folder: Path, name: str) -> Path | None:
    """``folder / name`` where ``path_inside`` takes ``name`` (also no ``~``); None otherwise."""
    if not isinstance(name, str) or name.startswith("~"):
        return None
    try:
        return path_inside(folder, name, what="name", error=EdgeVllmError)
    except EdgeVllmError:
        return None


def links_out(folder: Path) -> list[Path]:
    """Every symbolic link under ``folder`` whose target is outside it or missing (walked
    without following links)."""
    found = []
    root = Path(os.path.realpath(folder))
    for top, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(top) / name
            if not path.is_symlink():
                continue
            real = Path(os.path.realpath(path))
            if not path.exists() or (real != root and root not in real.parents):
                found.append(path)
    return sorted(found)
