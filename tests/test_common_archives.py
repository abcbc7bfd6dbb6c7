"""The archive gate (common/archives.py): hostile tars, built member by member (links in and out,
sparse members, device files, FIFOs, names twice or out of the archive, sizes that lie, oversized
extended headers), plain or zstd-compressed, read by every reader that goes through it: the gate
itself, the published-set check (image/setcheck.py), verify's layer reader (verify/archive.py)
and the cache bundle (serve/cache/bundle.py). Each gives a result or one line of its own error,
within the memory bound and the deadline; a hostile member is never a result."""

from __future__ import annotations

import io
import tarfile
import tracemalloc
from typing import IO

import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from edgevllm.common.archives import (
    MAX_HEADER_BYTES,
    open_tar,
    read_file,
    read_member,
    walk,
)
from edgevllm.common.errors import (
    ConfigError,
    EdgeVllmError,
    IntegrityError,
    NotATarballError,
)
from edgevllm.image.setcheck import check_archive
from edgevllm.verify.archive import read_image
from support.properties import PROPERTY, bounded

HOSTILE = {"sparse", "symlink-out", "hardlink-out", "device", "fifo", "twice", "dotdot"}
_NAMES = st.sampled_from(["a", "b/c", "d/e/f", "manifest.json", "blobs/sha256/x"])


def _info(name: str, kind: str, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    if kind == "sparse":  # a GNU sparse member (PAX 0.1): 3.2 GB of holes, no data
        info.pax_headers = {"GNU.sparse.map": "3435973836,0", "GNU.sparse.size": "3435973836",
                            "GNU.sparse.name": name}
    elif kind in ("symlink-in", "symlink-out"):
        info.type = tarfile.SYMTYPE
        info.linkname = "a" if kind == "symlink-in" else "../../etc/passwd"
    elif kind == "hardlink-out":
        info.type, info.linkname = tarfile.LNKTYPE, "../outside"
    elif kind == "device":
        info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
    elif kind == "fifo":
        info.type = tarfile.FIFOTYPE
    return info


@st.composite
def hostile_tars(draw) -> tuple[bytes, set[str]]:
    """(a tar, plain or zstd, of a few members; the hostile kinds it holds)."""
    kinds = draw(st.lists(st.sampled_from(["file", "file", "dir", "symlink-in", *sorted(HOSTILE),
                                           "lying-size"]), min_size=1, max_size=6))
    buffer, used, held = io.BytesIO(), list[str](), set[str]()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for kind in kinds:
            name = draw(_NAMES)
            if kind == "twice" and used:
                name = used[-1]
            elif kind == "dotdot":
                name = "../" + name
            elif name in used or kind == "twice":
                continue
            used.append(name)
            data = draw(st.binary(max_size=64)) if kind in ("file", "lying-size") else b""
            info = _info(name, "dir" if kind == "dir" else kind, len(data))
            if kind == "dir":
                info.type = tarfile.DIRTYPE
            tar.addfile(info, io.BytesIO(data) if info.isfile() and not info.sparse else None)
            if kind == "lying-size":
                info.size = 1 << 30  # the header declares a gigabyte the archive does not hold
            held.add(kind)
    raw = buffer.getvalue()
    if "lying-size" in held:
        raw = raw[:len(raw) - 1024]  # its end blocks gone too: the data stops short
    if draw(st.booleans()):
        raw = zstandard.ZstdCompressor().compress(raw)
    return raw, held


def _walk(raw: bytes, filesystem: bool) -> list[str]:
    stream: IO[bytes] = io.BytesIO(raw)
    if raw[:4] == b"\x28\xb5\x2f\xfd":
        stream = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw),
                                                            read_across_frames=True)
    with open_tar(stream, "t.tar", IntegrityError) as tar:
        names = []
        for member in walk(tar, "t.tar", IntegrityError, filesystem):
            if member.isfile():
                read_member(tar, member, 1 << 20, "t.tar", IntegrityError)
            names.append(member.name)
        return names


@PROPERTY
@given(hostile_tars())
def test_the_gate_refuses_every_hostile_member_in_one_line(archive):
    raw, held = archive
    result = bounded(_walk, raw, False)
    if held & HOSTILE:
        assert isinstance(result, IntegrityError), (held, result)
    as_layer = bounded(_walk, raw, True)
    if held & {"sparse", "twice", "dotdot", "hardlink-out"}:
        assert isinstance(as_layer, IntegrityError), (held, as_layer)


