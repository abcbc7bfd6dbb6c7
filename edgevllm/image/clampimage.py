"""An image in the engine replaced by its clamped self (image/clamp.py's rules), in one read of
``docker save`` and no more than it must (``inv build --reproducible``, builder/tail.py).

- An image clamped before under the same moments (image/clampmemo.py knows its id, and the engine
  holds it): tagged again; nothing saved, read or loaded. A rebuild whose steps all came from
  BuildKit's cache ends here.
- Otherwise ``docker save`` is read once, as a stream. The layers at the bottom whose clamped
  selves are known and held by the engine, with every layer below them (the base's, kept as they
  are, and those the memo knows) are read past. Every layer above is clamped from the stream
  straight into the scratch folder, its sha256 taken as it is written: no copy of the layer as
  BuildKit made it is kept, so the scratch needs the size of the layers clamped, not the image's.
- The clamped image is loaded from the scratch folder without the layers whose chain the engine
  already holds (a rebuild with every step rerun gives the layers of the first: none is sent),
  and its id checked against the config written.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from edgevllm.common.archives import open_tar, walk
from edgevllm.common.dataload import load_json
from edgevllm.common.errors import DiskSpaceError, EngineError, IntegrityError
from edgevllm.common.fsutil import move_into_place
from edgevllm.containers.docker import DockerEngine
from edgevllm.image.clamp import CHUNK, MAX_EDITED, Moment, clamp_config, clamp_layer
from edgevllm.image.clampmemo import ClampMemo
from edgevllm.image.loadskip import chain_ids, held_chains

_BLOB_PREFIX = "blobs/sha256/"


@dataclass
class Clamped:
    """What a clamp did: the clamped image's id, and how it got there."""

    image_id: str
    from_memo: bool = False                     # the whole image was known: only tagged
    read_past: int = 0                          # layers not clamped: known and held
    clamped: list[str] = field(default_factory=list)  # the layers written again (diff ids)
    sent: int = 0                               # of those, layers docker load was sent
    digests_only: bool = False                  # clamped to digests the engine held

    def describe(self, layers: int) -> str:
        if self.from_memo:
            return "the image clamped before (the clamp cache): tagged, nothing read"
        if self.digests_only:
            return (f"{len(self.clamped)} of {layers} layers clamped to their digests alone, "
                    f"{self.read_past} read past: the engine held them all, nothing written")
        return (f"{len(self.clamped)} of {layers} layers clamped, {self.read_past} known and "
                f"read past, {self.sent} sent to the engine")


def clamp_image(engine: DockerEngine, image: str, moment: Moment, scratch: Path,
                keep: frozenset[str] = frozenset(), config_moment: Moment | None = None,
                memo: ClampMemo | None = None, base_bytes: int = 0,
                hash_first: bool = False) -> Clamped:
    """``image`` (a tag) replaced by its clamped self under the same tag. ``keep``: the diff
    ids that stay as they are (the base's: no time in them is after it); ``config_moment``: the
    config's dates' (default: ``moment``); ``memo``: what earlier clamps made (None: none);
    ``base_bytes``: the base's size (for the disk check: what is not written again);
    ``hash_first``: clamp to a digest alone first, and write nothing where the engine holds the
    result (a rebuild with every step rerun, as ``--check-reproducible``'s: the disk needs
    ``docker save``'s copy only)."""
    found = engine.image_inspect(image)
    source_id = str(found.get("Id") or "")
    diff_ids = [str(d) for d in (found.get("RootFS") or {}).get("Layers") or []]
    scratch.mkdir(parents=True, exist_ok=True)
    known = _known_image(engine, image, source_id, memo, scratch) if memo else None
    if known:
        return Clamped(known, from_memo=True, read_past=len(diff_ids))
    size = int(found.get("Size") or 0)
    with tempfile.TemporaryDirectory(dir=scratch, prefix="clamp-") as tmp:
        work, config_moment = Path(tmp), config_moment or moment
        if hash_first:
            check_clamp_disk(engine, image, size, size, scratch)  # nothing written
            done = _clamp_stream(engine, image, source_id, diff_ids, moment, work, keep,
                                 config_moment, memo, write=False)
            if done:
                return done
        check_clamp_disk(engine, image, size, base_bytes, scratch)
        try:
            done = _clamp_stream(engine, image, source_id, diff_ids, moment, work, keep,
                                 config_moment, memo)
        except _MissedLayer:  # an image removed between the look and the load
            done = _clamp_stream(engine, image, source_id, diff_ids, moment, work, keep,
                                 config_moment, memo, every_layer=True)
    assert done is not None  # written: always an image
    return done


