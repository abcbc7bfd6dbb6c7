"""A layer's tar read straight from a local engine's overlay2 layer store, without ``docker save``.

Docker keeps, for every layer, the tar's headers and padding (``tar-split.json.gz``: "segment"
entries holding raw bytes, "file" entries naming a file whose contents follow) beside the layer's
unpacked files (``overlay2/<cache-id>/diff``). Replaying one through the other gives back the
layer's tar byte for byte; that is what ``docker save`` itself does, here without the daemon's
CPU and the extra pipe. Used only when it can be trusted: the engine is the local default one,
its root folder is readable (root), its storage driver is overlay2; and every layer replayed this
way must hash to its diff id, every config to the image id, or the caller falls back to
``docker save`` (``StoreUnusable``). Nothing is ever written here.

A reader that needs only some files (verify: the libraries) takes the members' headers alone
(``headers``: each member's own tar header block, the file's contents never read) and opens the
files it wants (``open_file``: the file in the layer's folder, a regular file of the size its
header says).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path

from edgevllm.containers.docker import DockerEngine
from edgevllm.image.loadskip import chain_ids as chain_ids  # the store's keys: Docker's rule

READ_CHUNK = 1 << 20
BLOCK = 512  # a tar header block
LINE_LIMIT = 16 << 20  # one tar-split entry: a header segment, or a file's name (a few KiB)


class StoreUnusable(Exception):
    """The layer store cannot give this image's bytes (missing entry, other layout, mismatch)."""


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
        """The layer's tar-split entries, each checked: ``{"type": 2, "payload": bytes}`` (raw
        tar bytes) or ``{"type": 1, "name": str, "size": int}`` (a file's contents follow)."""
        path = self.layerdb / chain_id.split(":", 1)[1] / "tar-split.json.gz"
        try:
            with gzip.open(path, "rb") as lines:
                while line := lines.readline(LINE_LIMIT):
                    if len(line) == LINE_LIMIT and not line.endswith(b"\n"):
                        raise StoreUnusable(f"{path}: an entry over {LINE_LIMIT} bytes")
                    yield _checked(json.loads(line), path)
        except (OSError, ValueError, EOFError, RecursionError, zlib.error) as exc:
            raise StoreUnusable(f"{path}: {type(exc).__name__}: {exc}") from None

    def tar_size(self, chain_id: str) -> int:
        """The size of the layer's tar, from its headers alone (no file is opened)."""
        return sum(len(entry["payload"]) if entry["type"] == 2 else entry["size"]
                   for entry in self._entries(chain_id))

    def members(self, chain_id: str) -> Iterator[tuple[str, int]]:
        """Each member's name (folders end in "/") and size, from the tar's headers alone."""
        for entry in self._entries(chain_id):
            if entry["type"] == 1:
                yield entry["name"], entry["size"]

    def headers(self, chain_id: str) -> Iterator[tuple[bytes, int]]:
        """Each member's header blocks (its extended headers, then its own ustar block; the
        padding of the file before it cut off) and the size of its contents, from tar-split
        alone: no file of the layer is opened."""
        raw, after = b"", 0  # header bytes since the last file; the padding they start with
        for entry in self._entries(chain_id):
            if entry["type"] == 2:
                raw += entry["payload"]
                continue
            blocks = raw[after:]
            if not blocks or len(blocks) % BLOCK or blocks[-BLOCK:][257:262] != b"ustar":
                raise StoreUnusable(f"layer {chain_id}: the header of '{entry['name'][:200]}' is "
                                    "not a whole ustar block")
            yield blocks, entry["size"]
            raw, after = b"", -entry["size"] % BLOCK

    def diff_dir(self, chain_id: str) -> Path:
        try:
            cache_id = (self.layerdb / chain_id.split(":", 1)[1] / "cache-id").read_text().strip()
        except OSError as exc:
            raise StoreUnusable(f"layer {chain_id}: {exc.strerror}") from None
        return self.root / "overlay2" / cache_id / "diff"

    def tar_blocks(self, chain_id: str) -> Iterator[bytes]:
        """The layer's tar, replayed from its headers and its unpacked files."""
        diff = self.diff_dir(chain_id)
        inside = os.path.realpath(diff) + os.sep
        for entry in self._entries(chain_id):
            if entry["type"] == 2:
                yield entry["payload"]
            elif entry["size"]:
                yield from _file_blocks(diff, inside, entry)


def _checked(entry: object, path: Path) -> dict:
    """One tar-split entry as ``_entries`` gives it, or StoreUnusable."""
    if isinstance(entry, dict) and entry.get("type") == 2:
        payload = entry.get("payload") or ""
        if isinstance(payload, str):
            return {"type": 2, "payload": base64.b64decode(payload, validate=True)}
    elif isinstance(entry, dict) and entry.get("type") == 1:
        raw, name, size = entry.get("name_raw"), entry.get("name"), entry.get("size") or 0
        if isinstance(raw, str) and raw:
            name = os.fsdecode(base64.b64decode(raw, validate=True))
        if isinstance(name, str) and "\0" not in name and type(size) is int and size >= 0:
            return {"type": 1, "name": name, "size": size}
    raise StoreUnusable(f"{path}: an entry is not a tar-split segment or file")


def _opened(diff: Path, inside: str, name: str) -> int:
    """A descriptor of the layer's file ``name``, which must lie inside ``diff``."""
    if name.startswith("/") or ".." in name.split("/"):
        raise StoreUnusable(f"layer entry '{name}' points outside its layer")
    if not os.path.realpath(diff / name).startswith(inside):
        raise StoreUnusable(f"layer entry '{name}' leads outside its layer through a symlink")
    try:
        # O_NOFOLLOW: a layer's regular file is never a symlink in its diff folder.
        return os.open(diff / name, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise StoreUnusable(f"{diff / name}: {exc.strerror}") from None


def open_file(diff: Path, name: str, size: int) -> io.BufferedReader:
    """The layer's regular file ``name`` (a member's name in ``diff_dir``), refused unless it
    is a regular file of exactly the ``size`` its tar header says."""
    descriptor = _opened(diff, os.path.realpath(diff) + os.sep, name)
    found = os.fstat(descriptor)
    if not stat.S_ISREG(found.st_mode) or found.st_size != size:
        os.close(descriptor)
        raise StoreUnusable(f"{diff / name}: not a regular file of the {size} bytes its tar "
                            "header says")
    return os.fdopen(descriptor, "rb")


def _file_blocks(diff: Path, inside: str, entry: dict) -> Iterator[bytes]:
    name = entry["name"]
    left = entry["size"]
    try:
        with os.fdopen(_opened(diff, inside, name), "rb") as handle:
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
