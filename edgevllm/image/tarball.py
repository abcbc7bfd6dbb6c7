"""Reading published image tarballs: the ordered part set, checksums, decompression.

``inv publish`` writes ``<name>.tar.zst`` (or its numbered parts when split, ``.tar.gz`` for
gzip) beside ``<name>.manifest.json``, which lists every part with its size and sha256.
Readers (``inv load``, ``inv verify --tarball``) go through this module:

    tarset = open_tarball(path)         # a manifest, a part, or a bare .tar/.tar.gz/.tar.zst
    tarset.check()                      # presence, size and sha256 of every part, in order
    tarset.check_contents()             # one image, every member listed and hashed (setcheck)
    with tarset.tar_stream() as tar:    # the uncompressed ``docker save`` stream
        for member in tarfile.open(fileobj=tar, mode="r|"): ...

What the manifest says and how parts are named is image/tarmanifest.py's; the whole-set check
(one image, every member listed) is image/setcheck.py's. Nothing here talks to Docker. Every
failure is an ``IntegrityError`` (one line, naming the file).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Callable, Iterator

from edgevllm.common.archives import read_file
from edgevllm.common.errors import IntegrityError, MissingInputError
from edgevllm.common.streams import ByteReader, as_binary_io
from edgevllm.image.tarmanifest import (
    MANIFEST_SUFFIX,
    ManifestModel,
    is_part_name,
    manifest_name_for,
    read_manifest,
)
from edgevllm.image.zstdframes import zstd_chunks

if TYPE_CHECKING:
    from edgevllm.image.setcheck import ArchiveShape

CHUNK = 1 << 20
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
DEFAULT_WINDOW_LOG = 27  # libzstd's and the zstd CLI's default decoder limit: 128 MiB
GZIP_MAGIC = b"\x1f\x8b"
SIDECAR_LIMIT = 64 << 10  # a sha256sum line (or a few): a larger .sha256 is not one

ByteSink = Callable[[int], None]


# --- the part set ------------------------------------------------------------------------------
@dataclass
class Part:
    path: Path
    size: int | None = None  # None: unknown (a bare tarball without sidecar)
    sha256: str | None = None


@dataclass
class TarballSet:
    """An ordered list of files whose concatenation is one compressed ``docker save`` stream."""

    parts: list[Part]
    format: str  # "zst" | "gz" | "tar"
    manifest_path: Path | None = None
    manifest: ManifestModel | None = None
    checked: bool = field(default=False, repr=False)
    contents_checked: bool = field(default=False, repr=False)
    archive: ArchiveShape | None = field(default=None, repr=False)   # once contents are checked

    @property
    def verifiable(self) -> bool:
        """Every part has a checksum: always so for a set read through its manifest."""
        return self.manifest is not None or all(p.sha256 for p in self.parts)

    @property
    def window_log(self) -> int:
        """The largest zstd window the set's manifest declares (27 = 128 MiB, every decoder's
        default limit, when it declares none)."""
        declared = (self.manifest.compression or {}).get("window_log") if self.manifest else None
        return max(DEFAULT_WINDOW_LOG, declared if isinstance(declared, int) else 0)

    @property
    def decompression_memory(self) -> int | None:
        """Bytes one decoder needs, as the manifest states it (None: not stated)."""
        stated = (
            (self.manifest.compression or {}).get("decompression_memory") if self.manifest else None
        )
        return stated if isinstance(stated, int) else None

    @property
    def total_size(self) -> int:
        return sum(p.size if p.size is not None else p.path.stat().st_size for p in self.parts)

    def describe(self) -> str:
        return str(self.manifest_path or self.parts[0].path)

    def check(self, on_bytes: ByteSink | None = None) -> None:
        """Presence, size and sha256 of every part, in order; raises ``IntegrityError``."""
        for part in self.parts:
            _check_present(part)
        for index, part in enumerate(self.parts):
            if part.sha256 is None:
                if self.manifest is not None:  # unreachable through read_manifest: say so loudly
                    raise IntegrityError(f"{part.path}: the manifest gives this part no sha256")
                continue
            digest = hashlib.sha256()
            with open(part.path, "rb") as handle:
                while block := handle.read(CHUNK):
                    digest.update(block)
                    if on_bytes:
                        on_bytes(len(block))
            if digest.hexdigest() != part.sha256:
                raise IntegrityError(
                    f"{part.path}: sha256 mismatch (part {index + 1} of {len(self.parts)}): the "
                    "file is corrupt; copy it again from the source"
                )
        self.checked = True

    @contextlib.contextmanager
    def compressed_stream(self, on_bytes: ByteSink | None = None) -> Iterator[ByteReader]:
        """The parts concatenated, in order, as one readable stream (checked again while read)."""
        for part in self.parts:
            _check_present(part)
        reader = _ConcatReader(self.parts, on_bytes)
        try:
            yield reader
        finally:
            reader.close()

    def check_contents(self, on_bytes: ByteSink | None = None) -> None:
        """The archive itself, read once: exactly one image, every member listed and hashed,
        the manifest's image id and tags (image/setcheck.py); raises ``IntegrityError``."""
        from edgevllm.image.setcheck import check_archive

        if self.verifiable and not self.checked:
            self.check()
        image = self.manifest.image if self.manifest else {}
        tags = image.get("repo_tags") if self.manifest else None
        with self._plain_stream(on_bytes) as tar:
            shape = check_archive(tar, self.describe(), image.get("id") if self.manifest else None,
                                  [t for t in tags if not str(t).startswith("sha256:")]
                                  if isinstance(tags, list) else None)
        self.archive = shape
        self.contents_checked = True

    @contextlib.contextmanager
    def tar_stream(self, on_bytes: ByteSink | None = None) -> Iterator[IO[bytes]]:
        """The uncompressed ``docker save`` tar stream; a corrupt/truncated stream raises.

        A set with checksums is checked whole first (unless ``check()`` already ran): no byte of
        a corrupt part may reach a reader. What reads the archive as one image (``inv load``,
        the offline supply-chain check) runs ``check_contents`` first; verify reads root
        filesystems (``docker export``) and layer files too, and refuses several images itself
        (verify/archive.py)."""
        if self.verifiable and not self.checked:
            self.check()
        with self._plain_stream(on_bytes) as tar:
            yield tar

    @contextlib.contextmanager
    def _plain_stream(self, on_bytes: ByteSink | None) -> Iterator[IO[bytes]]:
        with self.compressed_stream(on_bytes) as raw:
            reader = _DecompressReader(raw, self.format, self.describe(), self.window_log)
            yield io.BufferedReader(reader, CHUNK)


