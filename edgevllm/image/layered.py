"""A ``docker save`` archive written as zstd frames, one run of frames per layer, from the cache.

The published stream is still one zstd stream of one docker-save tar (any zstd reader, ``zstd -dc
| docker load`` included, reads it), but it is cut into frames at member boundaries: small frames
hold tar headers, padding and the metadata files; each layer's data is its own frames, taken as
they are from the layer cache (``layercache``). So a layer is compressed once, ever:

- warm: the image config and every layer are cached → no ``docker save`` at all; the set is the
  cached frames copied out (re-checked against their sha256) between freshly written headers;
- cold: a layer already cached is copied out as above; a new one is compressed while it streams,
  written to the set and to the cache at once, and its sha256 is checked against its diff id
  before the cache keeps it. The layers come from the local engine's layer store when it can be
  read (``layerstore``: no ``docker save``), else from one ``docker save``.

The metadata is written by this module from the config and the layer list, identically in both
cases: ``manifest.json`` (what ``docker load`` reads), ``index.json``, ``oci-layout`` and the OCI
manifest blob (what OCI tools read). Layers are named ``blobs/sha256/<diff id>`` as Docker 25+
saves them; an engine that names them otherwise raises ``UnexpectedSaveLayout`` (the caller falls
back to compressing the plain ``docker save`` stream).
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from dataclasses import dataclass, field
from typing import IO, Callable

import zstandard

from edgevllm.common.archives import open_tar
from edgevllm.common.errors import IntegrityError
from edgevllm.common.streams import ByteReader, ByteWriter, as_binary_io
from edgevllm.image.layercache import CachedLayer, LayerCache
from edgevllm.image.layerstore import LocalLayerStore, StoreUnusable, chain_ids

CHUNK = 1 << 20
BLOB_PREFIX = "blobs/sha256/"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"


class UnexpectedSaveLayout(Exception):
    """``docker save`` did not name the image's layers ``blobs/sha256/<diff id>``."""


@dataclass
class LayeredStats:
    uncompressed: int = 0
    cached_layers: int = 0
    compressed_layers: int = 0
    saved: bool = False  # whether docker save was read
    from_store: bool = False  # whether new layers were read from the local layer store
    layer_sizes: dict[str, int] = field(default_factory=dict)


class FrameSink:
    """Writes the archive: plain bytes are gathered and flushed as one small frame before any
    layer's frames go out; ``uncompressed`` counts the tar's bytes."""

    def __init__(self, out: ByteWriter, level: int):
        self.out, self.uncompressed = out, 0
        self._small = zstandard.ZstdCompressor(level=level, write_checksum=True)
        self._pending = bytearray()

    def add(self, data: bytes) -> None:
        self._pending += data
        self.uncompressed += len(data)

    def flush(self) -> None:
        if self._pending:
            self.out.write(self._small.compress(bytes(self._pending)))
            self._pending.clear()

    def frames(self, uncompressed_size: int) -> ByteWriter:
        """Where a layer's frames go (after the pending bytes have been flushed)."""
        self.flush()
        self.uncompressed += uncompressed_size
        return self.out


def tar_header(name: str, size: int, directory: bool = False) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.uid, info.gid = (0 if directory else size), 0, 0, 0
    info.mode = 0o755 if directory else 0o644
    info.type = tarfile.DIRTYPE if directory else tarfile.REGTYPE
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def padding(size: int) -> bytes:
    return b"\0" * (-size % tarfile.BLOCKSIZE)


def _file(sink: FrameSink, name: str, data: bytes) -> None:
    sink.add(tar_header(name, len(data)) + data + padding(len(data)))


# --- metadata ----------------------------------------------------------------------------------
def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _hex(digest: str) -> str:
    return digest.split(":", 1)[-1]


def normalized_ref(ref: str) -> str:
    """``vllm:x`` → ``docker.io/library/vllm:x``, as containerd names images in index.json."""
    first, _, rest = ref.partition("/")
    if not rest:
        return f"docker.io/library/{ref}"
    if "." in first or ":" in first or first == "localhost":
        return ref
    return f"docker.io/{ref}"


