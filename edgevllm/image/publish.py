"""Publish an image as a verified, compressed tarball set, and load one back.

``publish`` (zstd, the default): the set is one zstd stream of one ``docker save`` tar, cut into
frames per layer (``layered``): each layer is compressed once, with long-distance matching (a
128 MiB window by default), and kept in a content-addressed cache (``layercache``) by its diff id.
A republish, or an image sharing layers with one published before, reuses those frames: when the
config and every layer are cached, ``docker save`` is not run at all. ``prime_layer_cache`` fills
the cache right after a build, so that the first publish is already a warm one.
``--no-layer-cache`` (and ``--format gz``, for ``docker load <`` users) compress the plain
``docker save`` stream instead. Either way the output goes into one or more part files, hashed
while written, so no uncompressed copy ever touches the disk. Parts are written under temporary
names and renamed only when the whole set is complete, then ``<name>.manifest.json`` records what
the set contains, including the zstd window and the memory a decoder needs.

``load``: every part is checked (presence, size, sha256), and the archive whole (exactly one image,
every member listed and hashed, the manifest's id and tags: image/setcheck.py), before a single
byte reaches the engine,
then the parts are decompressed straight into ``docker load``; the loaded image id must be the
one the manifest names.
"""

from __future__ import annotations

import datetime as _dt
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from edgevllm import __version__
from edgevllm.common import console
from edgevllm.common.errors import (
    ConfigError,
    PublishError,
)
from edgevllm.common.fsutil import atomic_write_json
from edgevllm.common.streams import as_binary_io
from edgevllm.containers.docker import DockerEngine
from edgevllm.image.layercache import (
    CorruptEntry,
    LayerCache,
    ZstdSettings,
    default_root,
    max_bytes_from_env,
)
from edgevllm.image.layered import (
    FrameSink,
    LayeredStats,
    UnexpectedSaveLayout,
    write_from_cache,
    write_from_save,
    write_from_store,
)
from edgevllm.image.layerstore import LocalLayerStore, StoreUnusable
from edgevllm.image.parts import (
    COMPRESSORS,
    DEFAULT_LEVEL,
    CountingReader,
    PartWriter,
    glob_escape,
)
from edgevllm.image.progress import ByteProgress, human
from edgevllm.image.records import read_records
from edgevllm.image.tarmanifest import (
    FORMAT_SUFFIX,
    MANIFEST_SUFFIX,
    SCHEMA_VERSION,
    check_stream_length,
    part_glob,
)

DEFAULT_WINDOW_LOG = 27  # zstd --long=27: 128 MiB, the largest window decoders take by default


# --- small helpers -----------------------------------------------------------------------------
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*\Z", re.IGNORECASE)


def parse_size(text: str | int | None) -> int | None:
    """``1900M``, ``2G``, ``2GiB``, ``500000000`` → bytes (powers of 1024 for K/M/G/T)."""
    if text in (None, "", 0, "0"):
        return None
    if isinstance(text, int):
        return text
    match = _SIZE_RE.match(str(text))
    if not match:
        raise ConfigError(f"--part-size '{text}': expected a size such as 1900M, 2G or 2GiB")
    number, unit = float(match.group(1)), match.group(2).lower()
    size = int(number * 1024 ** "_kmgt".index(unit)) if unit else int(number)
    if size < 1 << 20:
        raise ConfigError(f"--part-size '{text}': parts must be at least 1M")
    return size


def default_name(ref: str) -> str:
    """``ghcr.io/x/vllm:spark-1`` → ``vllm_spark-1``: file-name safe, readable."""
    ref = ref.split("@")[0]
    repo, _, tag = ref.rpartition(":") if ":" in ref.split("/")[-1] else (ref, "", "")
    base = repo.split("/")[-1] + (f"_{tag}" if tag else "")
    return re.sub(r"[^A-Za-z0-9._-]+", "_", base).strip("._-") or "image"


