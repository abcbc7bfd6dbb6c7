"""An image's layers read from a tarball stream: the one reader of docker-save archives (old
``<id>/layer.tar`` or OCI ``blobs/sha256/...`` layers, themselves plain, gzip or zstd), OCI
layouts (``index.json``) and plain root filesystems (``docker export``).

Nothing is unpacked to disk: each layer is streamed once and only what the caller's ``keep``
returns for a regular file is held (verify: a library's report; inspect: a distribution's
METADATA). The layers are then stacked in the manifest's order so that whiteouts (``.wh.``)
hide deleted files and later layers override earlier ones (``stack``). A tar that stops before
its end-of-archive block is truncated, and says so.
"""

from __future__ import annotations

import hashlib
import tarfile
from dataclasses import dataclass, field
from typing import IO, Any, Callable

from edgevllm.common.archives import BoundedTarInfo, open_tar, walk
from edgevllm.common.dataload import load_json
from edgevllm.common.errors import NotATarballError
from edgevllm.verify.oci import JSON_BLOB_LIMIT, blob_name, oci_layers
from edgevllm.verify.streams import ParseStream, sniff, unpacked

# keep(tar, member, path): what to hold of one regular file (None: nothing).
Keep = Callable[[tarfile.TarFile, tarfile.TarInfo, str], Any]
WHITEOUT, OPAQUE = ".wh.", ".wh..wh..opq"


@dataclass
class Layer:
    kept: dict[str, Any] = field(default_factory=dict)  # path (no leading /) → keep's value
    present: set[str] = field(default_factory=set)  # every non-directory path in the layer
    whiteouts: list[str] = field(default_factory=list)
    opaque: list[str] = field(default_factory=list)
    sha256: str = ""  # "sha256:<hex>" of the plain tar (its diff id), when asked for


@dataclass
class ImageLayers:
    """What one pass over an archive found: its layers by member name, the members outside
    any layer (a root-filesystem tarball's files), and the small JSON documents."""

    layers: dict[str, Layer] = field(default_factory=dict)
    rootfs: Layer = field(default_factory=Layer)
    manifest: list | None = None  # docker's manifest.json
    index: dict | None = None  # OCI index.json, used when there is no manifest.json
    json_blobs: dict[str, bytes] = field(default_factory=dict)


def clean(name: str) -> str:
    """A member name as a path with no leading ``./`` or ``/``."""
    while name.startswith("./"):
        name = name[2:]
    return name.strip("/")


def regular(tar: tarfile.TarFile, member: tarfile.TarInfo) -> IO[bytes]:
    """A regular member's bytes (``extractfile`` gives None for links and devices)."""
    handle = tar.extractfile(member)
    if handle is None:
        raise NotATarballError(f"{member.name}: not a regular file")
    return handle


class _EndSeen(BoundedTarInfo):
    """Notes on its archive when the end-of-archive block was read: ``tarfile`` takes a stream
    that simply stops between members for a whole archive, and so would a truncated one."""

    @classmethod
    def fromtarfile(cls, tar):
        try:
            return super().fromtarfile(tar)
        except tarfile.EOFHeaderError:  # type: ignore[attr-defined]  # not in the stubs
            tar.edgevllm_end_seen = True
            raise


def read_tar(stream: IO[bytes], label: str, on_member: Callable) -> None:
    """Every member of a tar stream through ``on_member(tar, member)``; raises NotATarballError
    when the archive stops before its end-of-archive block (truncated)."""
    with open_tar(stream, label, NotATarballError, _EndSeen) as tar:  # the archive gate's rules
        for member in walk(tar, label, NotATarballError, filesystem=True):
            on_member(tar, member)
        if not getattr(tar, "edgevllm_end_seen", False):
            raise NotATarballError(f"{label}: the tar archive stops before its end (truncated "
                                   "after its last whole member); copy or save it again")


def entry_kind(name: str) -> tuple[str, str]:
    """A layer member's name as (``opaque``, the folder whose lower contents go), (``whiteout``,
    the path deleted with all under it) or (``path``, the member's own path)."""
    path = clean(name)
    folder, _, base = path.rpartition("/")
    if base == OPAQUE:
        return "opaque", folder
    if base.startswith(WHITEOUT):
        return "whiteout", f"{folder}/{base[len(WHITEOUT):]}".lstrip("/")
    return "path", path


def add_member(layer: Layer, tar: tarfile.TarFile, member: tarfile.TarInfo, keep: Keep,
               label: str = "layer") -> None:
    """One member into ``layer``: a whiteout, an opaque marker, or a file (kept if asked)."""
    kind, path = entry_kind(member.name)
    if ".." in path.split("/"):
        raise NotATarballError(f"{label}: member '{member.name[:200]}' climbs out of the image's "
                               "root (..); the archive is not one docker wrote")
    if kind == "opaque":
        layer.opaque.append(path)
    elif kind == "whiteout":
        layer.whiteouts.append(path)
    elif not member.isdir():
        layer.present.add(path)
        if member.isfile():
            value = keep(tar, member, path)
            if value is not None:
                layer.kept[path] = value


class _Hashing:
    """A stream's bytes hashed as they are read."""

    def __init__(self, stream: IO[bytes]):
        self.stream, self.digest = stream, hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size)
        self.digest.update(data)
        return data

    def drain(self) -> str:
        while self.read(1 << 20):
            pass
        return "sha256:" + self.digest.hexdigest()


