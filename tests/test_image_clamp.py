"""image/clamp.py on real tar files (written with tarfile, read back with tarfile): the times a
build writes set to the lock's moment, the base's kept, a timestamp .pyc kept valid against its
source, uv's install record and its RECORD line rewritten together, and every other byte as it
was; two layers built at different times come out byte for byte the same."""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile

from edgevllm.image.clamp import (
    MODS_RECORD,
    Moment,
    clamp_config,
    clamp_layer,
    clamp_pyc,
    epoch_of,
    uv_cache_records,
)
from support.tars import tar_bytes

EPOCH = 1_700_000_000
FLOOR = EPOCH - 86_400  # the base image's creation: a day before the lock
OLD = FLOOR - 1_000    # a base file's time
MOMENT = Moment(EPOCH, FLOOR)
RECORD = "sp/a-1.dist-info/RECORD"
UV = "sp/a-1.dist-info/uv_cache.json"
LONG = "sp/" + "l" * 120 + ".txt"  # a PAX path record


def pyc(source_mtime: int, flags: int = 0) -> bytes:
    """A .pyc header and body: flags 0 records the source's mtime (and size), flags 1 its hash
    (here the same 8 bytes whenever it is built)."""
    stamp = source_mtime.to_bytes(4, "little") + b"\x05\0\0\0" if flags == 0 else b"h" * 8
    return b"\xa7\r\r\n" + flags.to_bytes(4, "little") + stamp + b"code"


def layer(built: int) -> bytes:
    """A layer as a step at ``built`` writes it: uv's files, a .pyc, a long name, a base file."""
    uv = b'{"timestamp":{"secs_since_epoch":%d,"nanos_since_epoch":123},"commit":null}' % built
    record = (b"a/__init__.py,sha256=x,1\na-1.dist-info/uv_cache.json,sha256=%d,50\n"
              b"a-1.dist-info/RECORD,,\n" % built)
    entries = [("sp", None, built), (RECORD, record, built), (UV, uv, built),
               ("sp/x.pyc", pyc(built), built), ("sp/h.pyc", pyc(built, flags=1), built),
               (LONG, b"long", built), ("old", b"old", OLD)]
    return tar_bytes(entries, format=tarfile.PAX_FORMAT)


def clamped(raw: bytes, moment: Moment = MOMENT) -> bytes:
    uv = uv_cache_records(io.BytesIO(raw), moment)
    out = io.BytesIO()
    clamp_layer(io.BytesIO(raw), out, moment, uv)
    return out.getvalue()


def members(raw: bytes) -> dict[str, tuple[float, bytes]]:
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        return {m.name: (m.mtime, (tar.extractfile(m).read() if m.isfile() else b""))  # type: ignore[union-attr]
                for m in tar}


def test_two_builds_at_different_times_give_the_same_bytes():
    one, two = layer(EPOCH + 100), layer(EPOCH + 5_000)
    assert one != two
    assert clamped(one) == clamped(two)


def test_a_layer_cached_before_the_lock_is_set_to_the_same_moment():
    """BuildKit's cache kept a layer built before the lock: its times are after the base's,
    so it comes out as a layer built afresh does."""
    assert clamped(layer(FLOOR + 10)) == clamped(layer(EPOCH + 10))


def test_build_times_are_the_moment_and_the_base_files_keep_theirs():
    found = members(clamped(layer(EPOCH + 100)))
    assert {name: mtime for name, (mtime, _) in found.items()} == {
        "sp": EPOCH, RECORD: EPOCH, UV: EPOCH, "sp/x.pyc": EPOCH, "sp/h.pyc": EPOCH,
        LONG: EPOCH, "old": OLD}
    assert found["old"][1] == b"old" and found[LONG][1] == b"long"


def test_uv_record_and_its_record_line_agree():
    found = members(clamped(layer(EPOCH + 100)))
    data = found[UV][1]
    assert data == b'{"timestamp":{"secs_since_epoch":1700000000,"nanos_since_epoch":0},' \
                   b'"commit":null}'
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    lines = found[RECORD][1].decode().splitlines()
    assert lines == ["a/__init__.py,sha256=x,1",
                     f"a-1.dist-info/uv_cache.json,sha256={digest},{len(data)}",
                     "a-1.dist-info/RECORD,,"]


def test_a_timestamp_pyc_follows_its_source_and_a_hash_pyc_is_left():
    found = members(clamped(layer(EPOCH + 100)))
    assert found["sp/x.pyc"][1] == pyc(EPOCH)
    assert found["sp/h.pyc"][1] == pyc(EPOCH + 100, flags=1) == pyc(0, flags=1)
    assert clamp_pyc(pyc(OLD), MOMENT) == pyc(OLD)
    assert clamp_pyc(b"short", MOMENT) == b"short"


def test_a_layer_with_no_time_after_the_base_is_copied_byte_for_byte():
    raw = layer(OLD)
    assert clamped(raw) == raw


def test_the_config_dates_after_the_base_are_the_moment():
    config = {"created": "2023-11-20T10:00:00.123456789Z", "architecture": "amd64",
              "history": [{"created": "2020-01-01T00:00:00Z", "created_by": "base"},
                          {"created": "2023-11-20T10:00:01Z", "created_by": "RUN x"},
                          {"created_by": "no date"}],
              "rootfs": {"type": "layers", "diff_ids": ["sha256:old"]}}
    written = clamp_config(config, ["sha256:new"], MOMENT)
    assert written == clamp_config(dict(config, created="2023-11-21T00:00:00Z"),
                                   ["sha256:new"], MOMENT)
    assert written.startswith(b'{"created":"2023-11-14T22:13:20Z","architecture":"amd64",'
                              b'"history":[{"created":"2020-01-01T00:00:00Z"')
    assert b'"rootfs":{"type":"layers","diff_ids":["sha256:new"]}' in written