@PROPERTY
@given(hostile_tars())
def test_every_reader_behind_the_gate_is_bounded(archive):
    """The set check and verify's layer reader: a result or their own one line, never a
    traceback, within the memory bound; the set check never passes a hostile archive."""
    raw, held = archive
    shape = bounded(check_archive, io.BytesIO(raw), "set.tar")
    assert isinstance(shape, IntegrityError)  # none of these is one whole image
    found = bounded(read_image, io.BytesIO(raw), "image.tar", lambda *_: None)
    if held & {"sparse", "twice", "dotdot", "hardlink-out"}:
        assert isinstance(found, NotATarballError), (held, found)


def _pax_bomb(declared: int) -> bytes:
    """A tar whose first header is a pax header declaring ``declared`` bytes, then zeros: 2 GiB
    of it compresses to a few hundred KB."""
    header = tarfile.TarInfo("././@PaxHeader")
    header.type, header.size = tarfile.XHDTYPE, declared
    block = header.tobuf(tarfile.USTAR_FORMAT)
    compressor = zstandard.ZstdCompressor().compressobj()
    out = [compressor.compress(block)]
    zeros = bytes(1 << 20)
    for _ in range(min(declared, 64 << 20) >> 20):
        out.append(compressor.compress(zeros))
    return b"".join(out) + compressor.flush()


def test_an_extended_header_is_refused_before_it_is_read():
    """tarfile reads a pax header's declared size into memory at once: 2 GiB declared (64 MiB
    present here) would be gigabytes; the gate refuses it at the header."""
    raw = _pax_bomb(2 << 30)
    tracemalloc.start()
    try:
        with pytest.raises(IntegrityError, match="extended header declares 2147483648 bytes"):
            _walk(raw, False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20 and MAX_HEADER_BYTES < 2 << 30
    with pytest.raises(NotATarballError, match="extended header"):
        read_image(io.BytesIO(raw), "layer.tar.zst", lambda *_: None)


def test_tarfile_s_list_of_members_is_not_kept():
    """20,000 empty members (a 50 KB zstd file; millions fit in a few MB): tarfile's own list
    of every member read would grow with them; the gate's walk keeps only their names."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for index in range(20_000):
            tar.addfile(tarfile.TarInfo(f"f{index}"), io.BytesIO(b""))
    stream = io.BytesIO(buffer.getvalue())
    tracemalloc.start()
    try:
        names = 0
        with open_tar(stream, "many.tar", IntegrityError) as tar:
            for _ in walk(tar, "many.tar", IntegrityError):
                names += 1
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert names == 20_000 and peak < 4 << 20, peak >> 10  # tarfile's own list: over 12 MiB


def test_a_named_file_is_read_to_its_limit_and_no_further(tmp_path):
    with pytest.raises(ConfigError, match="--key /dev/zero: over the 64 KiB"):
        read_file("/dev/zero", 64 << 10, "--key", ConfigError)
    (tmp_path / "k").write_bytes(b"x" * 10)
    assert read_file(tmp_path / "k", 10, "--key", ConfigError) == b"x" * 10
    with pytest.raises(ConfigError, match="over the 9 bytes"):
        read_file(tmp_path / "k", 9, "--key", ConfigError)


def test_a_member_is_read_to_its_limit():
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("METADATA")
        info.size = 5000
        tar.addfile(info, io.BytesIO(b"m" * 5000))
    with open_tar(io.BytesIO(buffer.getvalue()), "x.tar", IntegrityError) as tar:
        member = next(walk(tar, "x.tar", IntegrityError))
        with pytest.raises(IntegrityError, match="declares 5000 bytes, over the 4 KiB"):
            read_member(tar, member, 4096, "x.tar", IntegrityError)


def test_every_refusal_is_an_edgevllm_error():
    """The gate's error is the caller's class: one line, its exit code."""
    raw = tarfile.TarInfo("../x").tobuf() + bytes(1024)
    for error in (IntegrityError, NotATarballError, ConfigError):
        with pytest.raises(error) as caught:
            with open_tar(io.BytesIO(raw), "x.tar", error) as tar:
                list(walk(tar, "x.tar", error))
        assert isinstance(caught.value, EdgeVllmError) and "\n" not in str(caught.value)
