"""What one side of ``inv diff`` says about itself, read without ``docker save``.

A side is a local image (``docker image inspect``, ``docker history`` or the layer store for
layer sizes, the lock in its label), a published tarball set (its ``.manifest.json``: labels,
lock and records as ``inv publish`` wrote them) or a lock file. Every kind fills what it knows;
the rest stays empty and the diff says "not recorded" rather than guessing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from edgevllm.common import console, labels
from edgevllm.common.dataload import load_json
from edgevllm.common.errors import ConfigError, EdgeVllmError, MissingInputError
from edgevllm.containers.docker import DockerEngine
from edgevllm.specs.lock import Lock, parse_lock, read_lock

MANIFEST_SUFFIX = ".manifest.json"
RECORD_KEYS = ("mods", "verify", "probe")  # of labels.RECORDS; the lock is read apart
CONFIG_KEYS = ("Env", "Entrypoint", "Cmd", "WorkingDir", "User")


@dataclass
class Layer:
    diff_id: str
    size: int | None = None  # bytes of the layer's tar; None: not recorded


@dataclass
class Facts:
    source: str
    kind: str  # image | tarball | lock
    image_id: str | None = None
    lock: Lock | None = None
    labels: dict[str, str] = field(default_factory=dict)
    config: dict = field(default_factory=dict)  # Env, Entrypoint, Cmd, WorkingDir, User
    layers: list[Layer] | None = None  # None: not recorded (a lock)
    records: dict = field(default_factory=dict)  # mods / verify / probe (parsed JSON)
    repo_digests: list[str] = field(default_factory=list)


_FILE_ENDINGS = (MANIFEST_SUFFIX, ".lock.json", ".lock.yaml", ".lock.yml", ".tar", ".tar.gz",
                 ".tar.zst")


def source_kind(text: str) -> str:
    """``tarball``, ``lock`` or ``image``; a name with a file's ending must be a file."""
    path = Path(text)
    if not path.exists() and text.endswith(_FILE_ENDINGS):
        raise MissingInputError(f"{text}: no such file; give a lock, a published "
                                "<name>.manifest.json or an image reference")
    if path.is_file() and (text.endswith(MANIFEST_SUFFIX) or ".tar" in path.name):
        return "tarball"
    if path.is_file():
        return "lock"
    return "image"


def read_facts(text: str, engine: DockerEngine | None = None) -> Facts:
    kind = source_kind(text)
    if kind == "lock":
        return Facts(text, "lock", lock=read_lock(text))
    if kind == "tarball":
        return facts_from_manifest(text)
    return facts_from_image(engine or DockerEngine(), text)


def lock_from_label(text: str | None, origin: str) -> Lock | None:
    if not text:
        return None
    try:
        return parse_lock(text, origin)
    except EdgeVllmError as exc:
        console.warn(f"{exc}; its lock is left out")
        return None


def _records_from_labels(found: dict[str, str], origin: str) -> dict:
    records = {}
    for key in RECORD_KEYS:
        record = labels.label_record(found, key)
        if record is not None:
            records[key] = record
        elif found.get(labels.RECORDS[key][0]):
            console.warn(f"label {labels.RECORDS[key][0]} of {origin} is not JSON; left out")
    return records


def facts_from_image(engine: DockerEngine, ref: str) -> Facts:
    inspect = engine.image_inspect(ref)
    config = inspect.get("Config") or {}
    found = dict(config.get("Labels") or {})
    diff_ids = list((inspect.get("RootFS") or {}).get("Layers") or [])
    return Facts(
        ref, "image", image_id=inspect["Id"],
        lock=lock_from_label(found.get(labels.LOCK), f"label {labels.LOCK} of {ref}"),
        labels=found, config={k: config.get(k) for k in CONFIG_KEYS},
        layers=layer_sizes(engine, ref, inspect["Id"], diff_ids),
        records=_records_from_labels(found, ref),
        repo_digests=list(inspect.get("RepoDigests") or []))


def layer_sizes(engine: DockerEngine, ref: str, image_id: str, diff_ids: list[str]
                ) -> list[Layer]:
    """Each layer's size (its files' bytes, as ``docker history`` counts them). History has a
    row per build step, layers or not: the image config's ``empty_layer`` flags (read from the
    local layer store when it is readable) say which rows are layers; without them, the rows of
    non-zero size are taken when they are exactly as many as the layers, else none is recorded."""
    proc = engine.run_cli(["history", "--no-trunc", "--human=false", "--format", "{{.Size}}",
                           ref], timeout=60)
    rows = [line.strip() for line in proc.stdout.decode(errors="replace").splitlines()][::-1]
    if proc.returncode != 0 or not all(row.isdigit() for row in rows):
        return [Layer(d) for d in diff_ids]
    sizes = [int(row) for row in rows]
    steps = _history_steps(engine, image_id)
    if steps is not None and len(steps) == len(sizes):
        sizes = [size for size, empty in zip(sizes, steps, strict=True) if not empty]
    else:
        sizes = [size for size in sizes if size > 0]
    if len(sizes) != len(diff_ids):
        return [Layer(d) for d in diff_ids]
    return [Layer(d, s) for d, s in zip(diff_ids, sizes, strict=True)]


def _history_steps(engine: DockerEngine, image_id: str) -> list[bool] | None:
    """``empty_layer`` of each history entry in the image config, oldest first (None: the
    config is not readable here)."""
    from edgevllm.image.layerstore import LocalLayerStore, StoreUnusable

    store = LocalLayerStore.find(engine)
    if store is None:
        return None
    try:
        config = load_json(store.config(image_id), image_id, ConfigError)
    except (StoreUnusable, ConfigError):
        return None
    history = config.get("history") if isinstance(config, dict) else None
    if not isinstance(history, list):
        return None
    return [isinstance(step, dict) and bool(step.get("empty_layer")) for step in history]


def facts_from_manifest(text: str) -> Facts:
    from edgevllm.image.tarball import open_tarball

    tarset = open_tarball(text)
    manifest = tarset.manifest
    if manifest is None:
        raise ConfigError(f"{text}: a bare tarball has no manifest to read; give the "
                          ".manifest.json that inv publish wrote beside it")
    image = manifest.image or {}
    lock = None
    if isinstance(manifest.lock, dict):
        lock = lock_from_label(json.dumps(manifest.lock), f"{text}: field 'lock'")
    diff_ids, config = image.get("layers"), image.get("config")
    digests = image.get("repo_digests")
    return Facts(
        text, "tarball", image_id=_text(image.get("id")), lock=lock,
        labels={str(k): _text(v) or "" for k, v in manifest.labels.items()},
        config=dict(config) if isinstance(config, dict) else {},
        layers=[Layer(_text(d) or "") for d in diff_ids] if isinstance(diff_ids, list) else None,
        records={k: v for k in RECORD_KEYS if (v := getattr(manifest, k)) is not None},
        repo_digests=[_text(d) or "" for d in digests] if isinstance(digests, list) else [])


def _text(value: object) -> str | None:
    """A field another wrote as text: as it is, or its JSON when it is something else."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, default=str)
