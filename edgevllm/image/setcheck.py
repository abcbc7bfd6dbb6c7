"""A published set's archive checked whole before any reader uses a byte of it.

``check_archive`` reads the ``docker save`` stream once (bounded memory: blobs are hashed as they
stream, only JSON documents of at most ``JSON_LIMIT`` are held) and refuses, with one
``IntegrityError`` line, anything but exactly one image:

- a member shape the archive gate refuses (common/archives.py: links, sparse members, devices,
  names out, a name twice, oversized headers);
- a member that is not one of docker save's (``manifest.json``, ``index.json``, ``oci-layout``,
  ``repositories``, ``blobs/sha256/<hex>``, the legacy ``<id>/layer.tar|json|VERSION`` and
  ``<hex>.json``), or one that no document of the image lists (an unlisted blob is a second
  image's, or a payload for whoever reads the archive next; docker's own legacy layer records
  excepted);
- a blob whose bytes are not its name's sha256, a layer that is not the config's diff id;
- a ``manifest.json`` of more than one image, an ``index.json`` naming more than one image
  manifest, tags in ``repositories`` or ``index.json`` that ``manifest.json`` does not give;
- a set whose manifest (``<name>.manifest.json``) names another image id or other tags.

``inv load`` runs it before ``docker load`` reads a byte, and the offline supply-chain check
(``inv verify --supply-chain --tarball``) before it reads the image (``TarballSet.check_contents``).
"""

from __future__ import annotations

import hashlib
import re
import tarfile
from dataclasses import dataclass, field
from typing import IO

from edgevllm.common.archives import open_tar, read_member, walk
from edgevllm.common.dataload import load_json
from edgevllm.common.errors import ConfigError, IntegrityError

JSON_LIMIT = 8 << 20  # manifest.json, index.json, an image config: real ones are a few KiB
HELD_LIMIT = 32 << 20  # every JSON document of one archive together
_HEX = r"[0-9a-f]{64}"
_BLOB = re.compile(rf"blobs/sha256/({_HEX})\Z")
_LEGACY = re.compile(rf"({_HEX})/(layer\.tar|json|VERSION)\Z")
_CONFIG_JSON = re.compile(rf"({_HEX})\.json\Z")
_TOP = {"manifest.json", "index.json", "oci-layout", "repositories"}
_FOLDERS = re.compile(rf"(blobs|blobs/sha256|{_HEX})\Z")
_CHUNK = 1 << 20


@dataclass
class ArchiveShape:
    """What the pass found: each file's sha256, the small JSON documents, and the image."""

    digests: dict[str, str] = field(default_factory=dict)   # member → "sha256:<hex>"
    documents: dict[str, bytes] = field(default_factory=dict)
    image_id: str = ""
    tags: list[str] = field(default_factory=list)
    held: int = 0
    unpacked: int = 0   # the members' bytes: what ``docker load`` writes to disk before anything
    sizes: dict[str, int] = field(default_factory=dict)   # member → bytes
    layers: list[str] = field(default_factory=list)   # manifest.json's layer files, bottom first
    diff_ids: list[str] = field(default_factory=list)


def check_archive(stream: IO[bytes], label: str, image_id: str | None = None,
                  tags: list[str] | None = None) -> ArchiveShape:
    """Read ``stream`` once and refuse all but one whole image (see module doc); ``image_id``
    and ``tags``: what the set's manifest says the archive holds."""
    shape = ArchiveShape()
    try:
        with open_tar(stream, label, IntegrityError) as tar:
            for member in walk(tar, label, IntegrityError):
                _member(shape, tar, member, label)
    except (tarfile.TarError, EOFError) as exc:  # a member's bytes cut short
        raise IntegrityError(f"{label}: the archive is damaged or truncated ({exc}); copy the "
                             "set again") from None
    _one_image(shape, label)
    if image_id is not None and shape.image_id != image_id:
        raise IntegrityError(f"{label}: the archive holds image {shape.image_id}, the manifest "
                             f"names {image_id}; the set does not match its manifest")
    if tags is not None and {_short(t) for t in shape.tags} != {_short(t) for t in tags}:
        raise IntegrityError(f"{label}: the archive tags the image {sorted(shape.tags)}, the "
                             f"manifest says {sorted(tags)}; refused before loading")
    return shape