def write_metadata(sink: FrameSink, config: bytes, diff_ids: list[str],
                   layer_sizes: dict[str, int], refs: list[str]) -> None:
    """Config blob, OCI manifest blob, index.json, manifest.json, oci-layout, end of archive."""
    config_digest = _digest(config)
    oci_manifest = json.dumps({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": config_digest, "size": len(config)},
        "layers": [{"mediaType": OCI_LAYER, "digest": d, "size": layer_sizes[d]}
                   for d in diff_ids],
    }, separators=(",", ":")).encode()
    manifest_digest = _digest(oci_manifest)
    entry = {"mediaType": OCI_MANIFEST, "digest": manifest_digest, "size": len(oci_manifest)}
    manifests = [{**entry, "annotations": {"io.containerd.image.name": normalized_ref(ref),
                                           "org.opencontainers.image.ref.name":
                                               ref.rpartition(":")[2]}}
                 for ref in refs] or [entry]
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests}
    docker_manifest = [{"Config": BLOB_PREFIX + _hex(config_digest), "RepoTags": refs or None,
                        "Layers": [BLOB_PREFIX + _hex(d) for d in diff_ids]}]
    _file(sink, BLOB_PREFIX + _hex(config_digest), config)
    _file(sink, BLOB_PREFIX + _hex(manifest_digest), oci_manifest)
    _file(sink, "index.json", json.dumps(index, separators=(",", ":")).encode())
    _file(sink, "manifest.json", json.dumps(docker_manifest, separators=(",", ":")).encode())
    _file(sink, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
    sink.add(b"\0" * (2 * tarfile.BLOCKSIZE))
    sink.flush()


def _directories(sink: FrameSink) -> None:
    sink.add(tar_header("blobs/", 0, directory=True))
    sink.add(tar_header(BLOB_PREFIX, 0, directory=True))


# --- warm: everything from the cache ----------------------------------------------------------
def write_from_cache(sink: FrameSink, cache: LayerCache, config: bytes,
                     layers: dict[str, CachedLayer], diff_ids: list[str], refs: list[str],
                     on_bytes: Callable[[int], None]) -> LayeredStats:
    stats = LayeredStats(layer_sizes={d: layer.size for d, layer in layers.items()})
    _directories(sink)
    for diff_id in sorted(layers):  # docker save's own order: by digest
        layer = layers[diff_id]
        sink.add(tar_header(BLOB_PREFIX + _hex(diff_id), layer.size))
        cache.copy_out(layer, _Counting(sink.frames(layer.size), on_bytes))
        sink.add(padding(layer.size))
        stats.cached_layers += 1
    write_metadata(sink, config, diff_ids, stats.layer_sizes, refs)
    stats.uncompressed = sink.uncompressed
    return stats


class _Counting:
    def __init__(self, out: ByteWriter, on_bytes: Callable[[int], None]):
        self.out, self.on_bytes = out, on_bytes

    def write(self, data) -> int:
        self.out.write(data)
        self.on_bytes(len(data))
        return len(data)


# --- cold: one docker save, new layers compressed as they stream -------------------------------
def write_from_save(sink: FrameSink, cache: LayerCache, save: IO[bytes], image_id: str,
                    diff_ids: list[str], refs: list[str]) -> LayeredStats:
    """``save``: the ``docker save`` stream of exactly this image."""
    stats, config, wanted = LayeredStats(saved=True), None, set(diff_ids)
    _directories(sink)
    with open_tar(save, f"docker save of {image_id}", IntegrityError, bufsize=CHUNK) as tar:
        for member in tar:
            digest = "sha256:" + member.name[len(BLOB_PREFIX):]
            if not member.isfile() or not member.name.startswith(BLOB_PREFIX):
                continue
            if digest == image_id:
                config = _member(tar, member).read()
            elif digest in wanted and digest not in stats.layer_sizes:
                _layer_from_save(sink, cache, tar, member, digest, stats)
    while save.read(CHUNK):  # the end-of-archive padding: docker save must not hit a closed pipe
        pass
    missing = wanted - set(stats.layer_sizes)
    if config is None or _digest(config) != image_id or missing:
        raise UnexpectedSaveLayout(f"docker save did not give the config and layers by digest "
                                   f"({len(missing)} of {len(wanted)} layers missing)")
    cache.put_config(image_id, config)
    write_metadata(sink, config, diff_ids, stats.layer_sizes, refs)
    stats.uncompressed = sink.uncompressed
    return stats


def _layer_from_save(sink: FrameSink, cache: LayerCache, tar: tarfile.TarFile,
                     member: tarfile.TarInfo, diff_id: str, stats: LayeredStats) -> None:
    stats.layer_sizes[diff_id] = member.size
    sink.add(tar_header(BLOB_PREFIX + _hex(diff_id), member.size))
    cached = cache.get(diff_id)
    if cached is not None and cached.size == member.size:
        cache.copy_out(cached, sink.frames(member.size))  # its bytes in the save go unread
        stats.cached_layers += 1
    else:
        source = _member(tar, member)
        if not _compress_layer(sink, cache, diff_id, member.size,
                               iter(lambda: source.read(CHUNK), b"")):
            raise UnexpectedSaveLayout(f"layer {diff_id}: docker save gave other bytes")
        stats.compressed_layers += 1
    sink.add(padding(member.size))


def _member(tar: tarfile.TarFile, member: tarfile.TarInfo) -> ByteReader:
    """A regular file's bytes in the save stream (tarfile gives None for other kinds)."""
    source = tar.extractfile(member)
    if source is None:
        raise UnexpectedSaveLayout(f"{member.name}: not a regular file in docker save")
    return source


def _compress_layer(sink: FrameSink, cache: LayerCache, diff_id: str, size: int,
                    blocks) -> bool:
    """Compress a layer's bytes into the set and the cache; False (nothing cached) when they
    do not hash to ``diff_id``."""
    out = sink.frames(size)
    with cache.entry_writer(diff_id, size) as entry:
        digest = hashlib.sha256()
        compressor = cache.settings.compressor(size)
        tee = as_binary_io(_Tee(out, entry))
        with compressor.stream_writer(tee, size=size, closefd=False) as writer:
            for block in blocks:
                digest.update(block)
                writer.write(block)
        entry.finish(digest.hexdigest())
    return entry.verified


# --- cold, without docker save: the local engine's layer store ---------------------------------
def write_from_store(sink: FrameSink, cache: LayerCache, store: LocalLayerStore, image_id: str,
                     diff_ids: list[str], refs: list[str],
                     on_bytes: Callable[[int], None]) -> LayeredStats:
    """As ``write_from_save``, reading new layers from ``store``; ``StoreUnusable`` when it
    cannot give exactly the image's bytes (nothing wrong is ever cached)."""
    config = store.config(image_id)
    chains: dict[str, str] = {}
    for diff_id, chain_id in zip(diff_ids, chain_ids(diff_ids), strict=True):
        chains.setdefault(diff_id, chain_id)
    stats = LayeredStats(from_store=True)
    _directories(sink)
    for diff_id in sorted(chains):
        cached = cache.get(diff_id)
        size = cached.size if cached else store.tar_size(chains[diff_id])
        stats.layer_sizes[diff_id] = size
        sink.add(tar_header(BLOB_PREFIX + _hex(diff_id), size))
        if cached:
            cache.copy_out(cached, sink.frames(size))
            on_bytes(size)
            stats.cached_layers += 1
        else:
            blocks = _counted(store.tar_blocks(chains[diff_id]), on_bytes)
            if not _compress_layer(sink, cache, diff_id, size, blocks):
                raise StoreUnusable(f"layer {diff_id} read from the layer store has other bytes")
            stats.compressed_layers += 1
        sink.add(padding(size))
    cache.put_config(image_id, config)
    write_metadata(sink, config, diff_ids, stats.layer_sizes, refs)
    stats.uncompressed = sink.uncompressed
    return stats


def _counted(blocks, on_bytes: Callable[[int], None]):
    for block in blocks:
        on_bytes(len(block))
        yield block


class _Tee:
    def __init__(self, *outs: ByteWriter):
        self.outs = outs

    def write(self, data) -> int:
        for out in self.outs:
            out.write(data)
        return len(data)
