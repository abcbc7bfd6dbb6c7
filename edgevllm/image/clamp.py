"""An image's times clamped to one moment (``SOURCE_DATE_EPOCH``), after BuildKit: what
BuildKit's ``rewrite-timestamp=true`` exporter option does, which the engine's own builder (the
``docker`` driver, moby's image exporter) ignores. ``inv build --reproducible``.

What a build writes that carries its own time, and what this does with it (the measured list:
docs/reproducible.md):
- every file a step writes has the build's mtime (or an earlier build's, where BuildKit's cache
  kept the layer): each tar header's mtime (and a PAX ``mtime`` record) later than the base
  image's creation becomes the epoch (``Moment``); the base's files keep theirs;
- a timestamp-based ``.pyc`` (``python -m venv``'s pip, compiled at install) records its
  source's mtime: clamped the same way, so it stays valid against its clamped source;
- uv writes ``uv_cache.json`` into each dist-info it installs, holding the install's time: set
  to the epoch, and its RECORD line (sha256, size) written again to match;
- the mods record (``/opt/edgevllm/mods.json``) holds the applier's ``applied_at``: set as a
  file's time is (the same length: nothing else in the layer moves);
- the config's ``created`` and each history entry's ``created``: set the same way, to the
  config's own moment (``clamp_image``'s ``config_moment``).

The build (``builder/tail.py``) sets the layers' times to the base image's creation and the
config's dates to the lock's ``created_at``: a layer's bytes then follow from what it holds, not
from when its lock was made, so a rebuild that changed one mod changes only the mods layer and
the layer holding the lock (verify and the probe cache by layer: issue 45).

Every other byte is copied as it is: a layer whose times are all earlier (the base's) comes out
identical, with its own diff id. ``clamp_layer`` works on one layer tar (the unit tests feed it
real ones); ``clamp_image`` reads ``docker save``, writes each layer again into a scratch folder
and ``docker load``s the result under the same tag.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO

from edgevllm.common import labels
from edgevllm.common.archives import open_tar, read_member, walk
from edgevllm.common.dataload import load_json
from edgevllm.common.errors import IntegrityError
from edgevllm.common.fsutil import move_into_place
from edgevllm.containers.docker import DockerEngine

# BuildKit's build argument for the moment an image's config dates are clamped to (the relabel
# step passes it: a config-only step, so no layer cache depends on it)
EPOCH_ARG = "SOURCE_DATE_EPOCH"
BLOCK = 512
CHUNK = 1 << 20
MAX_EDITED = 16 << 20  # the files edited in memory (RECORD, uv_cache.json) are a few KiB
PAX_TYPES = (b"x", b"g")
UV_CACHE = "uv_cache.json"  # uv's install record, in the metadata folder of what it installed
RECORD = "RECORD"  # that folder's list of files with their sha256 (the wheel format's)
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)  # a zip entry's earliest date: a wheel's, by clamp_wheel
_UV_TIME = re.compile(rb'"timestamp":\{"secs_since_epoch":(\d+),"nanos_since_epoch":\d+\}')
MODS_RECORD = labels.MODS_RECORD.lstrip("/")  # the in-image applier's, as a layer tar names it
_APPLIED_AT = re.compile(rb'"applied_at": "(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\+00:00"')


def epoch_of(created_at: str) -> int:
    """An ISO 8601 time in UTC (a lock's ``created_at``, an image's ``Created``, to the
    second) as seconds since the epoch."""
    found = datetime.strptime(created_at[:19], "%Y-%m-%dT%H:%M:%S")
    return int(found.replace(tzinfo=timezone.utc).timestamp())


@dataclass(frozen=True)
class Moment:
    """Every time later than ``floor`` becomes ``epoch``; ``floor``: the base image's
    creation, so a layer BuildKit's cache kept from an earlier build (its files' times before
    the lock's) is set to the same moment as one built afresh, and the base's files keep
    theirs. Without a base to ask, ``floor`` is ``epoch``: a plain clamp."""

    epoch: int
    floor: int

    def of(self, when: float) -> int | None:
        return self.epoch if when > self.floor else None


def uv_cache_text(data: bytes, moment: Moment) -> bytes:
    """uv's install record with its time set as a file's is (left as it is otherwise)."""
    stamp = b'"timestamp":{"secs_since_epoch":%d,"nanos_since_epoch":0}' % moment.epoch

    def one(found: re.Match) -> bytes:
        secs = int(found.group(1))
        return found.group(0) if moment.of(secs) is None else stamp

    return _UV_TIME.sub(one, data)


def mods_record_text(data: bytes, moment: Moment) -> bytes:
    """The in-image applier's record with its ``applied_at`` set as a file's time is (an ISO
    time in UTC, to the second, as the applier writes it: the same length)."""

    def one(found: re.Match) -> bytes:
        when = moment.of(epoch_of(found.group(1).decode()))
        if when is None:
            return found.group(0)
        stamp = datetime.fromtimestamp(when, timezone.utc).isoformat(timespec="seconds")
        return b'"applied_at": "%s"' % stamp.encode()

    return _APPLIED_AT.sub(one, data)


def clamp_pyc(data: bytes, moment: Moment) -> bytes:
    """A timestamp-based .pyc (flags 0) records its source's mtime: set as the source's is."""
    if len(data) < 16 or int.from_bytes(data[4:8], "little") != 0:
        return data
    when = moment.of(int.from_bytes(data[8:12], "little"))
    return data if when is None else data[:8] + when.to_bytes(4, "little") + data[12:]


def _octal(field: bytes) -> int:
    if field and field[0] & 0x80:  # base-256 (GNU): a size or time too big for octal
        return int.from_bytes(bytes([field[0] & 0x7F]) + field[1:], "big")
    text = field.split(b"\0", 1)[0].strip()
    return int(text, 8) if text else 0


def _header(block: bytes, size: int | None = None, mtime: int | None = None) -> bytes:
    out = bytearray(block)
    if size is not None:
        out[124:136] = b"%011o\0" % size
    if mtime is not None:
        out[136:148] = b"%011o\0" % mtime
    out[148:156] = b" " * 8
    out[148:156] = b"%06o\0 " % sum(out)
    return bytes(out)


def _pax(data: bytes, moment: Moment) -> bytes:
    """PAX records with an ``mtime`` the moment sets, set; every other record kept."""
    out, rest = [], data
    while rest:
        length_text, _, _ = rest.partition(b" ")
        if not length_text.isdigit():
            raise IntegrityError("a PAX header that is not length-prefixed records")
        length = int(length_text)
        record, rest = rest[:length], rest[length:]
        key, _, value = record[len(length_text) + 1:-1].partition(b"=")
        if key == b"mtime" and moment.of(float(value)) is not None:
            out.append(_record(key, b"%d" % moment.epoch))
        else:
            out.append(record)
    return b"".join(out)


def _record(key: bytes, value: bytes) -> bytes:
    body = b" %s=%s\n" % (key, value)
    size = len(body) + 1
    while len(b"%d" % size) + len(body) != size:
        size += 1
    return b"%d%s" % (size, body)


def _padded(size: int) -> int:
    return -size % BLOCK


def _name(block: bytes) -> str:
    name = block[0:100].split(b"\0", 1)[0]
    prefix = block[345:500].split(b"\0", 1)[0] if block[257:262] == b"ustar" else b""
    return (prefix + b"/" + name if prefix else name).decode(errors="replace")


class _Reader:
    def __init__(self, stream: IO[bytes]):
        self.stream = stream

    def exact(self, size: int) -> bytes:
        data = self.stream.read(size)
        if len(data) != size:
            raise IntegrityError(f"a layer tar ends {size - len(data)} bytes early")
        return data

    def copy(self, size: int, dst: IO[bytes]) -> None:
        while size:
            block = self.exact(min(CHUNK, size))
            dst.write(block)
            size -= len(block)


def uv_cache_records(stream: IO[bytes], moment: Moment) -> dict[str, str]:
    """Pass one: each uv install record's path → the line of its folder's RECORD once its time
    is set (``folder/uv_cache.json,sha256=…,size``, as RECORD spells it, from site-packages)."""
    found: dict[str, str] = {}
    label = "a layer of the image"
    with open_tar(stream, label, IntegrityError) as tar:
        for info in walk(tar, label, IntegrityError, filesystem=True):
            parent = info.name.rsplit("/", 2)
            if not (info.isfile() and parent[-1] == UV_CACHE and len(parent) == 3):
                continue
            before = read_member(tar, info, MAX_EDITED, label, IntegrityError)
            data = uv_cache_text(before, moment)
            if data == before:  # its time is the base's: RECORD stays as it is
                continue
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            found[info.name] = f"{parent[1]}/{UV_CACHE},sha256={digest.decode()},{len(data)}"
    return found


def _edit(name: str, data: bytes, moment: Moment, uv: dict[str, str]) -> bytes:
    if name.endswith(".pyc"):
        return clamp_pyc(data, moment)
    if name.endswith(f"/{UV_CACHE}"):
        return uv_cache_text(data, moment)
    if name == MODS_RECORD:
        return mods_record_text(data, moment)
    folder = name.rsplit("/", 1)[0]
    line = uv.get(f"{folder}/{UV_CACHE}")
    if line is None or not name.endswith(f"/{RECORD}"):
        return data
    prefix = line.split(",", 1)[0] + ","
    lines = [line if one.startswith(prefix) else one for one in data.decode().split("\n")]
    return "\n".join(lines).encode()


def _edited(name: str, size: int) -> bool:
    return size <= MAX_EDITED and (name == MODS_RECORD or
                                   name.endswith((".pyc", f"/{UV_CACHE}", f"/{RECORD}")))


def clamp_layer(src: IO[bytes], dst: IO[bytes], moment: Moment,
                uv: dict[str, str] | None = None) -> None:
    """Pass two: ``src``'s tar written to ``dst`` with every time the moment sets set and the
    edits above; every other byte as it was (``uv``: pass one's lines)."""
    reader, pax_path, long_name = _Reader(src), "", ""
    while True:
        block = src.read(BLOCK)
        if len(block) < BLOCK or block == b"\0" * BLOCK:
            dst.write(block)
            shutil.copyfileobj(src, dst)  # the end-of-archive blocks and padding, as they are
            return
        kind, size = block[156:157], _octal(block[124:136])
        mtime = _octal(block[136:148])
        when = moment.of(mtime)
        if kind in PAX_TYPES:
            data = _pax(reader.exact(size), moment)
            reader.exact(_padded(size))
            paths = re.search(rb"\d+ path=([^\n]*)\n", data)
            pax_path = paths.group(1).decode(errors="replace") if paths else ""
            _write(dst, block, data, when)
            continue
        if kind in (b"L", b"K"):  # a GNU long name or link: its data is the name
            data = reader.exact(size)
            reader.exact(_padded(size))
            long_name = data.rstrip(b"\0").decode(errors="replace") if kind == b"L" else long_name
            _write(dst, block, data, when)
            continue
        name = pax_path or long_name or _name(block)
        pax_path = long_name = ""
        if kind in (b"0", b"\0", b"7") and _edited(name, size):
            data = _edit(name, reader.exact(size), moment, uv or {})
            reader.exact(_padded(size))
            _write(dst, block, data, when)
            continue
        dst.write(_header(block, mtime=when) if when is not None else block)
        reader.copy(size + _padded(size) if kind not in (b"1", b"2", b"5") else 0, dst)


def _write(dst: IO[bytes], block: bytes, data: bytes, when: int | None) -> None:
    size = len(data) if len(data) != _octal(block[124:136]) else None
    dst.write(_header(block, size=size, mtime=when) if (size, when) != (None, None) else block)
    dst.write(data + b"\0" * _padded(len(data)))


def clamp_config(config: dict, diff_ids: list[str], moment: Moment) -> bytes:
    """The image config with the new diff ids and every ``created`` the moment sets, set;
    compact JSON in the config's own key order (the same input, the same bytes)."""
    stamp = datetime.fromtimestamp(moment.epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    def clamp(value: str | None) -> str | None:
        return stamp if value and moment.of(epoch_of(value)) is not None else value

    config = dict(config, rootfs={**config.get("rootfs", {}), "diff_ids": diff_ids})
    config["created"] = clamp(config.get("created"))
    config["history"] = [{**h, "created": clamp(h.get("created"))} if "created" in h else h
                         for h in config.get("history", [])]
    return json.dumps(config, separators=(",", ":")).encode()


def clamp_image(engine: DockerEngine, image: str, moment: Moment, scratch: Path,
                keep: frozenset[str] = frozenset(), config_moment: Moment | None = None) -> str:
    """``image`` (a tag) replaced by its clamped self under the same tag; returns its id. The
    layers are written under ``scratch`` (removed after), so it needs the image's size free;
    ``keep``: the diff ids sent as they are (the base's: no time in them is after it);
    ``config_moment``: the config's dates' (default: ``moment``)."""
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=scratch, prefix="clamp-") as tmp:
        work = Path(tmp)
        blobs = _saved(engine, image, work)
        manifest = load_json(blobs.pop("manifest.json"), f"{image}'s saved manifest",
                             IntegrityError)[0]
        config = load_json(blobs[manifest["Config"]], f"{image}'s saved config", IntegrityError)
        layers = [work / Path(name).name for name in manifest["Layers"]]
        clamped: dict[Path, str] = {}  # a layer the image holds twice is written once
        for path in layers:
            if path in clamped:
                continue
            if f"sha256:{path.name}" in keep:
                move_into_place(path, path.with_name(path.name + ".tar"))
                clamped[path] = path.name
            else:
                clamped[path] = _clamp_file(path, moment)
        new_ids = [clamped[path] for path in layers]
        config_bytes = clamp_config(config, [f"sha256:{h}" for h in new_ids],
                                    config_moment or moment)
        _load(engine, image, config_bytes, layers, new_ids)
        return "sha256:" + hashlib.sha256(config_bytes).hexdigest()


def clamp_wheel(path: Path) -> bool:
    """A compiled wheel's entry dates set to the zip format's first moment: setuptools'
    ``bdist_wheel`` writes each file's mtime, the build's, unless ``SOURCE_DATE_EPOCH`` is in
    the compile step's environment (which would change a default build's compile key). Every
    entry's name, order, bytes, mode and compression kept; extra fields (times) dropped. The same
    compile twice then gives the same wheel, byte for byte. False when it was already so."""
    with zipfile.ZipFile(path) as src:
        entries = src.infolist()
        if all(e.date_time == ZIP_EPOCH and not e.extra for e in entries):
            return False
        out = path.with_name(path.name + ".clamped")
        with zipfile.ZipFile(out, "w") as dst:
            for entry in entries:
                same = zipfile.ZipInfo(entry.filename, ZIP_EPOCH)
                same.compress_type, same.external_attr = entry.compress_type, entry.external_attr
                same.create_system = entry.create_system
                big = entry.file_size >= zipfile.ZIP64_LIMIT
                with src.open(entry) as data, dst.open(same, "w", force_zip64=big) as sink:
                    shutil.copyfileobj(data, sink, CHUNK)
    move_into_place(out, path)
    return True


def _saved(engine: DockerEngine, image: str, work: Path) -> dict[str, bytes]:
    """``docker save``: JSON members kept in memory by name, layer blobs written to ``work``."""
    kept: dict[str, bytes] = {}
    label = f"docker save {image}"
    with engine.save_stream([image]) as stream:
        with open_tar(stream, label, IntegrityError) as outer:
            for info in walk(outer, label, IntegrityError):
                handle = outer.extractfile(info) if info.isfile() else None
                if handle is None:
                    continue
                head = handle.read(1)
                if (head == b"{" or head == b"[") and info.size <= MAX_EDITED:
                    kept[info.name] = head + handle.read()
                    continue
                with open(work / Path(info.name).name, "wb") as out:
                    out.write(head)
                    shutil.copyfileobj(handle, out, CHUNK)
        while stream.read(CHUNK):
            pass
    if "manifest.json" not in kept:
        raise IntegrityError(f"{image}: docker save wrote no manifest.json")
    return kept


def _clamp_file(path: Path, moment: Moment) -> str:
    with open(path, "rb") as src:
        uv = uv_cache_records(src, moment)
    out = path.with_suffix(".clamped")
    with open(path, "rb") as src, open(out, "wb") as dst:
        clamp_layer(src, dst, moment, uv)
    path.unlink()
    sha = hashlib.sha256()
    with open(out, "rb") as done:
        while block := done.read(CHUNK):
            sha.update(block)
    final = path.with_name(sha.hexdigest() + ".tar")
    move_into_place(out, final)
    return sha.hexdigest()


def _load(engine: DockerEngine, image: str, config: bytes, layers: list[Path],
          ids: list[str]) -> None:
    """The clamped image loaded as a docker archive in the scratch folder (image/ocilayout.py:
    the layers the engine holds, the base's, are not sent)."""
    from edgevllm.image.ocilayout import load_layout

    folder = layers[0].parent
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    names = [f"{h}.tar" for h in ids]
    (folder / config_name).write_bytes(config)
    (folder / "manifest.json").write_text(json.dumps(
        [{"Config": config_name, "RepoTags": [image], "Layers": names}]))
    load_layout(engine, folder, ["manifest.json", config_name, *dict.fromkeys(names)])