def _member(shape: ArchiveShape, tar, member, label: str) -> None:
    name = member.name.removeprefix("./").strip("/")
    if member.isdir():
        if not _FOLDERS.fullmatch(name):
            raise IntegrityError(f"{label}: folder '{name[:200]}' is not one docker save writes")
        return
    if not (name in _TOP or _BLOB.fullmatch(name) or _LEGACY.fullmatch(name)
            or _CONFIG_JSON.fullmatch(name)):
        raise IntegrityError(f"{label}: member '{name[:200]}' is not one docker save writes; "
                             "the archive carries something besides the image")
    shape.unpacked += member.size
    shape.sizes[name] = member.size
    if name in _TOP or _CONFIG_JSON.fullmatch(name):
        data = read_member(tar, member, JSON_LIMIT, label, IntegrityError)
        shape.documents[name] = data
        shape.digests[name] = "sha256:" + hashlib.sha256(data).hexdigest()
    else:
        shape.digests[name] = _hash(shape, tar, member, name, label)
    blob = _BLOB.fullmatch(name)
    if blob and shape.digests[name] != f"sha256:{blob.group(1)}":
        raise IntegrityError(f"{label}: blob {blob.group(1)[:16]}… does not hash to its name; "
                             "the archive is corrupt or was changed")


def _hash(shape: ArchiveShape, tar, member, name: str, label: str) -> str:
    """A blob's sha256, streamed; a small JSON blob (an image manifest, a config) is held too,
    within ``HELD_LIMIT`` for the whole archive."""
    handle = tar.extractfile(member)
    digest, held = hashlib.sha256(), bytearray()
    keep = member.size <= JSON_LIMIT
    while block := handle.read(_CHUNK):
        digest.update(block)
        if keep:
            keep = block[:1] in (b"{", b"[") or bool(held)
            held += block if keep else b""
    if keep and held:
        shape.held += len(held)
        if shape.held > HELD_LIMIT:
            raise IntegrityError(f"{label}: more than {HELD_LIMIT >> 20} MiB of JSON documents; "
                                 "the archive is not one docker save wrote")
        shape.documents[name] = bytes(held)
    return "sha256:" + digest.hexdigest()


def _json(shape: ArchiveShape, name: str, label: str):
    try:
        return load_json(shape.documents[name], name, ConfigError)
    except KeyError:
        raise IntegrityError(f"{label}: the archive has no {name}; it is not a docker save "
                             "archive") from None
    except ConfigError:
        raise IntegrityError(f"{label}: {name} is not JSON; the archive is damaged") from None


def _one_image(shape: ArchiveShape, label: str) -> None:
    entries = _json(shape, "manifest.json", label)
    if not isinstance(entries, list) or len(entries) != 1 or not isinstance(entries[0], dict):
        count = len(entries) if isinstance(entries, list) else "no list of"
        raise IntegrityError(f"{label}: manifest.json names {count} images; a published set "
                             "holds exactly one")
    entry = entries[0]
    config, layers, tags = entry.get("Config"), entry.get("Layers"), entry.get("RepoTags") or []
    if not (isinstance(config, str) and isinstance(layers, list) and isinstance(tags, list)
            and all(isinstance(x, str) for x in [*layers, *tags])):
        raise IntegrityError(f"{label}: manifest.json does not name a config, its layers and "
                             "its tags")
    listed = {"manifest.json", config, *layers}
    _check_layers(shape, config, layers, label)
    listed |= _check_index(shape, config, tags, label)
    listed |= _check_repositories(shape, tags, label)
    listed |= {f"{n.split('/')[0]}/{f}" for n in layers if _LEGACY.fullmatch(n)
               for f in ("json", "VERSION")} | {"oci-layout"}
    unlisted = sorted(n for n in set(shape.digests) - listed if not _v1_layer_json(shape, n))
    if unlisted:
        raise IntegrityError(f"{label}: {len(unlisted)} member(s) that the image does not list "
                             f"(e.g. {unlisted[0][:120]}): a second image or a payload; refused")
    shape.image_id, shape.tags = shape.digests[config], list(tags)
    shape.layers, shape.diff_ids = list(layers), [shape.digests[n] for n in layers]


