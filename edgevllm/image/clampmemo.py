"""What the clamp made of what, remembered: a layer BuildKit exported (its diff id) became that
clamped layer, an image (its id) that clamped image, under one moment. The clamp is a function of
the bytes and the moment alone (image/clamp.py), so a rebuild whose steps came from BuildKit's
cache (the same layers) needs neither ``docker save`` nor a byte read: the clamped image is the
one the engine already holds, tagged again; a one-mod rebuild reads only the layers above the
unchanged ones (image/clampimage.py).

    <root>/<key>/layer-<hex>   the clamped layer's sha256 (64 hex digits), nothing else
    <root>/<key>/image-<hex>   the clamped image's id
    <root>/<key>/config-<hex>  the clamped image's config, named by its sha256 (its id): the
                               image is made again from it and the layers the engine holds
                               when the clamped image itself is gone (the build relabels it)

``key``: the sha256 of the clamp's own sources and the moment (layers), and the config's moment
too (images). Written atomically into folders made 0700 and believed only when they are the
user's and not writable by others (``common/trust``); read back as outside data (at most 65
bytes, 64 hex digits or a miss). What it names is used only when the engine holds it; bounded at
``MAX_ENTRIES`` entries, the least recently used removed first. Root: ``EDGEVLLM_CLAMP_CACHE``,
else ``<edgevllm cache>/clamp``; ``off`` turns it off.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import os
import re
from pathlib import Path

from edgevllm.common.fsutil import atomic_write_bytes, dir_entries
from edgevllm.common.paths import cache_dir
from edgevllm.common.trust import private_dir, seal, trusted_path

ROOT_SETTING = "EDGEVLLM_CLAMP_CACHE"
FORMAT = 1
MAX_ENTRIES = 8192  # two per layer and image clamped: a few hundred builds
_HEX = re.compile(r"[0-9a-f]{64}\Z")
_ENTRY = re.compile(r"(layer|image|config)-[0-9a-f]{64}\Z")
CONFIG_LIMIT = 1 << 20  # an image config: the real vLLM 0.33.0 image's is 12 KB
WHAT = "clamp cache"


@functools.lru_cache(maxsize=1)
def _sources_digest() -> str:
    """The clamp's version: its rules' and this flow's sources."""
    digest = hashlib.sha256()
    for name in ("edgevllm.image.clamp", "edgevllm.image.clampimage", __name__):
        # by name: clampimage imports this module (no import cycle for the layer rule)
        path = Path(str(importlib.import_module(name).__file__))
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def memo_key(*moments: object) -> str:
    text = "|".join([str(FORMAT), _sources_digest(), *map(repr, moments)])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class ClampMemo:
    """Entries of one moment (``layer_key``) and one moment and config moment (``image_key``)."""

    def __init__(self, root: Path, layer_key: str, image_key: str):
        self.root, self.keys = Path(root), {"layer": layer_key, "image": image_key}

    @classmethod
    def for_moments(cls, moment: object, config_moment: object) -> "ClampMemo | None":
        root = os.environ.get(ROOT_SETTING)
        if root == "off":
            return None
        folder = Path(root) if root else cache_dir("clamp", create=False)
        return cls(folder, memo_key(moment), memo_key(moment, config_moment))

    def _path(self, kind: str, sha: str) -> Path:
        hexdigest = sha.removeprefix("sha256:")
        if not _HEX.match(hexdigest):
            raise ValueError(f"not a sha256: {sha[:80]}")
        return self.root / self.keys[kind] / f"{kind}-{hexdigest}"

    def get(self, kind: str, sha: str) -> str | None:
        """What ``sha`` (a ``layer`` diff id or an ``image`` id) became, ``sha256:…``; None
        when unknown or not to be believed."""
        try:
            path = self._path(kind, sha)
            if not trusted_path(path, self.root, WHAT):
                return None
            with open(path, "rb") as handle:
                text = handle.read(65).decode("ascii", errors="replace")  # put wrote 64, no more
            os.utime(path)  # least recently used goes first
        except (OSError, ValueError):
            return None
        return f"sha256:{text}" if _HEX.match(text) else None

    def put(self, kind: str, sha: str, made: str) -> None:
        """Remember that ``sha`` became ``made``; a memo that cannot be written costs a clamp
        the next time, never an image."""
        try:
            path = self._path(kind, sha)
            made_hex = made.removeprefix("sha256:")
            if not _HEX.match(made_hex):
                raise ValueError(f"not a sha256: {made[:80]}")
            private_dir(path.parent)
            if not trusted_path(path.parent, self.root, WHAT):
                return
            seal(atomic_write_bytes(path, made_hex.encode()))
        except (OSError, ValueError):
            return
        self.prune()

    def get_config(self, image_id: str) -> bytes | None:
        """The clamped config whose sha256 is ``image_id``; None when unknown, not to be
        believed, or not those bytes."""
        try:
            path = self._path("image", image_id).with_name(
                f"config-{image_id.removeprefix('sha256:')}")
            if not trusted_path(path, self.root, WHAT):
                return None
            with open(path, "rb") as handle:
                data = handle.read(CONFIG_LIMIT + 1)
            os.utime(path)
        except (OSError, ValueError):
            return None
        if hashlib.sha256(data).hexdigest() != image_id.removeprefix("sha256:"):
            return None
        return data

    def put_config(self, config: bytes) -> None:
        """Remember a clamped config by its sha256."""
        if len(config) > CONFIG_LIMIT:
            return
        name = "sha256:" + hashlib.sha256(config).hexdigest()
        try:
            path = self._path("image", name).with_name(f"config-{name[7:]}")
            private_dir(path.parent)
            if trusted_path(path.parent, self.root, WHAT):
                seal(atomic_write_bytes(path, config))
        except (OSError, ValueError):
            return

    def prune(self, limit: int = MAX_ENTRIES) -> int:
        """Drop the least recently used entries past ``limit``; only ``<key>/layer-<hex>`` and
        ``<key>/image-<hex>`` files (what this module writes) are ever removed."""
        entries = []
        for folder in dir_entries(self.root):
            if folder.is_dir(follow_symlinks=False):
                for entry in dir_entries(Path(folder.path)):
                    if _ENTRY.match(entry.name) and entry.is_file(follow_symlinks=False):
                        entries.append((entry.stat(follow_symlinks=False).st_mtime, entry.path))
        entries.sort()
        dropped = entries[:max(0, len(entries) - limit)]
        for _, path in dropped:
            try:
                os.unlink(path)
            except OSError:
                continue
        return len(dropped)
