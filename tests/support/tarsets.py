"""Published tarball sets written by tests without Docker: a payload zstd-compressed, cut into
parts, and the ``<name>.manifest.json`` that ``inv publish`` would write beside them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import zstandard


def write_set(folder: Path, payload: bytes, parts: int = 2, **override: object) -> Path:
    """A published-style set: ``payload`` zstd-compressed, cut into ``parts``, and its manifest
    (its fields replaced by ``override``)."""
    frame = zstandard.ZstdCompressor(write_checksum=True).compress(payload)
    cut = max(1, len(frame) // parts)
    pieces = [frame[i:i + cut] for i in range(0, len(frame), cut)]
    listed = []
    for index, piece in enumerate(pieces):
        name = f"s.tar.zst.part{index:03d}"
        (folder / name).write_bytes(piece)
        listed.append({"file": name, "size": len(piece),
                       "sha256": hashlib.sha256(piece).hexdigest()})
    manifest = {"schema_version": 1, "name": "s", "format": "zst", "parts": listed,
                "total_size": len(frame), "uncompressed_size": len(payload), "image": {},
                "labels": {}, "tool_version": "test", "created": "2026-01-01T00:00:00Z"}
    manifest.update(override)
    path = folder / "s.manifest.json"
    path.write_text(json.dumps(manifest))
    return path
