"""Layer order from an OCI image layout (``index.json`` → manifest blob → layers), for archives
that have no docker ``manifest.json`` (e.g. ``buildx --output type=oci``).

For a multi-platform index the ``linux/arm64`` manifest is taken (Thor and Spark are arm64),
else the first one.
"""

from __future__ import annotations

import json

from edgevllm.common.errors import NotATarballError

JSON_BLOB_LIMIT = 4 << 20  # manifests and configs are small; layers are never JSON


def blob_name(digest: str) -> str:
    algorithm, _, hexdigest = digest.partition(":")
    return f"blobs/{algorithm}/{hexdigest}"


def _pick(manifests: list[dict], arch: str) -> dict:
    for manifest in manifests:
        if (manifest.get("platform") or {}).get("architecture") == arch:
            return manifest
    return manifests[0]


def oci_layers(index: dict, blobs: dict[str, bytes], label: str, arch: str = "arm64") -> list[str]:
    """Blob names of the chosen image's layers, bottom first."""
    document = index
    for _ in range(4):  # index → (nested index →) manifest
        if "layers" in document:
            return [blob_name(layer["digest"]) for layer in document["layers"]]
        manifests = document.get("manifests") or []
        if not manifests:
            break
        name = blob_name(_pick(manifests, arch)["digest"])
        if name not in blobs:
            raise NotATarballError(f"{label}: OCI manifest {name} is missing from the archive")
        document = json.loads(blobs[name])
    raise NotATarballError(f"{label}: index.json names no image manifest with layers")
