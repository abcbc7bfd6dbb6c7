"""What verify read from a layer or a wheel, remembered by content, so that it is not read again.

A record holds what the one layer reader (``archive.py``) found in one layer: each library's
report (its fatbin entries, and for the target the kernels of its units with no code that runs),
the library-named paths the layer holds (an overwrite hides a lower layer's library even when the
new file is no ELF), its whiteouts and opaque folders. Stacking records (``archive.apply``) gives
the same libraries as stacking the layers themselves, so the verdict judged from them is the
verdict of a full scan; the policy is applied afresh each time (a record holds facts, no verdict).

A record is named by the layer's diff id (the sha256 of its tar) or the wheel's sha256, in a
folder named by the key: the sha256 of this package's sources (its parser, its readers, the
built-in rule tables ``policy.yaml`` / ``policy-stock.yaml``), ``specs/cuda.py`` (``RUNS_ON``),
the target and the library-size ceiling. Any change of these is another folder: nothing read
under other rules is ever used.

    <root>/<key>/<hex>.rec   one header line (JSON: format, key, name, sha256 of the body), the body

Written atomically (``common/fsutil``) into folders made 0700. Used only when the record and its
folders up to the root are the user's and not writable by group or others (``common/trust``:
else one warning line and the layer is read). Read back as outside data: at most
``ENTRY_LIMIT`` bytes, its body's sha256 checked, every field's type and size checked; anything
else is a miss (and the fresh record replaces it). Bounded: ``EDGEVLLM_VERIFY_CACHE_MAX``
(default 1 GiB; ``0`` turns the cache off) with least recently used records removed first.
Root: ``EDGEVLLM_VERIFY_CACHE``, else ``<edgevllm cache>/verify``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from pathlib import Path

from edgevllm.common.dataload import load_json
from edgevllm.common.errors import ConfigError
from edgevllm.common.fsutil import atomic_write_bytes, dir_entries
from edgevllm.common.paths import cache_dir
from edgevllm.common.trust import private_dir, seal, trusted_path
from edgevllm.verify.archive import Layer
from edgevllm.verify.fatbin import FatbinEntry
from edgevllm.verify.library import LibraryReport
from edgevllm.verify.limits import drop_oldest

FORMAT = 1
DEFAULT_MAX_BYTES = 1 << 30
ENTRY_LIMIT = 64 << 20  # one record: the 15,970 FlashInfer cubins' reports take 6.4 MB
# Values a record's body may hold: the real vLLM 0.33.0 image's closure layer (torch, cuBLAS,
# cuDNN, NCCL...) holds 258,894 in 4.8 MB, past ``dataload``'s default for a data file; a
# record is about 19 bytes a value, so this is the size bound's, not a second, tighter one.
VALUE_LIMIT = ENTRY_LIMIT // 16
ROOT_SETTING, MAX_SETTING = "EDGEVLLM_VERIFY_CACHE", "EDGEVLLM_VERIFY_CACHE_MAX"
_NAME = re.compile(r"[0-9a-f]{64}\Z")
_TEXT_LIMIT, _LIST_LIMIT = 1 << 16, 1 << 22


class BadRecord(ValueError):
    """A record that is not one this module wrote under this key: treated as a miss."""


def rules_files() -> list[Path]:
    """What a record depends on besides the bytes read: verify's own sources (its version), its
    built-in rule tables, and ``specs/cuda.py`` (``RUNS_ON``, the level rules)."""
    from edgevllm.specs import cuda

    here = Path(__file__).parent
    return sorted(here.glob("*.py")) + sorted(here.glob("policy*.yaml")) + [Path(cuda.__file__)]


def digest_of(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(f"{path.name}\0".encode() + path.read_bytes() + b"\0")
    return digest.hexdigest()


@functools.lru_cache(maxsize=1)
def _rules_digest() -> str:
    return digest_of(rules_files())


def cache_key(target: str) -> str:
    """The folder a record lives in: verify's version (its sources), the rule tables, the
    target whose missing kernels a record names, and the ceiling a read held to."""
    from edgevllm.verify.limits import max_library_bytes

    text = f"{FORMAT}|{_rules_digest()}|{target}|{max_library_bytes()}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def max_bytes() -> int:
    """The ceiling from ``EDGEVLLM_VERIFY_CACHE_MAX`` (bytes, or 512M / 2G), else 1 GiB."""
    from edgevllm.verify.limits import size_setting

    return size_setting(MAX_SETTING, DEFAULT_MAX_BYTES, "verify cache")


class VerdictCache:
    """Records of one key, under a size ceiling shared by every key."""

    def __init__(self, root: Path, key: str, limit: int):
        self.root, self.key, self.limit = Path(root), key, limit
        self.folder = self.root / key

    @classmethod
    def for_target(cls, target: str) -> "VerdictCache | None":
        """The user's cache for ``target`` (a ``CudaArch`` or its text); None when turned off."""
        limit = max_bytes()
        if limit <= 0:
            return None
        root = os.environ.get(ROOT_SETTING)
        folder = Path(root) if root else cache_dir("verify", create=False)
        return cls(folder, cache_key(str(target)), limit)

    def _path(self, name: str) -> Path:
        hexdigest = name.split(":", 1)[-1]
        if not _NAME.match(hexdigest):
            raise BadRecord(f"not a sha256: {name[:80]}")
        return self.folder / f"{hexdigest}.rec"

    def get(self, name: str) -> Layer | None:
        """The layer (or wheel) named by its sha256, or None when unknown or unusable."""
        try:
            path = self._path(name)
            if not trusted_path(path, self.root, "verify cache"):
                return None  # others could have written it: the layer is read instead
            with open(path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if size > ENTRY_LIMIT:
                    raise BadRecord("over the size a record may have")
                data = handle.read(size + 1)  # a buffer of its size; more, should it grow
            layer = decode(data, self.key, name)
            os.utime(path)  # least recently used goes first
        except (OSError, BadRecord):
            return None
        return layer

    def put(self, name: str, layer: Layer) -> bool:
        """Remember ``layer``; False when it is over the ceiling or cannot be written."""
        data = encode(layer, self.key, name)
        if len(data) > min(ENTRY_LIMIT, self.limit):
            return False
        try:
            private_dir(self.folder)
            if not trusted_path(self.folder, self.root, "verify cache"):
                return False
            seal(atomic_write_bytes(self._path(name), data))
        except (OSError, BadRecord):
            return False  # a cache that cannot be written costs a re-read, never a verdict
        self.prune()
        return True

    def prune(self) -> int:
        """Drop least recently used records until all keys together are under the ceiling;
        only ``<key>/<sha256>.rec`` files (what this module writes) are ever removed."""
        records = []
        for folder in dir_entries(self.root):
            if folder.is_dir(follow_symlinks=False):
                for entry in dir_entries(Path(folder.path)):
                    if entry.name.endswith(".rec") and _NAME.match(entry.name[:-4]) and \
                            entry.is_file(follow_symlinks=False):
                        stat = entry.stat(follow_symlinks=False)
                        records.append((stat.st_mtime, stat.st_size, entry.path))
        return drop_oldest(records, self.limit)


# --- the record: one header line, then the body ------------------------------------------------
def encode(layer: Layer, key: str, name: str) -> bytes:
    body = json.dumps({
        "libraries": [_report_out(report) for _, report in sorted(layer.kept.items())],
        "present": sorted(layer.present), "whiteouts": layer.whiteouts, "opaque": layer.opaque,
    }, separators=(",", ":")).encode()
    header = {"format": FORMAT, "key": key, "name": name,
              "sha256": hashlib.sha256(body).hexdigest()}
    return json.dumps(header, separators=(",", ":")).encode() + b"\n" + body


def decode(data: bytes, key: str, name: str) -> Layer:
    """A record back as a ``Layer``; BadRecord for anything but what ``encode`` wrote."""
    if len(data) > ENTRY_LIMIT:
        raise BadRecord("over the size a record may have")
    head, newline, body = data.partition(b"\n")
    try:
        header = load_json(head[:4096], name, ConfigError)
        if not newline or header != {"format": FORMAT, "key": key, "name": name,
                                     "sha256": hashlib.sha256(body).hexdigest()}:
            raise BadRecord("header does not match")
        document = load_json(body, name, ConfigError, max_bytes=ENTRY_LIMIT,
                             max_values=VALUE_LIMIT)
    except (ConfigError, TypeError):
        raise BadRecord("not JSON") from None
    if not isinstance(document, dict):
        raise BadRecord("not an object")
    reports = [_report_in(item) for item in _list(document.get("libraries"))]
    return Layer(kept={report.path: report for report in reports},
                 present=set(_texts(document.get("present"))),
                 whiteouts=_texts(document.get("whiteouts")),
                 opaque=_texts(document.get("opaque")))


def _report_out(report: LibraryReport) -> list:
    entries = [[e.kind, e.sm, e.variant, e.compression, e.container, e.section, e.offset,
                e.stored_size, e.full_size] for e in report.entries]
    kernels = [[unit, names] for unit, names in sorted(report.unit_kernels.items())]
    return [report.path, report.size, report.status, report.kind, entries, kernels]


def _report_in(item) -> LibraryReport:
    """One report back; every field's type and size checked inline (16,000 cubins' reports
    decode in a fraction of a second)."""
    path, size, status, kind, entries, kernels = _list(item, 6, 6)
    if kind not in ("library", "cubin"):
        raise BadRecord("a report of an unknown kind")
    report = LibraryReport(_text(path), _int(size), status=_text(status), kind=kind)
    report.entries = [_entry_in(entry) for entry in _list(entries)]
    for pair in _list(kernels):
        unit, names = _list(pair, 2, 2)
        report.unit_kernels[_int(unit)] = None if names is None else _texts(names)
    return report


_ENTRY_TYPES = (str, int, str, str, int, str, int, int, int)


def _entry_in(entry) -> FatbinEntry:
    if type(entry) is not list or len(entry) != 9:
        raise BadRecord("a fatbin entry of the wrong shape")
    for value, kind in zip(entry, _ENTRY_TYPES, strict=True):
        if type(value) is not kind:
            raise BadRecord("a fatbin entry field of the wrong type")
        if isinstance(value, int) and not 0 <= value < 1 << 63 or \
                isinstance(value, str) and len(value) > 64:
            raise BadRecord("a fatbin entry field out of range")
    return FatbinEntry(*entry)


def _list(value, least: int = 0, most: int = _LIST_LIMIT) -> list:
    if not isinstance(value, list) or not least <= len(value) <= most:
        raise BadRecord("a list of the wrong shape")
    return value


def _text(value, limit: int = _TEXT_LIMIT) -> str:
    if not isinstance(value, str) or len(value) > limit or "\0" in value:
        raise BadRecord("a text field of the wrong type or size")
    return value


def _texts(value) -> list[str]:
    return [_text(item) for item in _list(value)]


def _int(value) -> int:
    if type(value) is not int or not 0 <= value < 1 << 63:
        raise BadRecord("a number field of the wrong type or size")
    return value
