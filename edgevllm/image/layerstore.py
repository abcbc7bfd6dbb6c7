"""A layer's tar read straight from a local engine's overlay2 layer store, without ``docker save``.

Docker keeps, for every layer, the tar's headers and padding (``tar-split.json.gz``: "segment"
entries holding raw bytes, "file" entries naming a file whose contents follow) beside the layer's
unpacked files (``overlay2/<cache-id>/diff``). Replaying one through the other gives back the
layer's tar byte for byte; that is what ``docker save`` itself does, here without the daemon's
CPU and the extra pipe. Used only when it can be trusted: the engine is the local default one,
its root folder is readable (root), its storage driver is overlay2; and every layer read this way
must hash to its diff id, every config to the image id, or the caller falls back to
``docker save`` (``StoreUnusable``). Nothing is ever written here.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

from edgevllm.containers.docker import DockerEngine

READ_CHUNK = 1 << 20


class StoreUnusable(Exception):
    """The layer store cannot give this image's bytes (missing entry, other layout, mismatch)."""


def chain_ids(diff_ids: list[str]) -> list[str]:
    """The layer store's keys: each layer's chain id (its diff id folded onto its parent's)."""
    chain: list[str] = []
    for diff_id in diff_ids:
        parent = chain[-1] if chain else None
        chain.append(diff_id if parent is None else
                     "sha256:" + hashlib.sha256(f"{parent} {diff_id}".encode()).hexdigest())
    return chain


class LocalLayerStore:
    """Read access to ``<DockerRootDir>/image/overlay2`` and ``<DockerRootDir>/overlay2``."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.layerdb = self.root / "image" / "overlay2" / "layerdb" / "sha256"
        self.imagedb = self.root / "image" / "overlay2" / "imagedb" / "content" / "sha256"

    @classmethod
    def find(cls, engine: DockerEngine) -> "LocalLayerStore | None":
        """The store of the local default engine when readable, else None (use docker save)."""
        if engine.context or engine.host or os.environ.get("DOCKER_HOST") or \
                os.environ.get("DOCKER_CONTEXT", "default") != "default":
            return None
        proc = engine.run_cli(["info", "--format", "{{.DockerRootDir}}|{{.Driver}}"], timeout=30)
        root, _, driver = proc.stdout.decode(errors="replace").strip().partition("|")
        if proc.returncode != 0 or driver != "overlay2" or not root:
            return None
        store = cls(Path(root))
        return store if os.access(store.layerdb, os.R_OK | os.X_OK) else None

    def config(self, image_id: str) -> bytes:
        try:
            data = (self.imagedb / image_id.split(":", 1)[1]).read_bytes()
        except OSError as exc:
            raise StoreUnusable(f"config {image_id}: {exc.strerror}") from None
        if "sha256:" + hashlib.sha256(data).hexdigest() != image_id:
            raise StoreUnusable(f"config {image_id} does not hash to its id")
        return data

    def _entries(self, chain_id: str) -> Iterator[dict]:
        path = self.layerdb / chain_id.split(":", 1)[1] / "tar-split.json.gz"
        try:
            with gzip.open(path, "rt") as lines:
                for line in lines:
                    yield json.loads(line)
        except (OSError, ValueError, EOFError) as exc:
            raise StoreUnusable(f"{path}: {exc}") from None

    def tar_size(self, chain_id: str) -> int:
        """The size of the layer's tar, from its headers alone (no file is opened)."""
        return sum(len(base64.b64decode(entry.get("payload") or b"")) if entry["type"] == 2
                   else int(entry.get("size") or 0) for entry in self._entries(chain_id))

    def members(self, chain_id: str) -> Iterator[tuple[str, int]]:
        """Each member's name (folders end in "/") and size, from the tar's headers alone."""
        for entry in self._entries(chain_id):
            if entry["type"] == 1:
                name = (os.fsdecode(base64.b64decode(entry["name_raw"])) if entry.get("name_raw")
                        else entry["name"])
                yield name, int(entry.get("size") or 0)

    def _diff_dir(self, chain_id: str) -> Path:
        try:
            cache_id = (self.layerdb / chain_id.split(":", 1)[1] / "cache-id").read_text().strip()
        except OSError as exc:
            raise StoreUnusable(f"layer {chain_id}: {exc.strerror}") from None
        return self.root / "overlay2" / cache_id / "diff"

    def tar_blocks(self, chain_id: str) -> Iterator[bytes]:
        """The layer's tar, replayed from its headers and its unpacked files."""
        diff = self._diff_dir(chain_id)
        for entry in self._entries(chain_id):
            if entry["type"] == 2:
                yield base64.b64decode(entry.get("payload") or b"")
            elif entry.get("size"):
                yield from _file_blocks(diff, entry)


def _file_blocks(diff: Path, entry: dict) -> Iterator[bytes]:
    name = os.fsdecode(base64.b64decode(entry["name_raw"]) if entry.get("name_raw")
                       else entry["name"])
    if name.startswith("/") or ".." in name.split("/"):
        raise StoreUnusable(f"layer entry '{name}' points outside its layer")
    left = int(entry["size"])
    try:
        # O_NOFOLLOW: a layer's regular file is never a symlink in its diff folder.
        with os.fdopen(os.open(diff / name, os.O_RDONLY | os.O_NOFOLLOW), "rb") as handle:
            while left:
                block = handle.read(min(left, READ_CHUNK))
                if not block:
                    break
                left -= len(block)
                yield block
    except OSError as exc:
        raise StoreUnusable(f"{diff / name}: {exc.strerror}") from None
    if left:
        raise StoreUnusable(f"{diff / name} is shorter than its tar header says")
