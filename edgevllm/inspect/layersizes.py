"""Bytes per layer of a built image, and the bytes a later layer shadows.

A file written in layer N and overwritten, deleted (a whiteout) or hidden (an opaque directory)
in a later layer still ships in layer N: those are its shadowed bytes, carried by every pull and
publish for nothing (e.g. a release's vLLM reinstalled over by a tree's). The files and sizes
come from the local engine's layer store (``image/layerstore.py``: the tar headers only, no file
is read) where it is usable, else from one ``docker save`` read with ``verify/archive.py``.

A target's ``size_budget_gb`` fails the build when the image's layers add up to more
(``SizeBudgetError``, exit code of the build class), naming the largest layers.
"""

from __future__ import annotations

import bisect
from dataclasses import asdict, dataclass, field
from typing import IO

from edgevllm.common.dataload import load_json
from edgevllm.common.errors import BuildError, SizeBudgetError
from edgevllm.containers.docker import DockerEngine
from edgevllm.verify.archive import entry_kind

GB = 1e9


@dataclass
class LayerFiles:
    """One layer's members: regular files with their sizes, and what it deletes."""

    step: str = ""                                      # the build step (image history)
    files: dict[str, int] = field(default_factory=dict)
    whiteouts: list[str] = field(default_factory=list)  # a path, and everything under it
    opaque: list[str] = field(default_factory=list)     # a folder whose lower contents go

    def add(self, name: str, size: int, is_dir: bool) -> None:
        kind, path = entry_kind(name)
        if kind == "opaque":
            self.opaque.append(path)
        elif kind == "whiteout":
            self.whiteouts.append(path)
        elif not is_dir:
            self.files[path] = size


@dataclass
class LayerSize:
    step: str
    bytes: int
    files: int
    shadowed_bytes: int = 0   # of this layer's bytes, those a later layer overwrites or deletes


def _drop(live: dict[str, tuple[int, int]], keys: list[str], gone: str, shadowed: list[int],
          keep_self: bool = False) -> None:
    """Remove ``gone`` (unless ``keep_self``: an opaque folder) and everything under it from
    ``live``, counting what each layer loses; "" is the root."""
    under = keys if not gone else keys[bisect.bisect_left(keys, gone + "/"):
                                       bisect.bisect_left(keys, gone + "0")]
    for path in ([] if keep_self else [gone]) + under:
        if path in live:
            index, size = live.pop(path)
            shadowed[index] += size


def measure(layers: list[LayerFiles]) -> list[LayerSize]:
    """Each layer's bytes, files and shadowed bytes, stacked bottom to top."""
    live: dict[str, tuple[int, int]] = {}
    shadowed = [0] * len(layers)
    for index, layer in enumerate(layers):
        if layer.whiteouts or layer.opaque:
            keys = sorted(live)
            for gone in layer.whiteouts:
                _drop(live, keys, gone, shadowed)
            for folder in layer.opaque:
                _drop(live, keys, folder, shadowed, keep_self=True)
        for path, size in layer.files.items():
            if path in live:
                below, old = live[path]
                shadowed[below] += old
            live[path] = (index, size)
    return [LayerSize(layer.step, sum(layer.files.values()), len(layer.files), shadowed[i])
            for i, layer in enumerate(layers)]


def summary(sizes: list[LayerSize]) -> dict:
    """What the build summary JSON records."""
    return {"total_bytes": sum(s.bytes for s in sizes),
            "shadowed_bytes": sum(s.shadowed_bytes for s in sizes),
            "layers": [asdict(s) for s in sizes]}


def describe(sizes: list[LayerSize], top: int = 0) -> list[str]:
    """One line per layer (largest first when ``top``): GB, shadowed GB, the step."""
    rows = sorted(sizes, key=lambda s: -s.bytes)[:top] if top else sizes
    return [f"{s.bytes / GB:7.3f} GB" + (f" ({s.shadowed_bytes / GB:.3f} GB shadowed)"
                                          if s.shadowed_bytes else "") + f"  {s.step[:100]}"
            for s in rows]


def check_budget(sizes: list[LayerSize], budget_gb: float | None, target: str) -> None:
    total = sum(s.bytes for s in sizes)
    if budget_gb is None or total <= budget_gb * GB:
        return
    largest = "; ".join(line.strip() for line in describe(sizes, top=3))
    raise SizeBudgetError(
        f"the image's layers hold {total / GB:.2f} GB, over target '{target}' field "
        f"'size_budget_gb' ({budget_gb:g} GB); largest layers: {largest}")


# --- reading an image's layers -------------------------------------------------------------------

def _steps(config: dict) -> list[str]:
    """The build step of each layer: the history entries that made one, oldest first."""
    steps = [str(h.get("created_by") or "") for h in config.get("history") or []
             if not h.get("empty_layer")]
    count = len((config.get("rootfs") or {}).get("diff_ids") or [])
    return steps if len(steps) == count else [""] * count


def image_layers(engine: DockerEngine, image: str) -> list[LayerFiles]:
    """The image's layers, bottom first, from the layer store or else ``docker save``."""
    from edgevllm.image.layerstore import LocalLayerStore, StoreUnusable, chain_ids

    image_id = engine.image_inspect(image)["Id"]
    store = LocalLayerStore.find(engine)
    if store is not None:
        try:
            config = load_json(store.config(image_id), image_id, BuildError)
            chains = chain_ids(config["rootfs"]["diff_ids"])
            layers = []
            for chain, step in zip(chains, _steps(config), strict=True):
                layer = LayerFiles(step=step)
                for name, size in store.members(chain):
                    layer.add(name, size, name.endswith("/"))
                layers.append(layer)
            return layers
        except (StoreUnusable, BuildError, ValueError, KeyError, TypeError):
            pass
    with engine.save_stream([image_id]) as stream:
        return layers_of_save(stream, f"image {image}")


def layers_of_save(stream: IO[bytes], label: str) -> list[LayerFiles]:
    """A ``docker save`` archive's layers, in its manifest's order (legacy or OCI layout), read
    by verify's one archive reader keeping each regular file's size."""
    from edgevllm.verify.archive import config_name, layer_order, read_image

    found = read_image(stream, label, lambda tar, member, path: member.size)
    order = layer_order(found, label)
    if order is None:
        raise BuildError(f"{label}: docker save wrote no manifest naming the image's layers")
    config = found.json_blobs.get(config_name(found) or "", b"{}")
    stacked = []
    for name, step in zip(order, _steps(load_json(config, label, BuildError)), strict=True):
        layer = found.layers.get(name)  # none for an all-zero (empty) layer tar
        stacked.append(LayerFiles(step=step) if layer is None else LayerFiles(
            step, {path: layer.kept.get(path, 0) for path in layer.present},
            list(layer.whiteouts), list(layer.opaque)))
    return stacked