def test_epoch_of_reads_a_lock_and_an_engine_time():
    assert epoch_of("2023-11-14T22:13:20Z") == EPOCH
    assert epoch_of("2023-11-14T22:13:20.064383726Z") == EPOCH


def test_the_times_an_image_carries_are_set_in_one_place():
    """image/clamp.py alone spells what holds a build's time (BuildKit's epoch argument, uv's
    install record): another module setting them would set them another way."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "edgevllm"
    words = ("SOURCE_DATE_EPOCH", "uv_cache.json", "rewrite-timestamp")
    found = {str(path.relative_to(root)) for path in root.rglob("*.py")
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Constant) and isinstance(node.value, str)
             and any(word in node.value for word in words)}
    assert found == {"image/clamp.py"}


def applier_record(tmp_path, built: int) -> bytes:
    """The mods record as the real in-image applier writes it (an empty plan), its
    ``applied_at`` the moment ``built`` (the applier writes its own clock's)."""
    import json
    import subprocess
    import sys
    from datetime import datetime, timezone
    from pathlib import Path

    applier = Path(__file__).resolve().parents[1] / "edgevllm" / "mods" / "inimage_applier.py"
    (tmp_path / "plan.json").write_text('{"target": "spark", "mods": []}')
    subprocess.run([sys.executable, str(applier), "apply", "--plan", str(tmp_path / "plan.json"),
                    "--record", str(tmp_path / "mods.json"), "--no-env-file"],
                   check=True, capture_output=True)
    data = (tmp_path / "mods.json").read_bytes()
    now = json.loads(data)["applied_at"]
    then = datetime.fromtimestamp(built, timezone.utc).isoformat(timespec="seconds")
    assert len(now) == len(then)
    return data.replace(now.encode(), then.encode())


def test_the_mods_record_written_at_two_times_gives_the_same_bytes(tmp_path):
    """The applier's record holds its own time (``applied_at``): the same mods applied at two
    times give one layer once clamped, the time being the moment's; a record of the base's
    time is left as it is."""
    import json

    name = MODS_RECORD
    one, two = (tar_bytes([(name, applier_record(tmp_path, built), built)])
                for built in (EPOCH + 100, EPOCH + 5_000))
    assert one != two
    assert clamped(one) == clamped(two)
    record = json.loads(members(clamped(one))[name][1])
    assert record["applied_at"] == "2023-11-14T22:13:20+00:00" and record["mods"] == []
    base = tar_bytes([(name, applier_record(tmp_path, OLD), OLD)])
    assert clamped(base) == base


def test_a_layer_clamped_to_the_base_moment_does_not_follow_the_locks_time():
    """The build sets a layer's times to the base's creation (``Moment(floor, floor)``) and
    only the config's to the lock's: two locks made at different times give the same layer."""
    at_floor = Moment(FLOOR, FLOOR)
    assert clamped(layer(EPOCH + 100), at_floor) == clamped(layer(EPOCH + 9_000), at_floor)
    assert {mtime for mtime, _ in members(clamped(layer(EPOCH), at_floor)).values()} == \
        {FLOOR, OLD}


def wheel_at(path, when: tuple) -> bytes:
    """A wheel as setuptools' bdist_wheel writes it at ``when``: each entry dated with its
    file's mtime (the build's); a stored and a deflated entry, an executable's mode."""
    import zipfile

    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data, mode, kind in (("pkg/_C.abi3.so", b"\x7fELF" + b"x" * 4000, 0o755,
                                        zipfile.ZIP_DEFLATED),
                                       ("pkg/__init__.py", b"", 0o644, zipfile.ZIP_STORED),
                                       ("pkg-1.dist-info/RECORD", b"pkg/__init__.py,,\n", 0o644,
                                        zipfile.ZIP_DEFLATED)):
            entry = zipfile.ZipInfo(name, when)
            entry.external_attr, entry.compress_type = mode << 16, kind
            wheel.writestr(entry, data)
    return path.read_bytes()


def test_a_wheel_compiled_at_two_times_gives_the_same_bytes(tmp_path):
    """The compile mode's wheel, built twice from one compile key, differed only in its zip
    entries' dates (measured: every member's bytes the same, the .so's build id too)."""
    import zipfile

    from edgevllm.image.clamp import ZIP_EPOCH, clamp_wheel

    one, two = tmp_path / "one.whl", tmp_path / "two.whl"
    assert wheel_at(one, (2026, 11, 29, 7, 55, 0)) != wheel_at(two, (2026, 11, 29, 14, 45, 48))
    assert clamp_wheel(one) and clamp_wheel(two)
    assert one.read_bytes() == two.read_bytes()
    with zipfile.ZipFile(one) as wheel:
        assert [(e.filename, e.date_time, e.external_attr >> 16, e.compress_type)
                for e in wheel.infolist()] == [
            ("pkg/_C.abi3.so", ZIP_EPOCH, 0o755, zipfile.ZIP_DEFLATED),
            ("pkg/__init__.py", ZIP_EPOCH, 0o644, zipfile.ZIP_STORED),
            ("pkg-1.dist-info/RECORD", ZIP_EPOCH, 0o644, zipfile.ZIP_DEFLATED)]
        assert wheel.read("pkg/_C.abi3.so") == b"\x7fELF" + b"x" * 4000
        assert wheel.testzip() is None
    before = one.read_bytes()
    assert not clamp_wheel(one) and one.read_bytes() == before  # already so: left as it is
