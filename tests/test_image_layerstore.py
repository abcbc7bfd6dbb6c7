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
import os
import tarfile
from pathlib import Path

import pytest
from hypothesis import example, given

from edgevllm.image.layerstore import LocalLayerStore, StoreUnusable
from support.layer_store import CHAIN, fake_store, lines, tar_split
from support.properties import PROPERTY, bounded, mutated, replaced_field


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
ENTRIES = tar_split(TAR)


def _store(root: Path, data: bytes) -> LocalLayerStore:
    return fake_store(root, TAR, data)


def _replay(store: LocalLayerStore):
    """Everything the store gives for the layer, or the StoreUnusable that stopped it."""
    try:
        return (b"".join(store.tar_blocks(CHAIN)), store.tar_size(CHAIN),
                list(store.members(CHAIN)), list(store.headers(CHAIN)))
    except StoreUnusable as exc:
        return exc


def test_a_layer_replays_byte_for_byte(tmp_path):
    blocks, size, members, _ = _replay(_store(tmp_path, lines(ENTRIES)))
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
    data = lines(entries if isinstance(entries, list) else [entries])
    found = bounded(_replay, _store(tmp_path_factory.mktemp("store"), data))
    assert isinstance(found, (tuple, StoreUnusable)), found


@PROPERTY
@given(mutated(gzip.compress(lines(ENTRIES))))
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
    store = _store(tmp_path, lines(entries))
    os.symlink("/etc", store.root / "overlay2" / "cache1" / "diff" / "escape")
    found = bounded(_replay, store)
    assert isinstance(found, StoreUnusable) and needle in str(found), found


def test_a_line_of_gigabytes_is_refused_at_the_line_limit(tmp_path, monkeypatch):
    import edgevllm.image.layerstore as layerstore

    monkeypatch.setattr(layerstore, "LINE_LIMIT", 4096)
    store = _store(tmp_path, b'{"type": 2, "payload": "' + b"A" * 100_000 + b'"}\n')
    found = bounded(_replay, store)
    assert isinstance(found, StoreUnusable) and "an entry over 4096 bytes" in str(found)


def test_headers_are_each_members_own_blocks_without_its_contents(tmp_path):
    """The padding of the file before is cut off: each is exactly what tarfile reads the
    member from (the pax header, then the ustar block), and the size its contents have."""
    headers = list(_store(tmp_path, lines(ENTRIES)).headers(CHAIN))
    with tarfile.open(fileobj=io.BytesIO(TAR)) as tar:
        members = tar.getmembers()
    assert [size for _, size in headers] == [m.size for m in members]
    assert [blocks for blocks, _ in headers] == [TAR[m.offset:m.offset_data] for m in members]


def test_a_header_that_is_not_a_whole_ustar_block_is_store_unusable(tmp_path):
    cut = [{"type": 2, "payload": base64.b64encode(bytes(700)).decode()},
           {"type": 1, "name": "a", "size": 0}]
    with pytest.raises(StoreUnusable, match="not a whole ustar block"):
        list(_store(tmp_path, lines(cut)).headers(CHAIN))


@pytest.mark.parametrize(("name", "size", "needle"), [
    ("usr/lib/libx.so.1", 3004, None),
    ("usr/lib/libx.so.1", 3005, "not a regular file of the 3005 bytes"),
    ("usr/share", 0, "not a regular file"),
    ("lib", 0, "symbolic link"),
    ("../x", 1, "points outside its layer"),
    ("escape/passwd", 1, "through a symlink"),
    ("missing.so", 1, "No such file"),
], ids=["the file", "another size", "a folder", "a symlink", "dotdot", "symlink out", "missing"])
def test_open_file_gives_only_a_regular_file_of_its_headers_size(tmp_path, name, size, needle):
    from edgevllm.image.layerstore import open_file

    store = _store(tmp_path, lines(ENTRIES))
    diff = store.diff_dir(CHAIN)
    os.symlink("/etc", diff / "escape")
    if needle is None:
        with open_file(diff, name, size) as handle:
            assert handle.read() == b"\x7fELF" + bytes(3000)
        return
    with pytest.raises(StoreUnusable, match=needle):
        open_file(diff, name, size)
