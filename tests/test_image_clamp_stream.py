"""image/clamp.py's one pass over a stream (``clamp_layer`` without ``uv``, what the clamp does on
``docker save``'s output) against its two passes (``uv_cache_records``, then ``clamp_layer`` with
their lines), on real tar files: the same bytes, member by member, for the orders a layer tar lists
a folder in (RECORD before ``uv_cache.json``, the other way round, no uv record at all, other files
and folders between them, the archive's end right after a waiting RECORD, long names in each tar
format), what follows a waiting RECORD spilled to a file past ``SPOOL_IN_MEMORY`` and that file
gone after; and, for random layers, a tar that tarfile reads whose RECORD names its uv record's
sha256 and size. The one pass reads the stream once, front to back (``Forward``: no seek).

What the one pass assumes, as a tar of a folder tree lists it (moby's and BuildKit's layer tars
walk the tree in order): a folder's members come in one run. A RECORD whose folder is left before
its uv record arrives has gone out as it was, where two passes would have rewritten its line: the
one pass stops there with one line (``test_a_uv_record_apart_from_its_folder_stops_the_one_pass``),
and the random layers here keep each folder in one run."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgevllm.image import clamp
from edgevllm.image.clamp import Moment, clamp_layer, uv_cache_records
from support.tars import tar_bytes

EPOCH = 1_700_000_000
FLOOR = EPOCH - 86_400  # the base image's creation
OLD = FLOOR - 1_000     # a base file's time
NEW = EPOCH + 100       # a build's
MOMENT = Moment(EPOCH, FLOOR)
A, B = "sp/a-1.dist-info", "sp/b_c-2.0.dist-info"
LONG = "sp/" + "l" * 110 + "-1.dist-info"  # a PAX path, a GNU long name, a ustar prefix
FORMATS = {"pax": tarfile.PAX_FORMAT, "gnu": tarfile.GNU_FORMAT, "ustar": tarfile.USTAR_FORMAT}
Members = list[tuple[str, bytes | None, int]]
BIG = os.urandom(64 << 10)  # past a spool of a few KiB


class Forward:
    """A stream read once, front to back, as ``docker save``'s is: no seek, no second look."""

    def __init__(self, data: bytes):
        self._data = io.BytesIO(data)

    def read(self, size: int = -1) -> bytes:
        return self._data.read(size)


def uv_json(when: int) -> bytes:
    return b'{"timestamp":{"secs_since_epoch":%d,"nanos_since_epoch":123},"commit":null}' % when


def record(folder: str) -> bytes:
    """A RECORD as uv writes it: paths from site-packages, uv's record listed with its hash."""
    name = folder.rsplit("/", 1)[1]
    return (f"{name}/METADATA,sha256=m,3\n{name}/uv_cache.json,sha256=old,77\n"
            f"{name}/RECORD,,\n").encode()


def dist(folder: str, *files: str, when: int = NEW, uv_when: int = NEW) -> Members:
    """``folder``'s members in the order given; ``licenses/`` a folder, ``uv_cache.json`` uv's
    record of an install at ``uv_when``."""
    data = {"RECORD": record(folder), "uv_cache.json": uv_json(uv_when), "INSTALLER": b"pip\n",
            "WHEEL": b"Wheel-Version: 1.0\n", "METADATA": b"Name: x\n", "licenses/": None,
            "licenses/LICENSE": b"MIT\n", "top_level.txt": b"a\n"}
    return [(f"{folder}/{name}".rstrip("/"), data[name], when) for name in files]


def two_passes(raw: bytes, moment: Moment = MOMENT) -> bytes:
    uv = uv_cache_records(io.BytesIO(raw), moment)
    out = io.BytesIO()
    clamp_layer(io.BytesIO(raw), out, moment, uv)
    return out.getvalue()


def one_pass(raw: bytes, moment: Moment = MOMENT, spill=None) -> bytes:
    out = io.BytesIO()
    clamp_layer(Forward(raw), out, moment, spill=spill)  # type: ignore[arg-type]
    return out.getvalue()


def contents(raw: bytes) -> dict[str, bytes]:
    """Each member's bytes (a folder's: b""), in the tar's order, as tarfile reads them."""
    found = {}
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        for member in tar:
            handle = tar.extractfile(member) if member.isfile() else None
            found[member.name] = handle.read() if handle else b""
    return found


def same(members: Members, format: int = tarfile.PAX_FORMAT) -> dict[str, bytes]:
    """One pass gives two passes' bytes, a tar listing what was given in its order; its
    members."""
    raw = tar_bytes(members, format)
    one = one_pass(raw)
    assert one == two_passes(raw)
    found = contents(one)
    assert list(found) == [name for name, _, _ in members]
    return found