def _check_name(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise ConfigError(f"--name '{name}': use letters, digits, '.', '_' and '-' only")
    return name


def _now() -> str:
    now = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0)
    return now.isoformat().replace("+00:00", "Z")


def image_summary(inspect: dict, saved_tags: list[str]) -> dict:
    platform = "/".join(
        p for p in (inspect.get("Os"), inspect.get("Architecture"), inspect.get("Variant")) if p
    )
    return {
        "id": inspect["Id"],
        "repo_tags": saved_tags,
        "repo_digests": list(inspect.get("RepoDigests") or []),
        "platform": platform,
        "size": int(inspect.get("Size") or 0),
        "created": inspect.get("Created"),
        # What inv diff compares without the parts: the run config and the layer list.
        "config": {k: (inspect.get("Config") or {}).get(k)
                   for k in ("Env", "Entrypoint", "Cmd", "WorkingDir", "User")},
        "layers": list((inspect.get("RootFS") or {}).get("Layers") or []),
    }


def _saved_refs(ref: str, inspect: dict) -> list[str]:
    """The ref as given when it is a tag; an id or digest saves every tag the image has."""
    tags = list(inspect.get("RepoTags") or [])
    if ref in tags:
        return [ref]
    if ":" in ref.split("/")[-1] and "@" not in ref and not ref.startswith("sha256:"):
        return [ref]
    return tags or [inspect["Id"]]


# --- publish -----------------------------------------------------------------------------------
@dataclass
class PublishOptions:
    image: str
    out_dir: Path
    name: str | None = None
    format: str = "zst"
    level: int | None = None
    part_size: int | None = None
    threads: int = -1  # -1: one per CPU
    force: bool = False
    long: int = DEFAULT_WINDOW_LOG  # zstd long-distance window, as a power of two; 0: off
    use_layer_cache: bool = True  # zst only: frames per layer, compressed once (see module doc)
    read_layer_store: bool = True  # new layers from the local engine's store when readable
    layer_cache: Path | None = None  # None: EDGEVLLM_LAYER_CACHE, else <edgevllm cache>/layers

    def settings(self) -> ZstdSettings:
        level = self.level if self.level is not None else DEFAULT_LEVEL[self.format]
        return ZstdSettings(level, self.long if self.format == "zst" else 0, self.threads)


@dataclass
class PublishResult:
    manifest_path: Path
    manifest: dict
    part_paths: list[Path] = field(default_factory=list)
    seconds: float = 0.0
    layers: LayeredStats | None = None  # None: the plain docker-save stream was compressed


def _check_options(options: PublishOptions) -> None:
    if options.format not in COMPRESSORS:
        raise ConfigError(f"--format '{options.format}': use zst or gz")
    if options.long and not 10 <= options.long <= 31:
        raise ConfigError(
            f"--long {options.long}: use a window log from 10 to 31 "
            f"(27 = 128 MiB, the default), or 0 to turn it off"
        )


