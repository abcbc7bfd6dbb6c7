"""The rules every reader of an archive from others holds to: the one gate of archive shapes.

A published set's ``docker save`` stream (image/tarball.py, before ``docker load``), an image's
layers (verify/archive.py, for verify and inspect), a JIT cache bundle (serve/cache/bundle.py) and
the files named on a command line (a signing key) are read through here, so a shape refused here
is refused by every reader:

- a tar is walked with ``walk``: a pax header or GNU long name over ``MAX_HEADER_BYTES`` is
  refused before ``tarfile`` reads it into memory; sparse members (a 3 KB file declaring 3 GB of
  holes), names that climb out (``..``) and a name listed twice are refused; links, device files
  and FIFOs are refused unless the archive is a filesystem (``filesystem=True``: an image layer
  or a root filesystem, where they are data, never followed or opened), and there a hard link
  must name a member before it; at most ``MAX_MEMBERS`` members, and ``tarfile``'s own list of
  every member read is emptied as it goes (it would hold each one);
- a member or a file is read whole only through ``read_member`` / ``read_file``, with a limit:
  ``/dev/zero`` as a key, or a member that declares one size and holds another, stops at it.

Every refusal is one line of the caller's error class, naming the archive and the member.
"""

from __future__ import annotations

import posixpath
import tarfile
from pathlib import Path
from typing import IO, Iterator

from edgevllm.common.errors import EdgeVllmError

MAX_HEADER_BYTES = 1 << 20  # a pax header or a GNU long name: real ones are under 4 KiB
MAX_MEMBERS = 2_000_000     # one layer of a real image: under 300,000 files
MAX_NAME = 4096
_HEADER_TYPES = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE,
                 tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK)


class BoundedTarInfo(tarfile.TarInfo):
    """A member header whose extended headers are refused above ``MAX_HEADER_BYTES`` before
    ``tarfile`` reads them (it reads a pax header's declared size into memory at once)."""

    # open_tar names the archive and the caller's error class on a subclass of its own: the
    # first header is read inside tarfile.open, before the TarFile could carry them.
    edgevllm_error: type[EdgeVllmError] = EdgeVllmError
    edgevllm_label = "archive"

    def _proc_member(self, tar):  # type: ignore[no-untyped-def]  # tarfile's own hook
        if self.type in _HEADER_TYPES and self.size > MAX_HEADER_BYTES:
            raise self.edgevllm_error(
                f"{self.edgevllm_label}: an extended header declares {self.size} bytes, over "
                f"the {MAX_HEADER_BYTES >> 10} KiB a header may hold: the archive is corrupt or "
                "hostile")
        return super()._proc_member(tar)  # type: ignore[misc]


def open_tar(source: IO[bytes] | Path, label: str, error: type[EdgeVllmError],
             tarinfo: type[tarfile.TarInfo] = BoundedTarInfo,
             bufsize: int = tarfile.RECORDSIZE) -> tarfile.TarFile:
    """A forward-only tar reader of ``source`` (a stream, or a file it opens and closes) whose
    refusals are ``error`` lines."""
    if not issubclass(tarinfo, BoundedTarInfo):
        raise TypeError("the tar header class must bound extended headers (BoundedTarInfo)")
    bound = type(tarinfo.__name__, (tarinfo,), {"edgevllm_error": error, "edgevllm_label": label})
    if isinstance(source, Path):
        return tarfile.open(source, mode="r|", tarinfo=bound, bufsize=bufsize)
    return tarfile.open(fileobj=source, mode="r|", tarinfo=bound, bufsize=bufsize)


def walk(tar: tarfile.TarFile, label: str, error: type[EdgeVllmError], filesystem: bool = False
         ) -> Iterator[tarfile.TarInfo]:
    """Every member of ``tar``, each checked (see the module doc); ``filesystem``: the archive
    is an image layer or a root filesystem, whose links and device files are data."""
    seen: set[str] = set()
    while (member := _next(tar, label, error)) is not None:
        forget_members(tar)
        if len(seen) >= MAX_MEMBERS:
            raise error(f"{label}: more than {MAX_MEMBERS} members: the archive is corrupt or "
                        "hostile")
        name = check_member(member, label, error, filesystem)
        if name in seen and not member.isdir():
            raise error(f"{label}: member '{name[:200]}' is listed twice; an archive written by "
                        "edgevllm or docker names each file once")
        if member.islnk() and check_name(member.linkname, label, error) not in seen:
            raise error(f"{label}: hard link '{name[:200]}' names no member before it")
        seen.add(name)
        yield member


