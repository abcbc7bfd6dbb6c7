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
from edgevllm.common.errors import EdgeVllmError
from edgevllm.containers.docker import DockerEngine
from edgevllm.specs.lock import Lock, parse_lock, read_lock

MANIFEST_SUFFIX = ".manifest.json"
RECORD_LABELS = {"mods": labels.MODS, "verify": labels.VERIFY, "probe": labels.PROBE}
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


def source_kind(text: str) -> str:
    path = Path(text)
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
    for key, label in RECORD_LABELS.items():
        if label in found:
            try:
                records[key] = json.loads(found[label])
            except ValueError:
                console.warn(f"label {label} of {origin} is not JSON; left out")
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
        layers=layer_sizes(engine, ref, diff_ids),
        records=_records_from_labels(found, ref),
        repo_digests=list(inspect.get("RepoDigests") or []))


def layer_sizes(engine: DockerEngine, ref: str, diff_ids: list[str]) -> list[Layer]:
    """Each layer's tar size: from the local layer store's tar headers when it is readable,
    else from ``docker history`` (its non-empty steps, oldest first, one per layer)."""
    from edgevllm.image.layerstore import LocalLayerStore, StoreUnusable, chain_ids

    store = LocalLayerStore.find(engine)
    if store is not None:
        try:
            return [Layer(d, store.tar_size(c)) for d, c in zip(diff_ids, chain_ids(diff_ids),
                                                                strict=True)]
        except StoreUnusable:
            pass
    return [Layer(d, s) for d, s in zip(diff_ids, _history_sizes(engine, ref, len(diff_ids)),
                                        strict=True)]


def _history_sizes(engine: DockerEngine, ref: str, count: int) -> list[int | None]:
    proc = engine.run_cli(["history", "--no-trunc", "--human=false", "--format",
                           "{{.Size}}|{{.CreatedBy}}", ref], timeout=60)
    rows = [line.split("|", 1) for line in proc.stdout.decode(errors="replace").splitlines()]
    sizes = [int(size) for size, *_ in reversed(rows) if size.isdigit() and int(size) > 0]
    if proc.returncode != 0 or len(sizes) != count:
        return [None] * count  # steps that changed nothing cannot be told apart: not recorded
    return list(sizes)


def facts_from_manifest(text: str) -> Facts:
    from edgevllm.image.tarball import open_tarball

    tarset = open_tarball(text)
    manifest = tarset.manifest
    if manifest is None:
        raise EdgeVllmError(f"{text}: a bare tarball has no manifest to read; give the "
                            ".manifest.json that inv publish wrote beside it")
    image = manifest.image or {}
    lock = None
    if isinstance(manifest.lock, dict):
        lock = lock_from_label(json.dumps(manifest.lock), f"{text}: field 'lock'")
    diff_ids = image.get("layers")
    return Facts(
        text, "tarball", image_id=image.get("id"), lock=lock, labels=dict(manifest.labels),
        config=dict(image.get("config") or {}),
        layers=[Layer(d) for d in diff_ids] if isinstance(diff_ids, list) else None,
        records={k: v for k in RECORD_LABELS if (v := getattr(manifest, k)) is not None},
        repo_digests=list(image.get("repo_digests") or []))
