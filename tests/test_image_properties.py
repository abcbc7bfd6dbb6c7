"""Property-based tests (Hypothesis) of the readers of published sets: the manifest (JSON, from
whoever published the set) and the zstd stream of its parts. Seeds: a manifest as ``inv
publish`` writes it and a real multi-frame zstd stream. Each
mutated input gives a result or one of edgevllm's own errors, within the memory and time bounds;
a manifest that parses always has a 64-hex-digit sha256 for every part."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import zstandard
from hypothesis import given

from edgevllm.image.tarmanifest import read_manifest
from edgevllm.image.zstdframes import zstd_chunks
from support.properties import PROPERTY, bounded, json_values, mutated, replaced_field

FRAMES = (zstandard.ZstdCompressor(write_checksum=True).compress(bytes(range(256)) * 64)
          + zstandard.ZstdCompressor(write_content_size=False).compress(b"tail" * 300))


def _read(folder: Path, data: bytes):
    path = folder / "fuzz.manifest.json"
    path.write_bytes(data)
    model = read_manifest(path)
    assert all(re.fullmatch(r"[0-9a-fA-F]{64}", part.sha256) for part in model.parts)
    return model


_SEED = {  # the shape inv publish writes, for a two-part set
    "schema_version": 1, "name": "s", "format": "zst",
    "parts": [{"file": "s.tar.zst.part000", "size": 40, "sha256": "0f" * 32},
              {"file": "s.tar.zst.part001", "size": 12, "sha256": "A1" * 32}],
    "total_size": 52, "uncompressed_size": 3000, "compression": {"window_log": 27},
    "image": {"id": "sha256:" + "e" * 64}, "labels": {}, "lock": {"target": "thor"},
    "tool_version": "test", "created": "2026-01-01T00:00:00Z"}


@PROPERTY
@given(replaced_field(_SEED))
def test_a_manifest_with_any_field_replaced(tmp_path_factory, document):
    bounded(_read, tmp_path_factory.getbasetemp(), json.dumps(document).encode())


@PROPERTY
@given(mutated(json.dumps(_SEED).encode()))
def test_a_manifest_with_its_bytes_mutated(tmp_path_factory, data):
    bounded(_read, tmp_path_factory.getbasetemp(), data)


@PROPERTY
@given(json_values())
def test_a_manifest_of_any_json(tmp_path_factory, document):
    bounded(_read, tmp_path_factory.getbasetemp(), json.dumps(document).encode())


def _decode(data: bytes) -> int:
    return sum(len(piece) for piece in zstd_chunks(io.BytesIO(data), "fuzz.tar.zst", 27))


@PROPERTY
@given(mutated(FRAMES, range(0, 24)))
def test_a_zstd_stream_with_its_bytes_mutated(data):
    bounded(_decode, data)


# --- a registry's manifest answers (inv push decides from them whether to push) -------------------
INSPECT = {"Id": "sha256:" + "1" * 64, "Os": "linux", "Architecture": "arm64"}
MANIFEST = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"digest": INSPECT["Id"], "size": 1234},
            "layers": [{"digest": "sha256:" + "2" * 64, "size": 10}]}
INDEX = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
         "manifests": [{"digest": "sha256:" + "3" * 64,
                        "platform": {"os": "linux", "architecture": "arm64"}}]}


@PROPERTY
@given(replaced_field(MANIFEST), replaced_field(INDEX), mutated(json.dumps(INDEX).encode()))
def test_a_registry_manifest_or_index_of_any_shape(manifest, index, data):
    from edgevllm.image.registry import describes

    for raw in (json.dumps(manifest).encode(), json.dumps(index).encode(), data):
        found = bounded(describes, raw, INSPECT, "registry.test/x:1")
        assert found is None or isinstance(found, (bool, str, Exception))
        if isinstance(found, str):
            assert re.fullmatch(r"sha256:[0-9a-f]{64}", found)


def test_the_seeds_say_what_they_hold():
    from edgevllm.image.registry import describes

    assert describes(json.dumps(MANIFEST).encode(), INSPECT, "r") is True
    assert describes(json.dumps(INDEX).encode(), INSPECT, "r") == "sha256:" + "3" * 64
