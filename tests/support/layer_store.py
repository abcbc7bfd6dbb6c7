"""A local engine's overlay2 layer store laid out as Docker lays it out, built from a real tar
(no root and no daemon needed): ``layerdb/sha256/<chain>/{cache-id,tar-split.json.gz}`` and the
unpacked files under ``overlay2/<cache-id>/diff``."""

from __future__ import annotations

import base64
import gzip
import io
import json
import tarfile
from pathlib import Path

from .sdists import extract_all

CHAIN = "sha256:" + "c" * 64


def tar_split(data: bytes) -> list[dict]:
    """The entries Docker keeps for a layer: raw header bytes (type 2: the padding of the file
    before, then the member's header blocks), then each member's name and size (type 1, its
    contents in the diff folder), and the tail."""
    entries, at = [], 0
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar.getmembers():
            entries.append({"type": 2, "payload": base64.b64encode(
                data[at:member.offset_data]).decode()})
            entries.append({"type": 1, "name": member.name + ("/" if member.isdir() else ""),
                            "size": member.size})
            at = member.offset_data + (member.size if member.isfile() else 0)
    return entries + [{"type": 2, "payload": base64.b64encode(data[at:]).decode()}]


def lines(entries: list) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in entries)


def fake_store(root: Path, tar: bytes, split: bytes | None = None, chain: str = CHAIN,
               cache_id: str = "cache1"):
    """A ``LocalLayerStore`` at ``root`` holding ``tar`` as the layer ``chain`` (``split``:
    other tar-split lines than the tar's own); the diff folder is unpacked once."""
    from edgevllm.image.layerstore import LocalLayerStore

    layer = root / "image" / "overlay2" / "layerdb" / "sha256" / chain.split(":")[1]
    layer.mkdir(parents=True, exist_ok=True)
    (layer / "cache-id").write_text(cache_id + "\n")
    data = lines(tar_split(tar)) if split is None else split
    (layer / "tar-split.json.gz").write_bytes(gzip.compress(data))
    diff = root / "overlay2" / cache_id / "diff"
    if not diff.exists():
        diff.mkdir(parents=True)
        with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
            extract_all(archive, diff)
    return LocalLayerStore(root)