def _known_image(engine: DockerEngine, image: str, source_id: str, memo: ClampMemo,
                 scratch: Path) -> str | None:
    """The clamped image of ``source_id`` the memo knows, under ``image``: tagged where the
    engine holds it, else made again from its remembered config when the engine holds every
    layer of it (docker load of the config alone); None otherwise."""
    known = memo.get("image", source_id)
    if not known:
        return None
    if engine.image_exists(known):
        engine.tag(known, image)
        return known
    config = memo.get_config(known)
    parsed = load_json(config, "the clamp cache's config", IntegrityError) if config else None
    new_ids = ((parsed or {}).get("rootfs") or {}).get("diff_ids") if isinstance(parsed,
                                                                                  dict) else None
    held = held_chains(engine.image_layer_lists())
    if not (config and isinstance(new_ids, list) and new_ids
            and all(isinstance(d, str) for d in new_ids) and chain_ids(new_ids)[-1] in held):
        return None
    with tempfile.TemporaryDirectory(dir=scratch, prefix="clamp-") as tmp:
        _load(engine, image, Path(tmp), config, new_ids, held)
    return known if engine.image_id(image) == known else None


class _MissedLayer(Exception):
    """docker load missed a layer file held back as the engine's: load everything instead."""


def _clamp_stream(engine: DockerEngine, image: str, source_id: str, diff_ids: list[str],
                  moment: Moment, work: Path, keep: frozenset[str], config_moment: Moment,
                  memo: ClampMemo | None, every_layer: bool = False, write: bool = True
                  ) -> Clamped | None:
    """One read of docker save: the layers not read past clamped (``write`` False: to their
    digests alone, and None where the engine lacks one of them), the config, the load, the
    loaded id checked, and what was made remembered."""
    held = set() if every_layer else held_chains(engine.image_layer_lists())
    past = _read_past(diff_ids, keep, memo, held)
    made, blobs = _save_and_clamp(engine, image, set(diff_ids), set(diff_ids) - set(past),
                                  keep, moment, work, write)
    new_ids = [past.get(d) or made[d] for d in diff_ids]
    if not write and chain_ids(new_ids)[-1] not in held:
        return None
    config = load_json(blobs.get(f"{_BLOB_PREFIX}{source_id.removeprefix('sha256:')}", b""),
                       f"{image}'s saved config", IntegrityError)
    config_bytes = clamp_config(config, new_ids, config_moment)
    image_id = "sha256:" + hashlib.sha256(config_bytes).hexdigest()
    sent = _load(engine, image, work, config_bytes, new_ids, held)
    if engine.image_id(image) != image_id:
        raise IntegrityError(f"{image}: the engine loaded another image than the clamped "
                             f"config {image_id[:19]}")
    if memo:  # a layer clamped to its digest alone too: BuildKit's cache holds it now
        for source, clamped in made.items():
            if source not in keep:
                memo.put("layer", source, clamped)
        memo.put_config(config_bytes)
        memo.put("image", source_id, image_id)
    return Clamped(image_id, read_past=len(past), sent=sent, digests_only=not write,
                   clamped=[d for d in dict.fromkeys(diff_ids) if d in made])


def _read_past(diff_ids: list[str], keep: frozenset[str], memo: ClampMemo | None,
               held: set[str]) -> dict[str, str]:
    """The bottom layers not to read: each one's clamped self known (the base's own, or the
    memo's) and its chain held by the engine; diff id → the clamped one."""
    known: dict[str, str] = {}
    for source in diff_ids:
        made = source if source in keep else (memo.get("layer", source) if memo else None)
        if source in known or made is None or \
                chain_ids([*known.values(), made])[-1] not in held:
            break  # (the same layer twice: from there on, every layer is read)
        known[source] = made
    above = set(diff_ids[len(known):])
    return {source: made for source, made in known.items() if source not in above}