def agrees(found: dict[str, bytes], folder: str) -> None:
    """``folder``'s RECORD names its uv record by the sha256 and size it has now (the wheel
    format's urlsafe base64 without padding), the record's time being the moment."""
    data = found[f"{folder}/uv_cache.json"]
    assert data.startswith(b'{"timestamp":{"secs_since_epoch":%d,"nanos_since_epoch":0}' % EPOCH)
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    line = f"{folder.rsplit('/', 1)[1]}/uv_cache.json,sha256={digest},{len(data)}"
    lines = found[f"{folder}/RECORD"].decode().splitlines()
    assert line in lines and len(lines) == 3 and lines[1] == line


def test_a_record_before_its_uv_record_as_a_tar_lists_a_folder():
    found = same([("sp", None, NEW), *dist(A, "METADATA", "RECORD", "WHEEL", "uv_cache.json"),
                  ("sp/a/__init__.py", b"", NEW)])
    agrees(found, A)


def test_a_uv_record_apart_from_its_folder_stops_the_one_pass():
    """RECORD, another folder's file, then RECORD's uv record: the RECORD went out before its
    line was known, so the clamp stops (a RECORD naming an old sha256 would be a broken
    install in a 'reproducible' image); a uv record of the base's time changes no line."""
    from edgevllm.common.errors import IntegrityError

    apart = [*dist(A, "RECORD", "WHEEL"), ("sp/a.py", b"a", NEW), *dist(A, "uv_cache.json")]
    with pytest.raises(IntegrityError, match="apart from its folder's RECORD"):
        one_pass(tar_bytes(apart, tarfile.PAX_FORMAT))
    kept = [*dist(A, "RECORD", "WHEEL"), ("sp/a.py", b"a", NEW),
            *dist(A, "uv_cache.json", uv_when=OLD)]
    assert one_pass(tar_bytes(kept, tarfile.PAX_FORMAT)) == \
        two_passes(tar_bytes(kept, tarfile.PAX_FORMAT))


def test_a_uv_record_before_its_record():
    agrees(same(dist(A, "uv_cache.json", "METADATA", "RECORD", "WHEEL")), A)


def test_a_folder_pip_installed_has_a_record_and_no_uv_record():
    found = same([*dist(A, "INSTALLER", "METADATA", "RECORD", "WHEEL"), ("sp/a.py", b"a", NEW)])
    assert found[f"{A}/RECORD"] == record(A)


@pytest.mark.parametrize("uv", [("uv_cache.json",), ()], ids=["uv-last", "no-uv"])
def test_a_record_followed_by_its_folder_then_by_another(uv):
    """What follows a waiting RECORD in its folder waits with it, a folder and its file too;
    a member of another folder lets it go."""
    found = same([*dist(A, "RECORD", "WHEEL", "licenses/", "licenses/LICENSE", "top_level.txt",
                        *uv), ("sp/a/__init__.py", b"", NEW), ("sp/a/x.py", b"x", OLD)])
    if uv:
        agrees(found, A)
    else:
        assert found[f"{A}/RECORD"] == record(A)


@pytest.mark.parametrize("first", [("RECORD", "WHEEL", "uv_cache.json"), ("RECORD", "WHEEL")],
                         ids=["uv", "pip"])
def test_two_folders_one_after_the_other(first):
    found = same([*dist(A, *first), *dist(B, "RECORD", "WHEEL", "uv_cache.json")])
    agrees(found, B)
    if "uv_cache.json" in first:
        agrees(found, A)
    else:
        assert found[f"{A}/RECORD"] == record(A)


def test_a_uv_record_of_the_base_s_time_leaves_its_record():
    found = same(dist(A, "RECORD", "WHEEL", "uv_cache.json", uv_when=OLD))
    assert found[f"{A}/RECORD"] == record(A) and found[f"{A}/uv_cache.json"] == uv_json(OLD)


@pytest.mark.parametrize("format", FORMATS.values(), ids=FORMATS.keys())
def test_long_names_before_a_record_and_its_uv_record(format):
    """A PAX header, a GNU long name or a ustar prefix names the RECORD, what follows it and its
    uv record: read, and held, as the member it names."""
    long_file = "licenses/" + "n" * 95 if format != tarfile.USTAR_FORMAT else "licenses/LICENSE"
    members = [*dist(LONG, "RECORD", "WHEEL", "licenses/"), (f"{LONG}/{long_file}", b"L", NEW),
               *dist(LONG, "uv_cache.json"), ("sp/" + "x" * 120 + "/a.py", b"a", NEW)]
    agrees(same(members, format), LONG)