def read_layer(stream: IO[bytes], label: str, keep: Keep, hashed: bool = False) -> Layer:
    """One layer's plain tar; ``hashed``: its sha256 (the diff id) too."""
    layer = Layer()
    source: Any = _Hashing(stream) if hashed else stream
    read_tar(source, label, lambda tar, member: add_member(layer, tar, member, keep, label))
    if hashed:
        layer.sha256 = source.drain()
    return layer


def _is_layer_name(name: str) -> bool:
    return name.endswith("/layer.tar") or name.startswith("blobs/")


def _outer_member(found: ImageLayers, tar: tarfile.TarFile, member, keep: Keep,
                  hashed: bool, wanted: Callable[[str], bool] | None = None) -> None:
    name = clean(member.name)
    if wanted is not None and _is_layer_name(name) and not wanted(name):
        return  # a layer the caller knows already: its bytes pass unread
    small = member.isfile() and member.size <= JSON_BLOB_LIMIT
    if name in ("manifest.json", "index.json") and small:
        setattr(found, name[:-5], _json_or_none(regular(tar, member).read()))
    elif member.isfile() and (_is_layer_name(name) or ("/" not in name and name.endswith(".json"))):
        head, stream = sniff(regular(tar, member))
        inner = unpacked(head, stream)
        if inner is not None and _is_layer_name(name):
            found.layers[name] = read_layer(inner, f"layer {name}", keep, hashed)
        elif head[:1] in (b"{", b"[") and small:
            found.json_blobs[name] = stream.read()
    else:
        add_member(found.rootfs, tar, member, keep, "archive")


def _json_or_none(data: bytes):
    """A top-level manifest.json / index.json, or None when it is some other file of that name."""
    try:
        return load_json(data, "manifest", NotATarballError)
    except NotATarballError:
        return None


def read_image(stream: IO[bytes], label: str, keep: Keep, hashed: bool = False,
               wanted: Callable[[str], bool] | None = None) -> ImageLayers:
    """One pass over a docker-save archive, an OCI layout or a root-filesystem tarball, plain,
    gzip or zstd; a damaged one is one NotATarballError line. ``wanted(member name)``: False
    for a layer not to read (it is left out of ``layers``)."""
    found = ImageLayers()
    with ParseStream(label):
        head, raw = sniff(stream)
        plain = unpacked(head, raw)
        if plain is None:
            raise NotATarballError(f"{label}: not a tar archive (expected .tar, .tar.gz, .tar.zst "
                                   "or split .tar.zst.partNNN from 'inv publish')")
        read_tar(plain, label,
                 lambda tar, member: _outer_member(found, tar, member, keep, hashed, wanted))
    if isinstance(found.manifest, list) and len(found.manifest) > 1:  # a second, unchecked image
        raise NotATarballError(f"{label}: manifest.json names {len(found.manifest)} images; an "
                               "archive is read as one image, so one of several is refused")
    return found


def _manifest_entry(found: ImageLayers) -> dict | None:
    if isinstance(found.manifest, list) and found.manifest and isinstance(found.manifest[0], dict):
        return found.manifest[0]
    return None


def layer_order(found: ImageLayers, label: str) -> list[str] | None:
    """The layers' member names, bottom first; None for a root-filesystem tarball."""
    if isinstance(found.manifest, list) and found.manifest and found.layers:
        layers = (_manifest_entry(found) or {}).get("Layers")
        if not isinstance(layers, list) or not all(isinstance(n, str) for n in layers):
            raise NotATarballError(f"{label}: manifest.json does not list its layers as file "
                                   "names; the archive is not one docker save wrote")
        return [clean(n) for n in layers]
    if isinstance(found.index, dict) and found.layers:
        return oci_layers(found.index, found.json_blobs, label)
    return None


def config_name(found: ImageLayers) -> str | None:
    """The member holding the image config: manifest.json's ``Config``, else the OCI manifest's."""
    named = (_manifest_entry(found) or {}).get("Config")
    if isinstance(named, str):
        return clean(named)
    for data in found.json_blobs.values():
        try:
            document = load_json(data, "manifest", NotATarballError)
        except NotATarballError:
            continue
        if not isinstance(document, dict) or "layers" not in document:
            continue
        config = document.get("config")
        if isinstance(config, dict) and isinstance(config.get("digest"), str):
            return blob_name(config["digest"])
    return None


def apply(files: dict[str, Any], layer: Layer) -> None:
    """Stack one layer on the files below it (OCI whiteout semantics)."""
    for folder in layer.opaque:
        for path in [p for p in files if p.startswith(folder + "/")]:
            del files[path]
    for gone in layer.whiteouts:
        for path in [p for p in files if p == gone or p.startswith(gone + "/")]:
            del files[path]
    for path in layer.present:
        files.pop(path, None)
    files.update(layer.kept)


def stack(found: ImageLayers, label: str) -> dict[str, Any]:
    """What ``keep`` held of the image's final filesystem, by path."""
    order = layer_order(found, label)
    if order is None:
        return dict(found.rootfs.kept)
    files: dict[str, Any] = {}
    for name in order:
        layer = found.layers.get(name)
        if layer is None:
            raise NotATarballError(f"{label}: layer {name} named in the image manifest is missing; "
                                   "the archive is incomplete, save it again")
        apply(files, layer)
    return files