def _save_and_clamp(engine: DockerEngine, image: str, layers: set[str], wanted: set[str],
                    keep: frozenset[str], moment: Moment, work: Path, write: bool = True
                    ) -> tuple[dict[str, str], dict[str, bytes]]:
    """``docker save`` read once: each wanted layer clamped (or, kept, copied) into ``work`` as
    ``<its new sha256>.tar`` (``write`` False: its digest alone), the other layers read past;
    the other members (the config, the manifests: small JSON) kept in memory by name."""
    written: dict[str, str] = {}
    blobs: dict[str, bytes] = {}
    label = f"docker save {image}"
    with engine.save_stream([image]) as stream:
        with open_tar(stream, label, IntegrityError) as outer:
            for info in walk(outer, label, IntegrityError):
                handle = outer.extractfile(info) if info.isfile() else None
                name = info.name.removeprefix("./")
                layer = "sha256:" + name.removeprefix(_BLOB_PREFIX)
                if handle is None:
                    continue
                if layer in wanted:
                    written[layer] = _write_layer(handle, layer in keep, moment, work, write)
                elif layer not in layers and info.size <= MAX_EDITED:
                    blobs[name] = handle.read()
        while stream.read(CHUNK):
            pass
    missing = wanted - set(written)
    if missing:
        raise IntegrityError(f"{image}: docker save wrote no layer {sorted(missing)[0][:19]}")
    return written, blobs


class _Hashing:
    def __init__(self, sink: IO[bytes]):
        self.sink, self.sha = sink, hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        return self.sink.write(data)


def _write_layer(handle: IO[bytes], as_is: bool, moment: Moment, work: Path,
                 write: bool = True) -> str:
    out = work / "layer.partial"
    with open(out if write else os.devnull, "wb") as sink:
        hashing = _Hashing(sink)
        if as_is:
            while block := handle.read(CHUNK):
                hashing.write(block)
        else:
            clamp_layer(handle, hashing, moment, spill=work)  # type: ignore[arg-type]
    if write:
        move_into_place(out, work / f"{hashing.sha.hexdigest()}.tar")
    return "sha256:" + hashing.sha.hexdigest()


def _load(engine: DockerEngine, image: str, work: Path, config: bytes, new_ids: list[str],
          held: set[str]) -> int:
    """The clamped image loaded from ``work``, without the layers whose chain is held; the
    number of layer files sent."""
    from edgevllm.image.ocilayout import load_files

    config_name = hashlib.sha256(config).hexdigest() + ".json"
    names = [f"{d.removeprefix('sha256:')}.tar" for d in new_ids]
    (work / config_name).write_bytes(config)
    (work / "manifest.json").write_text(json.dumps(
        [{"Config": config_name, "RepoTags": [image], "Layers": names}]))
    needed = {name for name, chain in zip(names, chain_ids(new_ids), strict=True)
              if chain not in held}
    files = [name for name in dict.fromkeys(names) if name in needed]
    try:
        load_files(engine, work, ["manifest.json", config_name, *files], consume=True)
    except EngineError as exc:
        if len(files) == len(set(names)) or "no such file or directory" not in str(exc):
            raise
        raise _MissedLayer() from exc
    return len(files)


def check_clamp_disk(engine: DockerEngine, image: str, image_bytes: int, base_bytes: int,
                     scratch: Path) -> None:
    """Before a byte is saved: ``docker save`` first copies the whole image into the engine's
    temporary folder, while the layers above the base are written once more under ``scratch``
    (then sent to ``docker load``, which copies them again). One line, ``DiskSpaceError``, where
    an engine on this machine cannot hold that; an engine elsewhere is not asked."""
    if not engine.runs_here:
        return
    check_clamp_places(image, image_bytes, base_bytes, Path(engine.root_dir() or "/"), scratch)


def check_clamp_places(image: str, image_bytes: int, base_bytes: int, root: Path,
                       scratch: Path) -> None:
    """``check_clamp_disk`` on this machine's folders: the engine's root holds docker save's
    copy of the image, ``scratch`` the layers above the base (one disk: their sum)."""
    upper = max(0, image_bytes - base_bytes)
    wants: dict[int, tuple[int, Path]] = {}
    for where, size in ((root, image_bytes), (scratch, upper)):
        try:
            device = os.stat(where).st_dev
        except OSError:
            continue  # the engine's root is the daemon's: this user may not reach it
        total, first = wants.get(device, (0, where))
        wants[device] = (total + size, first)  # one disk: named by the engine's folder
    for need, where in wants.values():
        free = shutil.disk_usage(where).free
        if free < need:
            raise DiskSpaceError(
                f"reproducible: clamping {image} needs about {need / 1e9:.1f} GB free under "
                f"{where} (docker save's copy of the {image_bytes / 1e9:.1f} GB image, and its "
                f"{upper / 1e9:.1f} GB above the base written again), only {free / 1e9:.1f} GB "
                "is: free disk space (docker builder prune) or build without --reproducible")
