"""An image verified layer by layer: known layers from the verify cache, only new ones read.

The image's layers are named by ``docker image inspect`` (``RootFS.Layers``, the diff ids, bottom
first); nothing is exported to learn them. Each layer's record (``verdictcache``: its libraries'
reports, its library paths, whiteouts and opaque folders) comes from the cache when it was read
before, under the same rules; the others are read by the one layer reader (``archive.py``) on the
cheapest road the engine allows:

- ``layer store``: the local default engine's overlay2 store (``image/layerstore.py``): a layer's
  member list from its tar-split headers and only its libraries' files, mapped where they lie
  (``storelayer.py``); with ``EDGEVLLM_VERIFY_HASH_LAYERS=1`` (or a ``keep`` that is no library
  reader's) its whole tar replayed and its sha256 checked against its diff id as it passes (a
  mismatch, or a store that cannot give it, falls back to the next road);
- ``docker save``: the image's stream, every other engine (ssh, contexts, containerd's store);
  a layer already known passes unread (docker 25+ names its layers by diff id).

The records are then stacked (``archive.apply``) in the image's order: the libraries and the
verdict are those of a full scan, overwritten and deleted libraries included.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

from edgevllm.common.errors import NotATarballError
from edgevllm.common.streams import as_binary_io
from edgevllm.verify.archive import Keep, Layer, apply, layer_order, read_image, read_layer
from edgevllm.verify.library import LibraryReport, is_library_name
from edgevllm.verify.streams import ParseStream

ROADS = ("layer store", "docker save")


@dataclass
class Reading:
    """How an image's layers were had: which came from the cache, which were read and how."""

    image: str
    layers: list[str]  # diff ids, bottom first
    cached: list[str] = field(default_factory=list)
    read: dict[str, str] = field(default_factory=dict)  # diff id → road

    def describe(self) -> str:
        roads = sorted(set(self.read.values()))
        how = f" from the {' and '.join(roads)}" if roads else ""
        return (f"layers: {len(self.layers)} in {self.image}, {len(self.cached)} known to the "
                f"verify cache, {len(self.read)} read{how}")

    def to_json(self) -> dict:
        return {"layers": self.layers, "cached": self.cached, "read": self.read}


class NoDiffIds(LookupError):
    """The engine's inspect names no diff ids (not a Docker engine): read the whole stream."""


def diff_ids(inspected: dict, ref: str) -> list[str]:
    layers = (inspected.get("RootFS") or {}).get("Layers")
    if not isinstance(layers, list) or not all(isinstance(d, str) and d.startswith("sha256:")
                                               and len(d) == 71 for d in layers):
        raise NoDiffIds(f"image {ref}: the engine lists no layer diff ids for it")
    return layers


def record_of(layer: Layer) -> Layer:
    """What stacking needs of a layer read in full: its libraries, the library-named paths it
    holds (a non-ELF file there still hides a lower library), its whiteouts and opaque folders."""
    present = {path for path in layer.present if is_library_name(path)}
    return Layer(kept=layer.kept, present=present, whiteouts=layer.whiteouts,
                 opaque=layer.opaque, sha256=layer.sha256)


def scan_layers(engine, ref: str, keep: Keep, cache=None, store: bool = True
                ) -> tuple[list[LibraryReport], Reading]:
    """The image's libraries, stacked from its layers' records; ``cache``: a ``VerdictCache``
    (None: read every layer); ``store``: try the local layer store before ``docker save``."""
    inspected = engine.image_inspect(ref)
    order = diff_ids(inspected, ref)
    reading = Reading(ref, order)
    records: dict[str, Layer] = {}
    for diff_id in dict.fromkeys(order):
        found = cache.get(diff_id) if cache is not None else None
        if found is not None:
            records[diff_id] = found
            reading.cached.append(diff_id)
    missing = [d for d in dict.fromkeys(order) if d not in records]
    if missing and store:
        _from_store(engine, str(inspected.get("Id", "")), order, missing, keep, records, reading)
    missing = [d for d in missing if d not in records]
    if missing:
        _from_save(engine, str(inspected.get("Id") or ref), order, set(missing), keep, records,
                   reading)
    if cache is not None:
        for diff_id in reading.read:
            cache.put(diff_id, records[diff_id])
    files: dict[str, LibraryReport] = {}
    for diff_id in order:
        apply(files, records[diff_id])
    return sorted(files.values(), key=lambda r: r.path), reading


