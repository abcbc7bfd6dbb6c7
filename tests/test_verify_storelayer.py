"""A layer of the local store read for its verdict alone (tar-split headers, the libraries mapped
where they lie) gives the record its whole tar replayed and read by the one layer reader gives:
the same libraries' reports (real nvcc-built libraries: offsets and kernel names included), the
same library paths, whiteouts and opaque folders; on layers that overwrite, delete and hide
libraries, and on headers of every shape docker and tarfile write (pax and GNU long names, a
name that is no UTF-8, hard and symbolic links, a folder named like a library, an empty or
non-ELF ``.so``). What the store cannot give exactly is ``StoreUnusable`` (the caller takes
another road), a header that breaks the member rules ``NotATarballError``, within the bounds."""

from __future__ import annotations

import base64
import io
import os
import tarfile

import pytest
from hypothesis import given

from edgevllm.common.errors import EdgeVllmError, NotATarballError
from edgevllm.image.layerstore import StoreUnusable
from edgevllm.specs.cuda import CudaArch
from edgevllm.verify.api import TargetInspect
from edgevllm.verify.archive import Layer, read_layer
from edgevllm.verify.layered import record_of
from edgevllm.verify.readers import library_keep
from edgevllm.verify.storelayer import hash_layers, header_info, read_store_layer
from support.cuda_libs import nvcc_libs
from support.layer_store import CHAIN, fake_store, lines, tar_split
from support.properties import PROPERTY, bounded, replaced_field
from support.verify_layers import SITE, facts, layer_tars

SPARK = CudaArch(12, 1)
LONG = f"{SITE}/" + "deep/" * 30 + "libdeep.so"  # over 100 characters: a long-name header


def _odd_tar(form: int) -> bytes:
    """A layer with every header shape the reader must take as tarfile takes it."""
    libs = nvcc_libs()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=form) as tar:
        def add(name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE, link: str = ""):
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.size = kind, link, len(data)
            tar.addfile(info, io.BytesIO(data))
        add(f"{SITE}/x.so/", kind=tarfile.DIRTYPE)  # a folder named like a library
        add(LONG, libs["sm_121a"].read_bytes())
        add(f"{SITE}/caf\udce9/libn.so.1", libs["sm_110a"].read_bytes())  # no UTF-8 name
        add(f"{SITE}/libhard.so", kind=tarfile.LNKTYPE, link=LONG)
        add(f"{SITE}/libsym.so", kind=tarfile.SYMTYPE, link="deep/libdeep.so")
        add(f"{SITE}/empty.so")
        add(f"{SITE}/script.so", b"INPUT(libc.so.6)\n")
        add(f"{SITE}/tiny.so", b"\x7fEL")
        add(f"{SITE}/.wh.libgone.so")
        add(f"{SITE}/opq/.wh..wh..opq")
        add(f"{SITE}/lib/libmulti.so", libs["multi_gencode"].read_bytes())
    return buffer.getvalue()


def _replayed(tar: bytes):
    return record_of(read_layer(io.BytesIO(tar), "layer", library_keep(TargetInspect(SPARK))))


def _from_store(store):
    return record_of(read_store_layer(store, CHAIN, "layer", TargetInspect(SPARK)))


def _same(one, two) -> None:
    assert (one.present, sorted(one.whiteouts), sorted(one.opaque)) == \
        (two.present, sorted(two.whiteouts), sorted(two.opaque))
    assert sorted(one.kept) == sorted(two.kept)
    assert facts([one.kept[p] for p in sorted(one.kept)]) == \
        facts([two.kept[p] for p in sorted(two.kept)])


@pytest.mark.parametrize("which", ["lower", "middle", "top"])
def test_each_layer_gives_the_record_of_its_replayed_tar(tmp_path, which):
    tar = layer_tars()[which]
    found = _from_store(fake_store(tmp_path, tar))
    _same(found, _replayed(tar))
    assert found.kept or found.whiteouts


@pytest.mark.parametrize("form", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT],
                         ids=["pax", "gnu", "ustar"])
