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
real ones); image/clampimage.py clamps a whole image in the engine with it.
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
from edgevllm.common.errors import IntegrityError
from edgevllm.common.fsutil import move_into_place

# BuildKit's build argument for the moment an image's config dates are clamped to (the relabel
# step passes it: a config-only step, so no layer cache depends on it)
EPOCH_ARG = "SOURCE_DATE_EPOCH"
BLOCK = 512
CHUNK = 1 << 20
MAX_EDITED = 16 << 20  # the files edited in memory (RECORD, uv_cache.json) are a few KiB
SPOOL_IN_MEMORY = 32 << 20  # what follows a waiting RECORD in its folder, before it spills
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
            found[info.name] = _record_line(parent[1], data)
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
                uv: dict[str, str] | None = None, spill: Path | None = None) -> None:
    """``src``'s tar written to ``dst`` with every time the moment sets set and the edits
    above; every other byte as it was. ``uv``: pass one's lines (``uv_cache_records``); without
    them, one pass over a stream (``docker save``'s): a RECORD waits, with what follows it in
    its folder (a few metadata files: in memory, past ``SPOOL_IN_MEMORY`` in a file under
    ``spill``), for that folder's uv record, as a tar of a folder lists RECORD before
    ``uv_cache.json`` (a folder's members in one run, as docker's and BuildKit's layer tars
    list them: a uv record met after its RECORD went out is an ``IntegrityError``); the output
    is the same bytes either way."""
    reader, pax_path, long_name = _Reader(src), "", ""
    out = _Output(dst, moment, dict(uv) if uv is not None else {}, uv is None, spill)
    while True:
        block = src.read(BLOCK)
        if len(block) < BLOCK or block == b"\0" * BLOCK:
            out.release()
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
            _write(out.sink, block, data, when)
            continue
        if kind in (b"L", b"K"):  # a GNU long name or link: its data is the name
            data = reader.exact(size)
            reader.exact(_padded(size))
            long_name = data.rstrip(b"\0").decode(errors="replace") if kind == b"L" else long_name
            _write(out.sink, block, data, when)
            continue
        name = pax_path or long_name or _name(block)
        pax_path = long_name = ""
        out.arriving(name)
        if kind in (b"0", b"\0", b"7") and _edited(name, size):
            data = reader.exact(size)
            reader.exact(_padded(size))
            out.edited(name, block, data, when)
            continue
        out.sink.write(_header(block, mtime=when) if when is not None else block)
        reader.copy(size + _padded(size) if kind not in (b"1", b"2", b"5") else 0, out.sink)


class _Output:
    """Pass two's output, holding back a RECORD (and what follows it) until its folder's uv
    record is known or the folder is left (one pass: ``waits``)."""

    def __init__(self, dst: IO[bytes], moment: Moment, uv: dict[str, str], waits: bool,
                 spill: Path | None):
        self.dst, self.moment, self.uv, self.waits, self.spill = dst, moment, uv, waits, spill
        self.held: tuple[str, bytes, bytes, int | None] | None = None  # name, block, data, when
        self.spool: IO[bytes] | None = None
        self.written: set[str] = set()  # folders whose RECORD went out without a uv line

    @property
    def sink(self) -> IO[bytes]:
        return self.spool if self.spool is not None else self.dst

    def arriving(self, name: str) -> None:
        if self.held and not name.startswith(self.held[0].rsplit("/", 1)[0] + "/"):
            self.release()  # a member of another folder: no uv record for the held RECORD

    def edited(self, name: str, block: bytes, data: bytes, when: int | None) -> None:
        parts = name.rsplit("/", 2)
        if self.waits and parts[-1] == UV_CACHE and len(parts) == 3:
            before, data = data, uv_cache_text(data, self.moment)
            if data != before:  # its time set: its RECORD line must say so
                self.uv[name] = _record_line(parts[1], data)
                if name.rsplit("/", 1)[0] in self.written:
                    raise IntegrityError(
                        f"a layer lists {name} apart from its folder's RECORD, which went out "
                        "before it: the clamp reads a folder's members in one run, as docker's "
                        "and BuildKit's layer tars list them; build without --reproducible")
            if self.held and self.held[0].rsplit("/", 1)[0] == name.rsplit("/", 1)[0]:
                self.release()
            _write(self.sink, block, data, when)
            return
        folder = name.rsplit("/", 1)[0]
        if self.waits and parts[-1] == RECORD and f"{folder}/{UV_CACHE}" not in self.uv:
            self.release()
            self.held = (name, block, data, when)
            self.spool = tempfile.SpooledTemporaryFile(  # type: ignore[assignment]
                SPOOL_IN_MEMORY, dir=str(self.spill) if self.spill else None)
            return
        _write(self.sink, block, _edit(name, data, self.moment, self.uv), when)

    def release(self) -> None:
        if self.held is None:
            return
        (name, block, data, when), spool = self.held, self.spool
        self.held = self.spool = None
        self.written.add(name.rsplit("/", 1)[0])
        _write(self.dst, block, _edit(name, data, self.moment, self.uv), when)
        assert spool is not None
        with spool:
            spool.seek(0)
            shutil.copyfileobj(spool, self.dst, CHUNK)


def _record_line(folder: str, data: bytes) -> str:
    """RECORD's line for a uv install record of ``data`` (its path from site-packages)."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"{folder}/{UV_CACHE},sha256={digest.decode()},{len(data)}"


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