def _next(tar: tarfile.TarFile, label: str, error: type[EdgeVllmError]) -> tarfile.TarInfo | None:
    try:
        return tar.next()
    except (tarfile.TarError, EOFError) as exc:  # a header cut short or garbled
        detail = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        raise error(f"{label}: a damaged or truncated tar archive ({detail})") from None


def forget_members(tar: tarfile.TarFile) -> None:
    """Empty ``tarfile``'s list of every member read (a forward reader needs none of them; a
    small compressed tar of millions of empty members would otherwise fill memory)."""
    tar.members = []  # type: ignore[attr-defined]  # tarfile's own, not in its stubs


def check_name(name: str, label: str, error: type[EdgeVllmError]) -> str:
    """A member name as a relative path inside the archive (``./`` and a leading ``/`` as docker
    writes them dropped); refused when it climbs out or is too long."""
    if len(name) > MAX_NAME or "\0" in name:
        raise error(f"{label}: a member name of {len(name)} characters is not a path")
    path = name
    while path.startswith("./"):
        path = path[2:]
    path = path.strip("/")
    if ".." in path.split("/") or posixpath.isabs(path):
        raise error(f"{label}: member '{name[:200]}' climbs out of the archive (..); it is not "
                    "one edgevllm or docker wrote")
    return path


def check_member(member: tarfile.TarInfo, label: str, error: type[EdgeVllmError],
                 filesystem: bool = False) -> str:
    """One member's shape (see ``walk``); its clean name."""
    name = check_name(member.name, label, error)
    if member.issparse():
        raise error(f"{label}: member '{name[:200]}' is a sparse file (it declares "
                    f"{member.size} bytes of holes); edgevllm and docker never write one")
    if not (member.isfile() or member.isdir()) and not filesystem:
        kind = "a link" if member.issym() or member.islnk() else "a device file or a FIFO"
        raise error(f"{label}: member '{name[:200]}' is {kind}; this archive may hold regular "
                    "files and folders only")
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()
            or member.ischr() or member.isblk() or member.isfifo()):
        raise error(f"{label}: member '{name[:200]}' is of an unknown kind ({member.type!r})")
    return name


def read_member(tar: tarfile.TarFile, member: tarfile.TarInfo, limit: int, label: str,
                error: type[EdgeVllmError]) -> bytes:
    """A regular member's bytes, refused above ``limit`` (declared, or read)."""
    if not member.isfile():
        raise error(f"{label}: member '{member.name[:200]}' is not a regular file")
    if member.size > limit:
        raise error(f"{label}: member '{member.name[:200]}' declares {member.size} bytes, over "
                    f"the {_size(limit)} it may hold: the archive is corrupt or hostile")
    handle = tar.extractfile(member)
    assert handle is not None  # a regular member always has its bytes
    return _bounded(handle, limit, f"{label}: member '{member.name[:200]}'", error)


def read_file(path: Path | str, limit: int, what: str, error: type[EdgeVllmError]) -> bytes:
    """A named file's bytes (a key, a manifest), refused above ``limit`` without reading more
    than ``limit + 1`` bytes: ``/dev/zero`` or a FIFO is one line, not a hang."""
    with open(path, "rb") as handle:
        return _bounded(handle, limit, f"{what} {path}", error)


def _bounded(handle: IO[bytes], limit: int, where: str, error: type[EdgeVllmError]) -> bytes:
    data = handle.read(limit + 1)
    if len(data) > limit:
        raise error(f"{where}: over the {_size(limit)} it may hold; it is not what it should "
                    "be (check the path)")
    return data


def _size(count: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift:
            return f"{count / (1 << shift):g} {unit}"
    return f"{count} bytes"