def test_every_header_shape_gives_the_record_of_its_replayed_tar(tmp_path, form):
    if form == tarfile.USTAR_FORMAT:  # no long names nor raw bytes in plain ustar
        tar = _plain_ustar({f"{SITE}/a/liba.so": nvcc_libs()["lz4"].read_bytes()})
    else:
        tar = _odd_tar(form)
    found = _from_store(fake_store(tmp_path, tar))
    _same(found, _replayed(tar))
    if form != tarfile.USTAR_FORMAT:
        assert {LONG, f"{SITE}/lib/libmulti.so"} <= set(found.kept)
        assert f"{SITE}/libhard.so" in found.present and f"{SITE}/x.so" not in found.present
        assert found.whiteouts == [f"{SITE}/libgone.so"] and found.opaque == [f"{SITE}/opq"]


def _plain_ustar(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_a_library_whose_size_on_disk_is_not_its_headers_is_store_unusable(tmp_path):
    tar = _odd_tar(tarfile.PAX_FORMAT)
    store = fake_store(tmp_path, tar)
    with open(store.diff_dir(CHAIN) / LONG, "ab") as handle:
        handle.write(b"more")
    with pytest.raises(StoreUnusable, match="not a regular file of the"):
        _from_store(store)


def test_a_library_replaced_by_a_symlink_is_store_unusable(tmp_path):
    store = fake_store(tmp_path, _odd_tar(tarfile.PAX_FORMAT))
    diff = store.diff_dir(CHAIN)
    os.unlink(diff / LONG)
    os.symlink("/etc/passwd", diff / LONG)
    with pytest.raises(StoreUnusable):
        _from_store(store)


def test_a_tar_split_size_that_is_not_the_headers_is_refused(tmp_path):
    tar = _plain_ustar({"usr/lib/liba.so": b"\x7fELF" + bytes(60)})
    entries = tar_split(tar)
    entries[1]["size"] = 10
    with pytest.raises(NotATarballError, match="says 64 bytes, its tar-split entry 10"):
        _from_store(fake_store(tmp_path, tar, lines(entries)))


def test_a_member_listed_twice_is_refused_as_in_a_replayed_tar(tmp_path):
    tar = _plain_ustar({"usr/lib/liba.so": b"x"})
    entries = tar_split(tar)
    twice = entries[:2] + entries[:2] + entries[2:]
    twice[2] = {"type": 2, "payload": base64.b64encode(bytes(511) + tar[:512]).decode()}
    with pytest.raises(NotATarballError, match="listed twice"):
        _from_store(fake_store(tmp_path, tar, lines(twice)))


def test_a_header_is_read_as_tarfile_reads_it():
    tar = _odd_tar(tarfile.PAX_FORMAT)
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        members = archive.getmembers()
    for member in members:
        parsed = header_info(tar[member.offset:member.offset_data], "layer")
        assert (parsed.name, parsed.type, parsed.size, parsed.linkname) == \
            (member.name, member.type, member.size, member.linkname)


ENTRIES = tar_split(_plain_ustar({"usr/lib/liba.so": b"\x7fELF" + bytes(60), "etc/x": b"x"}))


@PROPERTY
@given(replaced_field({"entries": ENTRIES}))
def test_tar_split_entries_with_any_field_replaced(tmp_path_factory, document):
    entries = document.get("entries")
    tar = _plain_ustar({"usr/lib/liba.so": b"\x7fELF" + bytes(60), "etc/x": b"x"})
    store = fake_store(tmp_path_factory.mktemp("store"), tar,
                       lines(entries if isinstance(entries, list) else [entries]))

    def read():
        try:
            return _from_store(store)
        except StoreUnusable as exc:
            return exc
    assert isinstance(bounded(read), (Layer, EdgeVllmError, StoreUnusable))


def test_the_full_hash_is_asked_for_by_its_setting(monkeypatch):
    for value, asked in (("", False), ("0", False), ("1", True), ("yes", True)):
        monkeypatch.setenv("EDGEVLLM_VERIFY_HASH_LAYERS", value)
        assert hash_layers() is asked
