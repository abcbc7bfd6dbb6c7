"""Layer order from an OCI image layout (``index.json`` → manifest blob → layers), for archives
that have no docker ``manifest.json`` (e.g. ``buildx --output type=oci``).

For a multi-platform index the ``linux/arm64`` manifest is taken (Thor and Spark are arm64),
else the first one.
"""

from __future__ import annotations

from edgevllm.common.dataload import load_json
from edgevllm.common.errors import NotATarballError

JSON_BLOB_LIMIT = 4 << 20  # manifests and configs are small; layers are never JSON


def blob_name(digest: str) -> str:
    algorithm, _, hexdigest = digest.partition(":")
    return f"blobs/{algorithm}/{hexdigest}"


def _pick(manifests: list, arch: str) -> dict:
    for manifest in manifests:
        platform = manifest.get("platform") if isinstance(manifest, dict) else None
        if isinstance(platform, dict) and platform.get("architecture") == arch:
            return manifest
    return manifests[0]


def _digest(entry, label: str) -> str:
    digest = entry.get("digest") if isinstance(entry, dict) else None
    if not isinstance(digest, str) or ":" not in digest or "/" in digest:
        raise NotATarballError(f"{label}: an OCI index or manifest entry has no valid digest")
    return digest


def oci_layers(index: dict, blobs: dict[str, bytes], label: str, arch: str = "arm64") -> list[str]:
    """Blob names of the chosen image's layers, bottom first."""
    document = index
    for _ in range(4):  # index → (nested index →) manifest
        if not isinstance(document, dict):
            break
        if "layers" in document:
            layers = document["layers"]
            if not isinstance(layers, list):
                break
            return [blob_name(_digest(layer, label)) for layer in layers]
        manifests = document.get("manifests") or []
        if not isinstance(manifests, list) or not manifests:
            break
        name = blob_name(_digest(_pick(manifests, arch), label))
        if name not in blobs:
            raise NotATarballError(f"{label}: OCI manifest {name} is missing from the archive")
        try:
            document = load_json(blobs[name], name, NotATarballError)
        except NotATarballError:
            raise NotATarballError(f"{label}: OCI manifest {name} is not JSON") from None
    raise NotATarballError(f"{label}: index.json names no image manifest with layers")
