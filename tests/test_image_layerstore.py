"""The local layer store read without ``docker save``: a layer's tar replayed byte for byte from
its tar-split entries and its unpacked files, on a store laid out as Docker's overlay2 driver
lays it out (built here from a real tar, so no root and no daemon are needed). Hostile stores
(Hypothesis: any entry field replaced, the gzip's bytes mutated; and named cases: a name that
climbs out, a symlink out of the layer, a size of an exabyte, a line of gigabytes) only ever give
``StoreUnusable``, so that the caller falls back to ``docker save``, within the memory and time
bounds."""

from __future__ import annotations

import base64
import gzip
import io
import json
import os
import tarfile
from pathlib import Path

import pytest
from hypothesis import example, given

from edgevllm.image.layerstore import LocalLayerStore, StoreUnusable
from support.properties import PROPERTY, bounded, mutated, replaced_field
from support.sdists import extract_all

CHAIN = "sha256:" + "c" * 64


def _layer_tar() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in (("usr/lib/libx.so.1", b"\x7fELF" + bytes(3000)),
                           ("etc/os-release", b"ID=debian\n"), ("empty", b"")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("lib")
        link.type, link.linkname = tarfile.SYMTYPE, "usr/lib"
        tar.addfile(link)
        folder = tarfile.TarInfo("usr/share/")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
    return buffer.getvalue()


TAR = _layer_tar()


def _tar_split(data: bytes) -> list[dict]:
    """The entries Docker keeps for a layer: raw header bytes (type 2), then each file's name and
    size (type 1, its contents in the diff folder), and the tail."""
    entries, at = [], 0
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar.getmembers():
            entries.append({"type": 2, "payload": base64.b64encode(
                data[at:member.offset_data]).decode()})
            entries.append({"type": 1, "name": member.name + ("/" if member.isdir() else ""),
                            "size": member.size if member.isfile() else 0})
            at = member.offset_data + (member.size if member.isfile() else 0)
    return entries + [{"type": 2, "payload": base64.b64encode(data[at:]).decode()}]


ENTRIES = _tar_split(TAR)


def _store(root: Path, lines: bytes) -> LocalLayerStore:
    layer = root / "image" / "overlay2" / "layerdb" / "sha256" / CHAIN.split(":")[1]
    layer.mkdir(parents=True, exist_ok=True)
    (layer / "cache-id").write_text("cache1\n")
    (layer / "tar-split.json.gz").write_bytes(gzip.compress(lines))
    diff = root / "overlay2" / "cache1" / "diff"
    if not diff.exists():
        diff.mkdir(parents=True)
        with tarfile.open(fileobj=io.BytesIO(TAR)) as tar:
            extract_all(tar, diff)
    return LocalLayerStore(root)


def _lines(entries: list) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in entries)


def _replay(store: LocalLayerStore):
    """Everything the store gives for the layer, or the StoreUnusable that stopped it."""
    try:
        return (b"".join(store.tar_blocks(CHAIN)), store.tar_size(CHAIN),
                list(store.members(CHAIN)))
    except StoreUnusable as exc:
        return exc


def test_a_layer_replays_byte_for_byte(tmp_path):
    blocks, size, members = _replay(_store(tmp_path, _lines(ENTRIES)))
    assert blocks == TAR and size == len(TAR)
    assert ("usr/lib/libx.so.1", 3004) in members and ("usr/share/", 0) in members


@PROPERTY
@given(replaced_field({"entries": ENTRIES}))
@example({"entries": [{"type": 1, "name": "a", "size": "3"}]})
@example({"entries": [{"type": 2, "payload": "not base64!"}]})
@example({"entries": [7, None, "x"]})
@example({"entries": [{"type": 1, "name_raw": "////", "size": 1}]})
@example({"entries": [{"type": 1, "name": "etc/\0passwd", "size": 1}]})
def test_tar_split_entries_with_any_field_replaced(tmp_path_factory, document):
    entries = document.get("entries")
    lines = _lines(entries if isinstance(entries, list) else [entries])
    found = bounded(_replay, _store(tmp_path_factory.mktemp("store"), lines))
    assert isinstance(found, (tuple, StoreUnusable)), found


@PROPERTY
@given(mutated(gzip.compress(_lines(ENTRIES))))
def test_a_tar_split_file_with_its_bytes_mutated(tmp_path_factory, data):
    store = _store(tmp_path_factory.mktemp("store"), b"")
    (store.layerdb / CHAIN.split(":")[1] / "tar-split.json.gz").write_bytes(data)
    assert isinstance(bounded(_replay, store), (tuple, StoreUnusable))


def _file(name: str, size: int) -> list[dict]:
    return [{"type": 1, "name": name, "size": size}]


@pytest.mark.parametrize(("entries", "needle"), [
    (_file("../../../etc/passwd", 10), "points outside its layer"),
    (_file("/etc/passwd", 10), "points outside its layer"),
    (_file("lib/../../x", 10), "points outside its layer"),
    (_file("escape/passwd", 10), "through a symlink"),
    (_file("etc/os-release", 1 << 60), "shorter than its tar header says"),
    (_file("lib", 10), "symbolic link"),  # lib -> usr/lib, inside: still not the file named
], ids=["dotdot", "absolute", "dotdot inside", "symlink out", "an exabyte", "a symlink"])
def test_hostile_entries_are_store_unusable(tmp_path, entries, needle):
    store = _store(tmp_path, _lines(entries))
    os.symlink("/etc", store.root / "overlay2" / "cache1" / "diff" / "escape")
    found = bounded(_replay, store)
    assert isinstance(found, StoreUnusable) and needle in str(found), found


def test_a_line_of_gigabytes_is_refused_at_the_line_limit(tmp_path, monkeypatch):
    import edgevllm.image.layerstore as layerstore

    monkeypatch.setattr(layerstore, "LINE_LIMIT", 4096)
    store = _store(tmp_path, b'{"type": 2, "payload": "' + b"A" * 100_000 + b'"}\n')
    found = bounded(_replay, store)
    assert isinstance(found, StoreUnusable) and "an entry over 4096 bytes" in str(found)