def _check_present(part: Part) -> None:
    if not part.path.is_file():
        raise IntegrityError(
            f"{part.path}: part is missing; copy every part listed in the "
            "manifest into the same folder"
        )
    if part.size is not None and part.path.stat().st_size != part.size:
        raise IntegrityError(
            f"{part.path}: size {part.path.stat().st_size} bytes, the manifest says {part.size}: "
            "the file is truncated or corrupt; copy it again"
        )


class _ConcatReader(io.RawIOBase):
    """Reads the parts one after the other; re-hashes each and fails at its end on a mismatch,
    so a file changed between ``check()`` and the read is still caught."""

    def __init__(self, parts: list[Part], on_bytes: ByteSink | None):
        self._parts = list(parts)
        self._index = -1
        self._handle: io.BufferedReader | None = None
        self._digest = hashlib.sha256()
        self._seen = 0
        self._on_bytes = on_bytes
        self._next_part()

    def readable(self) -> bool:
        return True

    def _next_part(self) -> None:
        if self._handle:
            self._handle.close()
            self._finish_part(self._parts[self._index])
        self._index += 1
        self._handle = None
        if self._index < len(self._parts):
            self._handle = open(self._parts[self._index].path, "rb")
            self._digest = hashlib.sha256()
            self._seen = 0

    def _finish_part(self, part: Part) -> None:
        if part.size is not None and self._seen != part.size:
            raise IntegrityError(
                f"{part.path}: changed while being read ({self._seen} bytes, expected {part.size})"
            )
        if part.sha256 and self._digest.hexdigest() != part.sha256:
            raise IntegrityError(
                f"{part.path}: sha256 mismatch: the file is corrupt; copy it again from the source"
            )

    def readinto(self, buffer) -> int:
        while self._handle is not None:
            count = self._handle.readinto(buffer)
            if count:
                view = memoryview(buffer)[:count]
                self._digest.update(view)
                self._seen += count
                if self._on_bytes:
                    self._on_bytes(count)
                return count
            self._next_part()
        return 0

    def close(self) -> None:
        if self._handle:
            self._handle.close()
            self._handle = None
        super().close()


