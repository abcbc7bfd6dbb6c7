"""A published tarball set read once, for the offline supply-chain check: the image config (its
sha256 is the image id), every layer hashed against the config's diff ids, and the Python
distributions and Debian packages of the stacked layers (whiteouts applied), found by the same
rules as in the image (``inimage_dists.py``).

The layers are read by verify's one layer reader (``verify/archive.py``); nothing is unpacked to
disk: only METADATA / RECORD / PKG-INFO files, the dpkg status and os-release are kept in memory,
each under ``KEPT_LIMIT``, all together under ``ALL_KEPT_LIMIT``.
"""

from __future__ import annotations

import hashlib
import tarfile
from dataclasses import dataclass
from typing import IO, Callable

from edgevllm.common.archives import read_member
from edgevllm.common.dataload import load_json
from edgevllm.common.errors import ConfigError, ResourceLimitError, SupplyChainError
from edgevllm.inspect.inimage_dists import (
    DPKG_STATUS,
    OS_RELEASE,
    PACKAGE_DIRS,
    deb_packages,
    entry,
)
from edgevllm.verify.archive import ImageLayers, apply, clean, config_name, read_image

KEPT_LIMIT = 16 << 20  # the largest METADATA / RECORD kept (torch's RECORD: under 2 MiB)
ALL_KEPT_LIMIT = 128 << 20  # all of them (an image of 400 distributions: about 40 MiB)


@dataclass
class ImageArchive:
    config: dict
    config_sha256: str
    dists: list[dict]
    problems: list[str]
    debs: list[dict]
    labels: dict[str, str]


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


def _keeper(label: str) -> Callable[[tarfile.TarFile, tarfile.TarInfo, str], bytes | None]:
    """The layer reader's ``keep``: each METADATA / RECORD / PKG-INFO, the dpkg status and
    os-release, each under ``KEPT_LIMIT`` and all of them together under ``ALL_KEPT_LIMIT``
    (25 METADATA files of 64 MiB of zeros are 48 KB compressed)."""
    kept = [0]

    def keep(tar: tarfile.TarFile, member: tarfile.TarInfo, path: str) -> bytes | None:
        if not (dist_file(path) or path == DPKG_STATUS or path in OS_RELEASE):
            return None
        if member.size > KEPT_LIMIT:
            raise ResourceLimitError(f"{path}: declares {member.size} bytes, over the "
                                     f"{KEPT_LIMIT >> 20} MiB a package's metadata may hold: "
                                     "the archive is corrupt or hostile")
        if kept[0] + member.size > ALL_KEPT_LIMIT:
            raise ResourceLimitError(f"{label}: its package metadata declares over "
                                     f"{ALL_KEPT_LIMIT >> 20} MiB in all (at {path}): the "
                                     "archive is corrupt or hostile")
        data = read_member(tar, member, KEPT_LIMIT, f"{label}: {path}", ResourceLimitError)
        kept[0] += len(data)
        return data
    return keep


def dists_of(files: dict[str, bytes]) -> list[dict]:
    found = []
    for path, data in sorted(files.items()):
        if not dist_file(path):
            continue
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
    return _assemble(read_image(stream, label, _keeper(label), hashed=True), label)


def debs_of(files: dict[str, bytes]) -> list[dict]:
    release = next((files[p] for p in OS_RELEASE if p in files), None)
    return deb_packages(files.get(DPKG_STATUS), release)


def _config(found: ImageLayers, label: str) -> tuple[bytes, dict, list[str]]:
    """The config's bytes and document, and the layers' member names in the manifest's order."""
    name = config_name(found)
    manifest = found.manifest[0] if isinstance(found.manifest, list) and found.manifest else None
    order = manifest.get("Layers") if isinstance(manifest, dict) else None
    config_bytes = found.json_blobs.get(name or "")
    try:
        config = load_json(config_bytes or b"", "the image config", ConfigError)
    except ConfigError:
        config = None
    if not isinstance(config, dict) or not isinstance(order, list) or \
            not all(isinstance(n, str) for n in order):
        raise SupplyChainError(f"{label}: no docker-save manifest.json naming a config and its "
                               "layers; the set is not an image archive")
    return config_bytes or b"", config, [clean(n) for n in order]


def _assemble(found: ImageLayers, label: str) -> ImageArchive:
    config_bytes, config, order = _config(found, label)
    rootfs = config.get("rootfs")
    diff_ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
    diff_ids = list(diff_ids) if isinstance(diff_ids, list) else []
    problems = []
    if len(diff_ids) != len(order):
        problems.append(f"{label}: the image config names {len(diff_ids)} layers, the archive "
                        f"{len(order)}")
    files: dict[str, bytes] = {}
    for index, (name, diff_id) in enumerate(zip(order, diff_ids, strict=False)):
        layer = found.layers.get(name)
        if layer is None:
            problems.append(f"{label}: layer {index} ({name}) is missing from the archive")
            continue
        if layer.sha256 != diff_id:
            problems.append(f"{label}: layer {index} hashes to {layer.sha256}, the image config "
                            f"says {diff_id}")
        apply(files, layer)
    return ImageArchive(config, "sha256:" + hashlib.sha256(config_bytes).hexdigest(),
                        dists_of(files), problems, debs_of(files), _labels(config, label))


def _labels(config: dict, label: str) -> dict[str, str]:
    inner = config.get("config") or {}
    found = (inner.get("Labels") if isinstance(inner, dict) else inner) or {}
    if not isinstance(found, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in found.items()):
        raise SupplyChainError(f"{label}: the image config's field 'config.Labels' is not a "
                               "mapping of strings; the archive is damaged")
    return found