def publish(engine: DockerEngine, options: PublishOptions) -> PublishResult:
    """Save, compress and checksum ``options.image`` into ``options.out_dir``; see module doc."""
    _check_options(options)
    inspect = engine.image_inspect(options.image)
    name = _check_name(options.name or default_name(options.image))
    out_dir = Path(options.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    _refuse_existing(out_dir, name, options.force)
    _warn_low_disk(out_dir, int(inspect.get("Size") or 0), options)
    labels = (inspect.get("Config") or {}).get("Labels") or {}
    records = read_records(engine, options.image, labels)
    refs = _saved_refs(options.image, inspect)
    settings = options.settings()
    suffix = FORMAT_SUFFIX[options.format]

    writer = PartWriter(out_dir, name, options.part_size)
    start = time.monotonic()
    try:
        uncompressed, stats = _write_set(engine, options, settings, refs, inspect, writer)
        check_stream_length(uncompressed, f"publish {options.image}")
        writer.finish()
        manifest = {
            "schema_version": SCHEMA_VERSION,
            "name": name,
            "format": options.format,
            "compression": _compression_record(options, settings),
            "parts": [
                {"file": final, "size": p.size, "sha256": p.sha256}
                for p, final in zip(writer.parts, writer.final_names(suffix), strict=True)
            ],
            "total_size": sum(p.size for p in writer.parts),
            "uncompressed_size": uncompressed,
            "image": image_summary(inspect, _tags(refs)),
            "labels": labels,
            **records,
            "tool_version": __version__,
            "created": _now(),
        }
        finals = writer.commit(suffix)
        manifest_path = atomic_write_json(out_dir / f"{name}{MANIFEST_SUFFIX}", manifest)
    except BaseException:
        writer.discard()
        raise
    _remove_stale_parts(out_dir, name, suffix, set(finals))
    return PublishResult(manifest_path, manifest, finals, time.monotonic() - start, stats)


def _tags(refs: list[str]) -> list[str]:
    return [r for r in refs if not r.startswith("sha256:")]


def _compression_record(options: PublishOptions, settings: ZstdSettings) -> dict:
    if options.format == "gz":
        return {"codec": "gzip", "level": settings.level, "threads": settings.threads}
    record = settings.manifest()
    if not options.use_layer_cache:
        record["layout"] = "single-stream"
    return record


def _write_set(
    engine: DockerEngine,
    options: PublishOptions,
    settings: ZstdSettings,
    refs: list[str],
    inspect: dict,
    writer: PartWriter,
) -> tuple[int, LayeredStats | None]:
    """The compressed stream into ``writer``: per-layer frames from the cache where possible."""
    if options.format != "zst" or not options.use_layer_cache:
        return _stream_save(engine, refs, writer, options, settings, inspect), None
    cache = LayerCache(options.layer_cache or default_root(), settings)
    try:
        try:
            stats = write_layered(
                engine, cache, refs, inspect, writer, options.image, options.read_layer_store
            )
        except CorruptEntry as exc:  # already evicted: this time the layer is compressed afresh
            console.warn(f"{exc}; publishing again")
            writer.reset()
            stats = write_layered(
                engine, cache, refs, inspect, writer, options.image, options.read_layer_store
            )
    except UnexpectedSaveLayout as exc:
        console.warn(f"{exc}; compressing the plain docker save stream instead")
        writer.reset()
        return _stream_save(engine, refs, writer, options, settings, inspect), None
    cache.prune(max_bytes_from_env())
    return stats.uncompressed, stats


def write_layered(
    engine: DockerEngine,
    cache: LayerCache,
    refs: list[str],
    inspect: dict,
    out: "PartWriter | _Discard",
    label: str,
    read_store: bool = True,
) -> LayeredStats:
    """The per-layer frame stream of an image: from the cache alone when it holds the config
    and every layer, else new layers from the local layer store (when readable) or from one
    ``docker save``; new layers are cached on the way."""
    image_id = inspect["Id"]
    diff_ids = list((inspect.get("RootFS") or {}).get("Layers") or [])
    config = cache.config(image_id)
    found = {diff_id: cache.get(diff_id) for diff_id in set(diff_ids)}
    layers = {diff_id: layer for diff_id, layer in found.items() if layer is not None}
    if config is not None and len(layers) == len(found):
        total = sum(layer.compressed_size for layer in layers.values())
        with ByteProgress(f"publish {label} (cached layers)", total) as progress:
            return write_from_cache(
                FrameSink(out, cache.settings.level),
                cache,
                config,
                layers,
                diff_ids,
                _tags(refs),
                progress,
            )
    image_size = int(inspect.get("Size") or 0) or None
    store = LocalLayerStore.find(engine) if read_store else None
    if store is not None:
        try:
            with ByteProgress(f"publish {label}", image_size) as progress:
                return write_from_store(
                    FrameSink(out, cache.settings.level),
                    cache,
                    store,
                    image_id,
                    diff_ids,
                    _tags(refs),
                    progress,
                )
        except StoreUnusable as exc:
            console.warn(f"reading the layer store: {exc}; using docker save instead")
            out.reset()
    sink = FrameSink(out, cache.settings.level)
    with ByteProgress(f"publish {label}", image_size) as progress:
        with engine.save_stream(refs) as stream:
            counted = as_binary_io(CountingReader(stream, progress))
            return write_from_save(sink, cache, counted, image_id, diff_ids, _tags(refs))


class _Discard:
    def write(self, data) -> int:
        return len(data)

    def reset(self) -> None:
        pass


def prime_layer_cache(
    engine: DockerEngine, image: str, settings: ZstdSettings | None = None, root: Path | None = None
) -> LayeredStats:
    """Compress and cache ``image``'s layers now (e.g. right after a build), so that its
    ``inv publish`` only assembles cached frames. Nothing is written outside the cache."""
    inspect = engine.image_inspect(image)
    cache = LayerCache(root or default_root(), settings or ZstdSettings())
    diff_ids = set((inspect.get("RootFS") or {}).get("Layers") or [])
    if cache.config(inspect["Id"]) is not None and all(cache.get(d) for d in diff_ids):
        return LayeredStats(cached_layers=len(diff_ids))
    stats = write_layered(engine, cache, _saved_refs(image, inspect), inspect, _Discard(), image)
    cache.prune(max_bytes_from_env())
    return stats


def _stream_save(
    engine: DockerEngine,
    refs: list[str],
    writer: PartWriter,
    options: PublishOptions,
    settings: ZstdSettings,
    inspect: dict,
) -> int:
    compress = COMPRESSORS[options.format]
    total = int(inspect.get("Size") or 0) or None
    with ByteProgress(f"publish {options.image}", total) as progress:
        with engine.save_stream(refs) as stream:
            reader = CountingReader(stream, progress)
            compress(reader, writer, settings)
    return reader.count


def _warn_low_disk(out_dir: Path, image_size: int, options: PublishOptions) -> None:
    # Real images compress to roughly 40-60 %; below that much free space the run will likely
    # fail. A cold publish into a cache on the same disk writes the compressed bytes twice.
    free = shutil.disk_usage(out_dir).free
    twice = False
    if options.format == "zst" and options.use_layer_cache:
        cache = options.layer_cache or default_root()
        twice = cache.exists() and cache.stat().st_dev == out_dir.stat().st_dev
    if free < image_size * (1.2 if twice else 0.6):
        console.warn(
            f"only {human(free)} free under {out_dir} for a {human(image_size)} image; "
            "the compressed output" + (" and the layer cache" if twice else "") + " may not fit"
        )


def _existing_outputs(out_dir: Path, name: str) -> list[Path]:
    names = [f"{name}{MANIFEST_SUFFIX}"] + [f"{name}{s}" for s in FORMAT_SUFFIX.values()]
    found = [out_dir / n for n in names if (out_dir / n).exists()]
    for suffix in FORMAT_SUFFIX.values():
        found += sorted(out_dir.glob(part_glob(f"{glob_escape(name)}{suffix}")))
    return found


def _refuse_existing(out_dir: Path, name: str, force: bool) -> None:
    existing = _existing_outputs(out_dir, name)
    if existing and not force:
        raise PublishError(
            f"{existing[0]} already exists: pass --force to replace the set, or "
            "--name to publish under another name"
        )


def _remove_stale_parts(out_dir: Path, name: str, suffix: str, keep: set) -> None:
    """With --force, parts of an older set under the same name (e.g. more parts) go away."""
    for path in _existing_outputs(out_dir, name):
        if path not in keep and not path.name.endswith(MANIFEST_SUFFIX):
            path.unlink()