class _DecompressReader(io.RawIOBase):
    """Decompresses zstd (all frames, checksummed, truncation detected) or gzip (all members)."""

    def __init__(self, raw: ByteReader, fmt: str, label: str, window_log: int = DEFAULT_WINDOW_LOG):
        self._label = label
        self._chunks = _decompressed_chunks(raw, fmt, label, window_log)
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._pending:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._pending = memoryview(chunk)
        count = min(len(buffer), len(self._pending))
        buffer[:count] = self._pending[:count]
        self._pending = self._pending[count:]
        return count


def _decompressed_chunks(
    raw: ByteReader, fmt: str, label: str, window_log: int = DEFAULT_WINDOW_LOG
) -> Iterator[bytes]:
    if fmt == "zst":
        yield from _zstd_chunks(raw, label, window_log)
    elif fmt == "gz":
        yield from _gzip_chunks(raw, label)
    else:
        while block := raw.read(CHUNK):
            yield block


def _zstd_chunks(
    raw: ByteReader, label: str, window_log: int = DEFAULT_WINDOW_LOG
) -> Iterator[bytes]:
    # Bounded pieces, truncation detected, the window limited to what the manifest declares.
    yield from zstd_chunks(raw, label, window_log)


def _gzip_chunks(raw: ByteReader, label: str) -> Iterator[bytes]:
    # reads every member of a multi-member file
    reader = gzip.GzipFile(fileobj=as_binary_io(raw), mode="rb")
    held = None  # as for zstd: a CRC that fails at a member's end keeps its last piece back
    try:
        while block := reader.read(CHUNK):
            if held is not None:
                yield held
            held = block
    except EOFError:
        raise IntegrityError(
            f"{label}: the gzip stream is truncated; copy it again or check "
            "that every part is there"
        ) from None
    except (gzip.BadGzipFile, zlib.error, OSError) as exc:
        raise IntegrityError(
            f"{label}: the gzip stream is corrupt ({exc}); copy it again"
        ) from None
    if held is not None:
        yield held


# --- finding the parts -------------------------------------------------------------------------
def open_tarball(path: Path | str) -> TarballSet:
    """A manifest, any part of a split set, or a bare tarball → the part set to read.

    A tarball with its ``<name>.manifest.json`` beside it is read through the manifest (so its
    checksums are checked); a bare tarball is checked against ``<file>.sha256`` when present.
    """
    path = Path(path)
    if path.name.endswith(MANIFEST_SUFFIX):
        return from_manifest(path)
    sibling = _sibling_manifest(path)
    if sibling is not None:
        return from_manifest(sibling)
    if not path.is_file():
        raise MissingInputError(
            f"{path}: no such file; pass a manifest (*.manifest.json) or a "
            "tarball (.tar, .tar.gz, .tar.zst)"
        )
    if is_part_name(path.name):
        raise IntegrityError(
            f"{path}: a part of a split tarball, but its manifest is not beside "
            "it; copy <name>.manifest.json into the same folder"
        )
    return TarballSet([Part(path, None, _sidecar_sha256(path))], sniff_format(path))


def from_manifest(path: Path) -> TarballSet:
    model = read_manifest(path)
    parts = [Part(path.parent / p.file, p.size, p.sha256.lower()) for p in model.parts]
    return TarballSet(parts, model.format, manifest_path=path, manifest=model)


def _sibling_manifest(path: Path) -> Path | None:
    name = manifest_name_for(path.name)
    if name is None:
        return None
    candidate = path.with_name(name)
    if not candidate.is_file():
        return None
    listed = {p.file for p in read_manifest(candidate).parts}
    return candidate if path.name in listed else None


def _sidecar_sha256(path: Path) -> str | None:
    """``<file>.sha256`` as ``sha256sum`` writes it (``<hex>  <name>``) or the bare hex."""
    sidecar = path.with_name(path.name + ".sha256")
    if not sidecar.is_file():
        return None
    words = read_file(sidecar, SIDECAR_LIMIT, "the checksum file", IntegrityError).split()
    if not words or not re.fullmatch(rb"[0-9a-fA-F]{64}", words[0]):
        raise IntegrityError(f"{sidecar}: not a sha256 checksum line ('<hex>  <file>')")
    return words[0].decode().lower()


def sniff_format(path: Path) -> str:
    """By content, not by name: a renamed file still loads."""
    with open(path, "rb") as handle:
        head = handle.read(512)
    if head.startswith(ZSTD_MAGIC):
        return "zst"
    if head.startswith(GZIP_MAGIC):
        return "gz"
    if len(head) >= 262 and head[257:262] == b"ustar":
        return "tar"
    raise IntegrityError(
        f"{path}: neither a tar, gzip nor zstd file; pass a tarball made by "
        "'inv publish' or 'docker save'"
    )