def _from_store(engine, image_id: str, order: list[str], missing: list[str], keep: Keep,
                records: dict[str, Layer], reading: Reading) -> None:
    """Each missing layer from the local layer store (its libraries alone, or its whole tar
    hashed against its diff id); stops at the first the store cannot give exactly (the rest go
    through docker save)."""
    from edgevllm.image.layerstore import LocalLayerStore, StoreUnusable, chain_ids
    from edgevllm.verify.storelayer import hash_layers, read_store_layer

    store = LocalLayerStore.find(engine)
    if store is None:
        return
    chains: dict[str, str] = {}
    for diff_id, chain in zip(order, chain_ids(order), strict=True):
        chains.setdefault(diff_id, chain)
    inspect = None if hash_layers() else getattr(keep, "inspect", None)
    for diff_id in missing:
        label = f"layer {diff_id[7:19]} of image {reading.image}"
        try:
            with ParseStream(label):
                if inspect is not None:
                    layer = read_store_layer(store, chains[diff_id], label, inspect)
                else:
                    blocks = as_binary_io(_Blocks(store.tar_blocks(chains[diff_id])))
                    layer = read_layer(blocks, label, keep, hashed=True)
        except (StoreUnusable, NotATarballError):
            return
        if inspect is None and layer.sha256 != diff_id:
            return
        records[diff_id] = record_of(layer)
        reading.read[diff_id] = "layer store"


def _from_save(engine, image: str, order: list[str], missing: set[str], keep: Keep,
               records: dict[str, Layer], reading: Reading) -> None:
    """The missing layers from one ``docker save`` stream; known layers pass unread."""
    label = f"image {reading.image}"
    wanted = _wanted(set(order) - missing)
    with engine.save_stream([image]) as stream:
        found = read_image(stream, label, keep, hashed=True, wanted=wanted)
    names = layer_order(found, label) or []
    if len(names) != len(order):
        raise NotATarballError(f"{label}: docker save gave {len(names)} layers, the engine lists "
                               f"{len(order)}; save it again")
    for name, diff_id in zip(names, order, strict=True):
        if diff_id not in missing or diff_id in records:
            continue
        layer = found.layers.get(name)
        if layer is None or layer.sha256 != diff_id:
            raise NotATarballError(f"{label}: layer {name} of docker save is not the layer "
                                   f"{diff_id} the engine lists; save it again")
        records[diff_id] = record_of(layer)
        reading.read[diff_id] = "docker save"


def _wanted(known: set[str]) -> Callable[[str], bool]:
    """Skip a layer only when its name is a known diff id (docker 25+ names uncompressed layers
    so); an older layout, or a compressed blob, is read."""
    hexes = {diff_id[7:] for diff_id in known}

    def wanted(name: str) -> bool:
        return not (name.startswith("blobs/sha256/") and name[13:] in hexes)
    return wanted


class _Blocks:
    """A file-like ``read`` over an iterator of byte blocks."""

    def __init__(self, blocks: Iterator[bytes]):
        self.blocks, self.pending = blocks, memoryview(b"")

    def read(self, size: int = -1) -> bytes:
        if size < 0:
            return bytes(self.pending) + b"".join(self.blocks)
        while not self.pending:
            block = next(self.blocks, None)
            if block is None:
                return b""
            self.pending = memoryview(block)
        out, self.pending = self.pending[:size], self.pending[size:]
        return bytes(out)
