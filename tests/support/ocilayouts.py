"""OCI image layouts written by tests without the engine: a one-layer image as ``docker save``
writes it (less docker's own ``manifest.json``), its blobs named by their real sha256."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
REF_NAME = "org.opencontainers.image.ref.name"


def put_blob(folder: Path, raw: bytes) -> str:
    """``raw`` as ``folder/blobs/sha256/<hex>``; its digest."""
    hexa = hashlib.sha256(raw).hexdigest()
    (folder / "blobs/sha256").mkdir(parents=True, exist_ok=True)
    (folder / "blobs/sha256" / hexa).write_bytes(raw)
    return "sha256:" + hexa


def make_layout(folder: Path, content: bytes) -> str:
    """A one-layer image as an OCI layout, tagged v1; its manifest digest."""
    layer = put_blob(folder, content)
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                         "rootfs": {"type": "layers", "diff_ids": [layer]}}).encode()
    raw = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                      "config": {"mediaType": OCI_CONFIG, "size": len(config),
                                 "digest": put_blob(folder, config)},
                      "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                                  "size": len(content), "digest": layer}]}).encode()
    digest = put_blob(folder, raw)
    (folder / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    (folder / "index.json").write_text(json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": OCI_MANIFEST, "digest": digest, "size": len(raw),
                       "annotations": {REF_NAME: "v1"}}]}))
    return digest