def _v1_layer_json(shape: ArchiveShape, name: str) -> bool:
    """Docker 25+ saves each layer's legacy v1 record as a blob nothing lists: a small JSON
    object with a v1 ``id``, no ``rootfs`` (not an image config) and no ``layers`` or
    ``manifests`` (not a manifest): inert for ``docker load``."""
    if not _BLOB.fullmatch(name) or name not in shape.documents:
        return False
    try:
        record = load_json(shape.documents[name], name, ConfigError)
    except ConfigError:
        return False
    return (isinstance(record, dict) and isinstance(record.get("id"), str)
            and re.fullmatch(_HEX, record["id"]) is not None
            and not {"rootfs", "layers", "manifests"} & set(record))


def _check_layers(shape: ArchiveShape, config: str, layers: list[str], label: str) -> None:
    missing = [n for n in [config, *layers] if n not in shape.digests]
    if missing:
        raise IntegrityError(f"{label}: {missing[0][:120]}, named in manifest.json, is not in "
                             "the archive; it is incomplete")
    document = _json(shape, config, label) if config in shape.documents else None
    rootfs = document.get("rootfs") if isinstance(document, dict) else None
    diff_ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
    if diff_ids != [shape.digests[n] for n in layers]:
        raise IntegrityError(f"{label}: the layers are not the ones the image config names "
                             "(diff ids); the archive is corrupt or was changed")


def _check_index(shape: ArchiveShape, config: str, tags: list[str], label: str) -> set[str]:
    """The OCI index names one image manifest (once per tag), whose config and layers are the
    image's; what it lists."""
    if "index.json" not in shape.documents:
        return set()
    index = _json(shape, "index.json", label)
    found = index.get("manifests") if isinstance(index, dict) else None
    entries = found if isinstance(found, list) else []
    digests = {e.get("digest") for e in entries if isinstance(e, dict)}
    if len(digests) != 1:
        raise IntegrityError(f"{label}: index.json names {len(digests)} image manifests; a "
                             "published set holds exactly one image")
    digest = next(iter(digests))
    blob = f"blobs/sha256/{str(digest).removeprefix('sha256:')}"
    manifest = _json(shape, blob, label) if blob in shape.documents else None
    named = manifest.get("config") if isinstance(manifest, dict) else None
    if not isinstance(named, dict) or named.get("digest") != shape.digests[config]:
        raise IntegrityError(f"{label}: index.json's image manifest is not the image of "
                             "manifest.json; the archive holds another image")
    names = [(e.get("annotations") or {}).get("io.containerd.image.name")
             for e in entries if isinstance(e, dict) and isinstance(e.get("annotations"), dict)]
    _same_tags([n for n in names if isinstance(n, str)], tags, "index.json", label)
    return {"index.json", blob}


def _check_repositories(shape: ArchiveShape, tags: list[str], label: str) -> set[str]:
    if "repositories" not in shape.documents:
        return set()
    repos = _json(shape, "repositories", label)
    if not isinstance(repos, dict) or not all(isinstance(v, dict) for v in repos.values()):
        raise IntegrityError(f"{label}: repositories is not docker save's mapping of tags")
    named = [f"{repo}:{tag}" for repo, found in repos.items() for tag in found]
    _same_tags(named, tags, "repositories", label)
    return {"repositories"}


def _same_tags(named: list[str], tags: list[str], where: str, label: str) -> None:
    short = {_short(t) for t in tags}
    extra = [n for n in named if _short(n) not in short]
    if extra:
        raise IntegrityError(f"{label}: {where} tags {extra[0][:120]}, which manifest.json does "
                             "not give the image; refused")


def _short(ref: str) -> str:
    """``docker.io/library/x:1`` and ``x:1`` are one tag."""
    return ref.removeprefix("docker.io/").removeprefix("library/")
