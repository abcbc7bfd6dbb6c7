"""A tiny model in a Hugging Face hub cache, laid out as huggingface_hub writes it, for the
offline bundle tests. It stands in for a real model: a config, a tokenizer file and a few-KB
safetensors file (a real header and tensor bytes), nothing a server could load."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path

MODEL = "edgevllm-test/tiny-model"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _safetensors(values: int = 512) -> bytes:
    header = json.dumps({"w": {"dtype": "F32", "shape": [values],
                               "data_offsets": [0, values * 4]}}).encode()
    return struct.pack("<Q", len(header)) + header + os.urandom(values * 4)


def tiny_model_files() -> dict[str, bytes]:
    return {"config.json": json.dumps({"model_type": "tiny", "hidden_size": 8}).encode(),
            "tokenizer/vocab.txt": b"a\nb\nc\n",
            "model.safetensors": _safetensors()}


def make_hub_cache(hf_cache: Path, files: dict[str, bytes] | None = None) -> Path:
    """``<hf_cache>/hub/models--edgevllm-test--tiny-model`` with blobs (sha256-named for the
    safetensors file as for an LFS file, a git sha1 for the others), snapshot links and
    refs/main; returns the snapshot folder."""
    folder = hf_cache / "hub" / ("models--" + MODEL.replace("/", "--"))
    snapshot = folder / "snapshots" / COMMIT
    for name, data in (files or tiny_model_files()).items():
        blob = hashlib.sha256(data).hexdigest() if name.endswith(".safetensors") else \
            hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        (folder / "blobs").mkdir(parents=True, exist_ok=True)
        (folder / "blobs" / blob).write_bytes(data)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(folder / "blobs" / blob, link.parent))
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / "main").write_text(COMMIT)
    return snapshot


RECIPE = """schema_version: 1
name: tiny-offline
description: the offline bundle tests' recipe (a tiny stand-in model)
targets: [thor]
status: {{thor: untested}}
image: "{image}"
model: edgevllm-test/tiny-model
defaults:
  port: 8000
  hf_cache: {hf_cache}
serve:
  args: ["{{{{ model }}}}", "--port={{{{ port }}}}"]
"""


def write_recipe(path: Path, image: str, hf_cache: Path) -> Path:
    path.write_text(RECIPE.format(image=image, hf_cache=hf_cache))
    return path
