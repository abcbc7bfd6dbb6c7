"""What probe level 1 remembers of an image: the facts its check script reported, by what the
script exercised, so that the same image is not probed twice.

The check script imports the image's code: its facts are a function of every byte of the image's
filesystem, of what ``docker run`` gives the container (the image's Env, User, WorkingDir, the
platform it runs as and the engine that runs it, with its emulator's version for a foreign
platform on this machine's engine), and of the script and its arguments. The key hashes all of
these: the image's layers by their diff ids (the whole stack, in order), not the image id, so a
rebuild whose layers are the same bytes (a build run again, a re-label) hits, and a rebuild that
changed one mod (its mods layer) misses: a probe that imports code must run again when the code
changed. What the key cannot see, and why it is still sound for level 1: the host's kernel and a
remote engine's emulator (the engine's name is in the key), devices (level 1 passes none), the
network (it runs with none) and the clock; facts where a check timed out or was killed are never
kept (a loaded machine is no property of the image).

A record holds facts, not a verdict: the judging (the target's rules, the image's labels, the
first-start record) runs fresh on every read.

    <root>/<key>.facts   one header line (JSON: format, key, sha256 of the body), the body (JSON)

Written atomically (``common/fsutil``) into a folder made 0700; used only when the record and
its root are the user's and not writable by group or others (``common/trust``: else one warning
line and the image is probed); read back as outside data (size, header, sha256, one JSON
object); anything else is a miss. Bounded by ``EDGEVLLM_PROBE_CACHE_MAX`` (default 64 MiB, ``0``
turns it off), least recently used first. Root: ``EDGEVLLM_PROBE_CACHE``, else
``<edgevllm cache>/probe``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from edgevllm.common.dataload import load_json
from edgevllm.common.errors import ConfigError
from edgevllm.common.fsutil import atomic_write_bytes
from edgevllm.common.paths import cache_dir
from edgevllm.common.trust import private_dir, seal, trusted_path

FORMAT = 1
DEFAULT_MAX_BYTES = 64 << 20
ENTRY_LIMIT = 4 << 20  # one record: the real vLLM 0.33.0 image's facts take about 40 KB
ROOT_SETTING, MAX_SETTING = "EDGEVLLM_PROBE_CACHE", "EDGEVLLM_PROBE_CACHE_MAX"
_NAME = re.compile(r"[0-9a-f]{64}\.facts\Z")
UNSTABLE = ("timed out after", "killed by SIG")  # the in-image script's words for a child lost


def fact_key(inspected: dict, engine_name: str, script: bytes, arguments: list[str],
             emulator: str = "") -> str | None:
    """The record's name: the image's layers (diff ids, in order), what ``docker run`` gives
    the container, the engine, the script and its arguments. None when the engine names no
    layers (nothing sound to key by)."""
    layers = (inspected.get("RootFS") or {}).get("Layers")
    if not isinstance(layers, list) or not layers or \
            not all(isinstance(d, str) and d.startswith("sha256:") for d in layers):
        return None
    config = inspected.get("Config") or {}
    exercised = {
        "format": FORMAT, "layers": layers, "env": config.get("Env"),
        "user": config.get("User"), "workdir": config.get("WorkingDir"),
        "platform": [inspected.get(k) for k in ("Os", "Architecture", "Variant")],
        "engine": engine_name, "emulator": emulator, "arguments": arguments,
        "script": hashlib.sha256(script).hexdigest(),
    }
    text = json.dumps(exercised, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def max_bytes() -> int:
    from edgevllm.verify.limits import size_setting

    return size_setting(MAX_SETTING, DEFAULT_MAX_BYTES, "probe cache")


class FactCache:
    """Facts of probed images, under a size ceiling."""

    def __init__(self, root: Path, limit: int):
        self.root, self.limit = Path(root), limit

    @classmethod
    def configured(cls) -> "FactCache | None":
        """The user's cache; None when turned off."""
        limit = max_bytes()
        if limit <= 0:
            return None
        root = os.environ.get(ROOT_SETTING)
        return cls(Path(root) if root else cache_dir("probe", create=False), limit)

    def _path(self, key: str) -> Path:
        return self.root / f"{key}.facts"

    def get(self, key: str) -> dict[str, Any] | None:
        path = self._path(key)
        if not trusted_path(path, self.root, "probe cache"):
            return None  # others could have written it: the image is probed instead
        try:
            with open(path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if size > ENTRY_LIMIT:
                    return None
                data = handle.read(size + 1)
            facts = decode(data, key)
            os.utime(path)  # least recently used goes first
        except (OSError, ValueError):
            return None
        return facts

    def put(self, key: str, facts: dict[str, Any]) -> bool:
        """Remember ``facts`` unless a check in them timed out or was killed, or they are over
        the ceiling; False when not kept."""
        body = json.dumps(facts, sort_keys=True, separators=(",", ":"), default=str).encode()
        if any(word.encode() in body for word in UNSTABLE):
            return False
        header = json.dumps({"format": FORMAT, "key": key,
                             "sha256": hashlib.sha256(body).hexdigest()}).encode()
        data = header + b"\n" + body
        if len(data) > min(ENTRY_LIMIT, self.limit):
            return False
        try:
            private_dir(self.root)
            if not trusted_path(self.root, self.root, "probe cache"):
                return False
            seal(atomic_write_bytes(self._path(key), data))
        except OSError:
            return False  # a cache that cannot be written costs a probe, never a verdict
        self.prune()
        return True

    def prune(self) -> int:
        """Least recently used records out until the rest are under the ceiling; only
        ``<sha256>.facts`` files (what this module writes) are ever removed."""
        from edgevllm.verify.limits import drop_oldest

        try:
            with os.scandir(self.root) as entries:
                records = [(e.stat(follow_symlinks=False).st_mtime,
                            e.stat(follow_symlinks=False).st_size, e.path) for e in entries
                           if _NAME.match(e.name) and e.is_file(follow_symlinks=False)]
        except OSError:
            return 0
        return drop_oldest(records, self.limit)


def decode(data: bytes, key: str) -> dict[str, Any]:
    """A record back as facts; ValueError for anything but what ``put`` wrote under ``key``."""
    if len(data) > ENTRY_LIMIT:
        raise ValueError("over the size a record may have")
    head, newline, body = data.partition(b"\n")
    try:
        header = load_json(head[:4096], "a probe cache record", ConfigError)
        if not newline or header != {"format": FORMAT, "key": key,
                                     "sha256": hashlib.sha256(body).hexdigest()}:
            raise ValueError("header does not match")
        facts = load_json(body, "a probe cache record", ConfigError, max_bytes=ENTRY_LIMIT)
    except ConfigError:
        raise ValueError("not JSON") from None
    if not isinstance(facts, dict):
        raise ValueError("not an object")
    return facts
