"""Image layers compressed once and kept by content: the cache behind ``inv publish``.

A layer is keyed by its diff id (the sha256 of its uncompressed tar, as the image config lists
it), so publishing the same image again, or another image that shares its base layers, costs no
compression for those layers. Entries are kept per compression setting:

    <root>/<setting>/<hex>.zst    complete zstd frames; decompressed, exactly the layer's tar
    <root>/<setting>/<hex>.json   {diff_id, size, compressed_size, compressed_sha256}
    <root>/configs/<hex>.json     an image config, byte for byte (its sha256 is the image id)

An entry exists only once its ``.json`` does: the blob is written under a temporary name, renamed,
and the record is written (atomically) last, so a crash or Ctrl-C leaves at most a temporary file,
which is removed on the way out (or swept by ``prune``). Readers re-check the compressed sha256
while copying an entry out; a mismatch evicts it (``CorruptEntry``). ``prune`` keeps the cache
under a size (``EDGEVLLM_LAYER_CACHE_MAX``, default 32 GiB), dropping least recently used entries.

An entry or config is used only when its files and their folders up to the root are the user's
and not writable by group or others (``common/trust``: else one warning line, the layer is
compressed afresh and nothing is written there); folders made here are 0700.

Root: ``EDGEVLLM_LAYER_CACHE``, else ``<edgevllm cache>/layers``. Nothing here talks to Docker.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterator

import zstandard

from edgevllm.common.dataload import load_json
from edgevllm.common.errors import ConfigError
from edgevllm.common.fsutil import StagedFile, atomic_write_bytes, atomic_write_json
from edgevllm.common.paths import cache_dir
from edgevllm.common.streams import ByteWriter
from edgevllm.common.trust import private_dir, seal, trusted_path

DEFAULT_MAX_BYTES = 32 << 30
COPY_CHUNK = 8 << 20
STALE_TEMP_SECONDS = 24 * 3600
_ZSTD_BLOCK = 128 << 10  # ZSTD_BLOCKSIZE_MAX: the decoder's input and output slack


@dataclass(frozen=True)
class ZstdSettings:
    """How layers are compressed: level, long-distance matching window, worker threads.

    ``window_log`` 27 (128 MiB) is the largest window every zstd decoder accepts without being
    told (the zstd CLI's and libzstd's default limit), so ``zstd -dc`` still reads the output.
    0 turns long-distance matching off (the level's own window, 2 MiB at level 3).
    """

    level: int = 3
    window_log: int = 27
    threads: int = -1

    @property
    def long(self) -> bool:
        return self.window_log > 0

    def key(self) -> str:
        return f"zstd-{self.level}" + (f"-long{self.window_log}" if self.long else "")

    def effective_window_log(self) -> int:
        if self.long:
            return self.window_log
        return zstandard.ZstdCompressionParameters.from_level(self.level).window_log

    def compressor(self, size: int = -1) -> zstandard.ZstdCompressor:
        """A compressor for one layer; ``size`` is written into the frame header when known."""
        extra = {"window_log": self.window_log, "enable_ldm": 1} if self.long else {}
        params = zstandard.ZstdCompressionParameters.from_level(
            self.level, source_size=max(size, 0), write_checksum=1, threads=self.threads,
            **extra)
        return zstandard.ZstdCompressor(compression_params=params)

    @property
    def decompression_memory(self) -> int:
        """Upper bound of the memory one decoder needs: its window plus block buffers."""
        return (1 << self.effective_window_log()) + 2 * _ZSTD_BLOCK + \
            zstandard.estimate_decompression_context_size()

    def manifest(self) -> dict:
        return {"codec": "zstd", "level": self.level, "threads": self.threads,
                "window_log": self.effective_window_log(), "long_distance_matching": self.long,
                "decompression_memory": self.decompression_memory, "layout": "frames-per-layer"}


@dataclass(frozen=True)
class CachedLayer:
    diff_id: str
    size: int
    compressed_size: int
    compressed_sha256: str
    blob: Path


class CorruptEntry(Exception):
    """A cached blob does not match its record; the entry has been removed."""

    def __init__(self, diff_id: str):
        super().__init__(f"layer cache entry {diff_id} was corrupt and has been removed")
        self.diff_id = diff_id


def default_root() -> Path:
    env = os.environ.get("EDGEVLLM_LAYER_CACHE")
    return Path(env) if env else cache_dir("layers")


def max_bytes_from_env() -> int:
    text = os.environ.get("EDGEVLLM_LAYER_CACHE_MAX", "")
    return int(text) if text.isdigit() else DEFAULT_MAX_BYTES


def _hex(digest: str) -> str:
    return digest.split(":", 1)[-1]


def _sizes_and_sha(layer: CachedLayer) -> bool:
    """Whether a record's fields are what an entry holds: byte counts and a sha256's hex."""
    sizes = (layer.size, layer.compressed_size)
    return all(type(n) is int and n >= 0 for n in sizes) and \
        isinstance(layer.compressed_sha256, str) and len(layer.compressed_sha256) == 64


class LayerCache:
    """The content-addressed store described in the module docstring."""

    def __init__(self, root: Path, settings: ZstdSettings):
        self.root, self.settings = Path(root), settings
        self.layers_dir = self.root / settings.key()
        self.configs_dir = self.root / "configs"
        self.used: set[Path] = set()  # entries this run relies on: never pruned by it

    # -- layers ---------------------------------------------------------------------------------
    def get(self, diff_id: str) -> CachedLayer | None:
        record_path = self.layers_dir / f"{_hex(diff_id)}.json"
        blob = record_path.with_suffix(".zst")
        if not (self.trusted(record_path) and self.trusted(blob)):
            return None  # others could have written it: the layer is compressed again
        try:
            record = load_json(record_path.read_bytes(), str(record_path), ConfigError)
            layer = CachedLayer(diff_id, record["size"], record["compressed_size"],
                                record["compressed_sha256"], blob)
            if blob.stat().st_size != layer.compressed_size or record["diff_id"] != diff_id \
                    or not _sizes_and_sha(layer):
                return None
        except (OSError, ConfigError, KeyError, TypeError):
            return None  # a record damaged or of another shape: a miss, never a traceback
        self.used.add(record_path)
        with contextlib.suppress(OSError):
            os.utime(record_path)  # the LRU clock
        return layer

    def trusted(self, path: Path) -> bool:
        return trusted_path(path, self.root, "layer cache")

    def writable(self, folder: Path) -> bool:
        """``folder`` made (0700) where missing; False where it is not one to write into."""
        try:
            private_dir(folder)
        except OSError:
            return False
        return self.trusted(folder)

    def copy_out(self, layer: CachedLayer, sink: ByteWriter) -> None:
        """Write the entry's frames to ``sink``, re-checking their sha256 as they pass."""
        digest, copied = hashlib.sha256(), 0
        with open(layer.blob, "rb") as handle:
            while block := handle.read(COPY_CHUNK):
                digest.update(block)
                sink.write(block)
                copied += len(block)
        if copied != layer.compressed_size or digest.hexdigest() != layer.compressed_sha256:
            self.evict(layer.diff_id)
            raise CorruptEntry(layer.diff_id)

    def evict(self, diff_id: str) -> None:
        for suffix in (".json", ".zst"):
            with contextlib.suppress(FileNotFoundError):
                (self.layers_dir / f"{_hex(diff_id)}{suffix}").unlink()

    @contextlib.contextmanager
    def entry_writer(self, diff_id: str, size: int) -> Iterator["EntryWriter"]:
        """A file for one layer's frames; it becomes an entry only if the block completes and
        ``EntryWriter.finish`` was given the matching uncompressed sha256. In a folder that is
        not the user's nothing is written (the frames are only counted)."""
        if not self.writable(self.layers_dir):
            writer = EntryWriter(self, diff_id, size, None, None)
            yield writer
            return
        with StagedFile(self.layers_dir / f"{_hex(diff_id)}.zst") as staged:
            with staged.open("wb") as handle:
                writer = EntryWriter(self, diff_id, size, staged, handle)
                yield writer
            writer.commit()

    # -- configs --------------------------------------------------------------------------------
    def config(self, image_id: str) -> bytes | None:
        path = self.configs_dir / f"{_hex(image_id)}.json"
        if not self.trusted(path):
            return None
        try:
            data = path.read_bytes()
        except OSError:
            return None
        if "sha256:" + hashlib.sha256(data).hexdigest() != image_id:
            path.unlink(missing_ok=True)
            return None
        self.used.add(path)
        with contextlib.suppress(OSError):
            os.utime(path)
        return data

    def put_config(self, image_id: str, data: bytes) -> None:
        if self.writable(self.configs_dir):
            seal(atomic_write_bytes(self.configs_dir / f"{_hex(image_id)}.json", data))

    # -- size -----------------------------------------------------------------------------------
    def prune(self, max_bytes: int) -> int:
        """Drop least recently used entries (of every setting) until the cache fits; returns the
        bytes freed. Entries this run used are kept; stale temporaries are swept."""
        entries, total, now = [], 0, time.time()
        for record in self.root.glob("*/*.json"):
            blob = record.with_suffix(".zst")
            with contextlib.suppress(OSError):
                size = record.stat().st_size + (blob.stat().st_size if blob.exists() else 0)
                entries.append((record.stat().st_mtime, record, blob, size))
                total += size
        for temp in self.root.glob("*/.*.tmp-*"):
            with contextlib.suppress(OSError):
                if now - temp.stat().st_mtime > STALE_TEMP_SECONDS:
                    temp.unlink()
        freed = 0
        for _, record, blob, size in sorted(entries, key=lambda e: e[0]):
            if total - freed <= max_bytes:
                break
            if record in self.used:
                continue
            for path in (record, blob):
                path.unlink(missing_ok=True)
            freed += size
        return freed


class EntryWriter:
    """Receives one layer's compressed frames (``write``) and keeps their size and sha256."""

    def __init__(self, cache: LayerCache, diff_id: str, size: int, staged: StagedFile | None,
                 handle: IO[bytes] | None):
        self.cache, self.diff_id, self.size, self.staged = cache, diff_id, size, staged
        self.handle = handle
        self.compressed_size = 0
        self._digest = hashlib.sha256()
        self.verified = False

    def write(self, data) -> int:
        if self.handle is not None:  # None: the cache's folder is not the user's
            self.handle.write(data)
        self._digest.update(data)
        self.compressed_size += len(data)
        return len(data)

    def finish(self, uncompressed_sha256: str) -> None:
        """The layer's own sha256, computed while it was read: it must be the diff id."""
        self.verified = "sha256:" + uncompressed_sha256 == self.diff_id

    def commit(self) -> None:
        if not self.verified or self.staged is None:
            return  # not the bytes the diff id names (never cached under it), or not our folder
        blob = self.staged.commit()
        seal(blob)
        record = {"diff_id": self.diff_id, "size": self.size,
                  "compressed_size": self.compressed_size,
                  "compressed_sha256": self._digest.hexdigest()}
        path = atomic_write_json(blob.with_suffix(".json"), record)
        seal(path)
        self.cache.used.add(path)
