"""A published tarball set read once, for the offline supply-chain check: the image config (its
sha256 is the image id), every layer hashed against the config's diff ids, and the Python
distributions of the stacked layers (whiteouts applied), found by the same rule as in the image.

Nothing is unpacked to disk: only METADATA / RECORD / PKG-INFO files are kept in memory.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from dataclasses import dataclass, field
from typing import IO

from edgevllm.common.errors import SupplyChainError
from edgevllm.inspect.inimage_dists import PACKAGE_DIRS, entry

_WHITEOUT, _OPAQUE = ".wh.", ".wh..wh..opq"
JSON_LIMIT = 4 << 20


@dataclass
class _Layer:
    files: dict[str, bytes] = field(default_factory=dict)
    present: set[str] = field(default_factory=set)
    whiteouts: list[str] = field(default_factory=list)
    opaque: list[str] = field(default_factory=list)
    sha256: str = ""


@dataclass
class ImageArchive:
    config: dict
    config_sha256: str
    dists: list[dict]
    problems: list[str]


class _Hashing:
    def __init__(self, stream: IO[bytes]):
        self.stream, self.digest = stream, hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size)
        self.digest.update(data)
        return data

    def drain(self) -> str:
        while self.read(1 << 20):
            pass
        return self.digest.hexdigest()


def dist_file(path: str) -> bool:
    """Is ``path`` (no leading /) a METADATA / RECORD / PKG-INFO the distribution rule keeps?"""
    parts = path.split("/")
    first = next((i for i, p in enumerate(parts) if p in PACKAGE_DIRS), None)
    if first is None or len(parts) <= first + 1:
        return False
    name, rest = parts[first + 1], parts[first + 2:]
    if name.endswith(".dist-info"):
        return rest in (["METADATA"], ["RECORD"])
    return name.endswith(".egg-info") and rest in ([], ["PKG-INFO"])


def _clean(name: str) -> str:
    while name.startswith("./"):
        name = name[2:]
    return name.strip("/")


def _read_layer(stream: IO[bytes]) -> _Layer:
    from edgevllm.verify.streams import sniff, unpacked

    layer = _Layer()
    head, raw = sniff(stream)
    plain = unpacked(head, raw)
    if plain is None:
        raise tarfile.TarError("a layer is not a tar archive")
    hashing = _Hashing(plain)
    with tarfile.open(fileobj=hashing, mode="r|") as tar:  # type: ignore[call-overload]
        for member in tar:
            path = _clean(member.name)
            folder, _, base = path.rpartition("/")
            if base == _OPAQUE:
                layer.opaque.append(folder)
            elif base.startswith(_WHITEOUT):
                layer.whiteouts.append(f"{folder}/{base[len(_WHITEOUT):]}".lstrip("/"))
            elif not member.isdir():
                layer.present.add(path)
                if member.isfile() and dist_file(path):
                    layer.files[path] = tar.extractfile(member).read()
    layer.sha256 = "sha256:" + hashing.drain()
    return layer


def _stack(layers: list[_Layer]) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for layer in layers:
        for gone in layer.opaque + layer.whiteouts:
            for path in [p for p in files if p == gone or p.startswith(gone.rstrip("/") + "/")]:
                del files[path]
        for path in layer.present:
            files.pop(path, None)
        files.update(layer.files)
    return files


def dists_of(files: dict[str, bytes]) -> list[dict]:
    found = []
    for path, data in sorted(files.items()):
        location, _, base = ("/" + path).rpartition("/")
        if base == "METADATA":
            found.append(entry(location, data, files.get(path[:-len("METADATA")] + "RECORD")))
        elif base == "PKG-INFO":
            found.append(entry(location, data, None))
        elif base.endswith(".egg-info"):
            found.append(entry("/" + path, data, None))
    return found


def read_archive(stream: IO[bytes], label: str) -> ImageArchive:
    """The ``docker save`` stream of a published set, checked and read in one pass."""
    from edgevllm.verify.streams import ParseStream

    blobs: dict[str, bytes] = {}
    layers: dict[str, _Layer] = {}
    with ParseStream(label), tarfile.open(fileobj=stream, mode="r|") as outer:
        for member in outer:
            name = _clean(member.name)
            if not member.isfile():
                continue
            handle: IO[bytes] | _Replay | None = outer.extractfile(member)
            assert handle is not None  # a regular file always has a stream
            if member.size <= JSON_LIMIT and not name.endswith("layer.tar"):
                data = handle.read()
                if data[:1] in (b"{", b"["):
                    blobs[name] = data
                    continue
                handle = _Replay(data)
            layers[name] = _read_layer(handle)  # type: ignore[arg-type]
    return _assemble(blobs, layers, label)


class _Replay:
    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def read(self, size: int = -1) -> bytes:
        end = len(self.data) if size < 0 else self.at + size
        chunk, self.at = self.data[self.at:end], min(end, len(self.data))
        return chunk


def _assemble(blobs: dict[str, bytes], layers: dict[str, _Layer], label: str) -> ImageArchive:
    try:
        manifest = json.loads(blobs["manifest.json"])[0]
        config_bytes = blobs[_clean(manifest["Config"])]
        order = [_clean(name) for name in manifest["Layers"]]
    except (KeyError, IndexError, TypeError, ValueError):
        raise SupplyChainError(f"{label}: no docker-save manifest.json naming a config; the "
                               "set is not an image archive") from None
    config = json.loads(config_bytes)
    diff_ids = list((config.get("rootfs") or {}).get("diff_ids") or [])
    problems = []
    if len(diff_ids) != len(order):
        problems.append(f"{label}: the image config names {len(diff_ids)} layers, the archive "
                        f"{len(order)}")
    stacked = []
    for index, (name, diff_id) in enumerate(zip(order, diff_ids, strict=False)):
        layer = layers.get(name)
        if layer is None:
            problems.append(f"{label}: layer {index} ({name}) is missing from the archive")
            continue
        if layer.sha256 != diff_id:
            problems.append(f"{label}: layer {index} hashes to {layer.sha256}, the image config "
                            f"says {diff_id}")
        stacked.append(layer)
    return ImageArchive(config, "sha256:" + hashlib.sha256(config_bytes).hexdigest(),
                        dists_of(_stack(stacked)), problems)