@pytest.mark.parametrize("end", ["blocks", "cut"])
def test_the_archive_ends_right_after_a_waiting_record(end):
    """The end-of-archive blocks, or the stream itself (a tar written without them), come
    right after a RECORD still waiting: it is written, with what waited after it."""
    members = [("sp/a.py", b"a", NEW), *dist(A, "METADATA", "RECORD")]
    if end == "blocks":
        assert list(same(members))[-1] == f"{A}/RECORD"
        return
    raw = tar_bytes(members)
    cut = -(-len(raw.rstrip(b"\0")) // 512) * 512  # up to the RECORD's padded data
    one = one_pass(raw[:cut])
    assert one == two_passes(raw[:cut])
    assert list(contents(one)) == [name for name, _, _ in members]


def spilled(monkeypatch) -> list:
    """The files a SpooledTemporaryFile rolled over into: (the file, where it was made)."""
    made: list = []
    real = tempfile.TemporaryFile

    def recording(*args, **kwargs):
        handle = real(*args, **kwargs)
        made.append((handle, os.readlink(f"/proc/self/fd/{handle.fileno()}")))
        return handle

    monkeypatch.setattr(tempfile, "TemporaryFile", recording)
    return made


def test_what_waits_past_the_spool_is_spilled_into_the_folder_given_and_removed(
        tmp_path, monkeypatch):
    spill = tmp_path / "spill"
    spill.mkdir()
    made = spilled(monkeypatch)
    members = [*dist(A, "RECORD", "WHEEL"), (f"{A}/big.bin", BIG, NEW),
               *dist(A, "uv_cache.json"), ("sp/a/__init__.py", b"", NEW)]
    raw = tar_bytes(members)
    assert one_pass(raw, spill=spill) == two_passes(raw)
    assert made == []  # under SPOOL_IN_MEMORY: in memory
    monkeypatch.setattr(clamp, "SPOOL_IN_MEMORY", 4 << 10)
    one = one_pass(raw, spill=spill)
    assert one == two_passes(raw)
    agrees(contents(one), A)
    assert contents(one)[f"{A}/big.bin"] == BIG
    assert len(made) == 1, made
    handle, where = made[0]
    assert where.startswith(f"{spill}/"), where
    assert handle.closed and os.listdir(spill) == []



@pytest.mark.parametrize("members", [
    [*dist(A, "RECORD", "WHEEL"), ("sp/a/big.so", BIG, NEW)],
    [*dist(A, "RECORD", "uv_cache.json"), (f"{A}/big.bin", BIG, NEW)],
    [*dist(A, "uv_cache.json", "RECORD"), (f"{A}/big.bin", BIG, NEW)]],
    ids=["folder-left", "uv-arrived", "uv-known"])
def test_a_record_waits_only_while_its_uv_record_may_come(members, tmp_path, monkeypatch):
    """A RECORD goes out, and nothing after it waits, once its folder is left or its uv
    record's line is known: a layer's big files are never held."""
    made = spilled(monkeypatch)
    monkeypatch.setattr(clamp, "SPOOL_IN_MEMORY", 4 << 10)
    raw = tar_bytes(members)
    assert one_pass(raw, spill=tmp_path) == two_passes(raw)
    assert made == []


# --- random layers ---------------------------------------------------------------------------
FILES = ("RECORD", "uv_cache.json", "WHEEL", "METADATA", "licenses/", "licenses/LICENSE",
         "top_level.txt")
OUTSIDE = ("sp/a/__init__.py", "sp/zz.py", "etc/x.conf", "sp/a/__pycache__/m.cpython-311.pyc",
           "sp/" + "o" * 120 + ".py")
TIMES = st.sampled_from([OLD, FLOOR + 5, NEW])


@st.composite
def layers(draw) -> tuple[Members, int]:
    """1-3 dist-info folders, each listed in one run in any order within it (as a tar of a
    folder tree lists it), and files outside them between those runs; each time before or
    after the base's."""
    folders = draw(st.lists(st.sampled_from([A, B, LONG]), min_size=1, max_size=3, unique=True))
    runs: list[Members] = []
    for folder in folders:
        names = draw(st.lists(st.sampled_from(FILES), min_size=1, unique=True))
        if "licenses/LICENSE" in names and "licenses/" in names:  # the folder before its file
            names.remove("licenses/")
            names.insert(names.index("licenses/LICENSE"), "licenses/")
        runs.append([member for name in names
                     for member in dist(folder, name, when=draw(TIMES), uv_when=draw(TIMES))])
    runs += [[(name, b"x", draw(TIMES))] for name in draw(st.lists(st.sampled_from(OUTSIDE),
                                                                   unique=True))]
    order = draw(st.permutations(runs))
    return [member for run in order for member in run], draw(st.sampled_from([*FORMATS.values()]))


@settings(max_examples=60, deadline=None)
@given(layers())
def test_one_pass_is_two_passes_for_random_layers(layer):
    members, format = layer
    if format == tarfile.USTAR_FORMAT:  # a name of 120 characters in one part: not in ustar
        members = [m for m in members if not m[0].startswith("sp/ooo")]
    found = same(members, format)
    given_ = {name: (data, when) for name, data, when in members}
    for folder in (A, B, LONG):
        uv, rec = f"{folder}/uv_cache.json", f"{folder}/RECORD"
        if rec in found and uv in found and FLOOR < int(uv_json_time(given_[uv][0])):
            agrees(found, folder)
        elif rec in found:
            assert found[rec] == record(folder)


def uv_json_time(data: bytes | None) -> int:
    assert data is not None
    return int(data.split(b'"secs_since_epoch":', 1)[1].split(b",", 1)[0])
