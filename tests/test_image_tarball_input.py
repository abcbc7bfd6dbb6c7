"""image/tarball.py and image/tarmanifest.py given what a user may hand ``inv load`` /
``inv verify --tarball``: a manifest, any part, a bare tarball with or without its ``.sha256``,
renamed files, gzip and plain tars; and every damaged input (a manifest of the wrong shape, a part
missing, short, changed while it is read, a sidecar that is no checksum) is one line naming the
file and the field, exit 10."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

from edgevllm.common.errors import IntegrityError, MissingInputError
from edgevllm.image.tarball import open_tarball, sniff_format
from edgevllm.image.tarmanifest import (
    MAX_PARTS,
    check_stream_length,
    is_part_name,
    manifest_name_for,
    part_glob,
    part_name,
    read_manifest,
)
from support.fake_rootfs import tar_of
from support.tarsets import write_set

PAYLOAD = tar_of({"blobs/sha256/" + "a" * 64: b"layer" * 2000, "manifest.json": b"[]"})


def edited(manifest: Path, **fields: object) -> Path:
    data = json.loads(manifest.read_text())
    data.update(fields)
    manifest.write_text(json.dumps(data))
    return manifest


def refused(path: Path | str, match: str) -> str:
    with pytest.raises(IntegrityError) as raised:
        with open_tarball(path).tar_stream() as stream:
            stream.read()
    message = str(raised.value)
    assert "\n" not in message and raised.value.exit_code == 10, message
    assert match in message, message
    return message


def test_a_set_opens_from_its_manifest_or_from_any_of_its_parts(tmp_path):
    manifest = write_set(tmp_path, PAYLOAD, parts=3)
    for given in [manifest, *sorted(tmp_path.glob("*.part*"))]:
        tarset = open_tarball(given)
        assert tarset.manifest_path == manifest and len(tarset.parts) >= 3
        with tarset.tar_stream() as stream:
            assert stream.read() == PAYLOAD


def test_a_part_whose_manifest_is_not_beside_it_says_to_copy_it(tmp_path):
    manifest = write_set(tmp_path, PAYLOAD)
    manifest.unlink()
    refused(tmp_path / "s.tar.zst.part000", "its manifest is not beside it")


def test_a_tarball_the_sibling_manifest_does_not_list_is_read_bare(tmp_path):
    write_set(tmp_path, PAYLOAD)
    other = tmp_path / "s.tar.zst"  # the manifest lists s.tar.zst.part000, .part001
    other.write_bytes(gzip.compress(PAYLOAD))
    tarset = open_tarball(other)
    assert tarset.manifest is None and tarset.format == "gz"
    assert not tarset.verifiable


@pytest.mark.parametrize("field, value, says", [
    ("schema_version", 2, "schema_version 2 is not supported"),
    ("format", "tar", "field 'format': 'tar' is not zst or gz"),
    ("parts", [], "field 'parts': lists no part"),
    ("total_size", 1, "field 'total_size' does not match"),
    ("surprise", 1, "surprise"),
    ("compression", {"window_log": 32}, "field 'compression.window_log': 32 is not a zstd window"),
    ("compression", {"window_log": 1000}, "compression.window_log"),
    ("compression", {"window_log": 9}, "compression.window_log"),
    ("compression", {"window_log": True}, "compression.window_log"),
    ("compression", {"window_log": "27"}, "compression.window_log"),
])
def test_a_manifest_field_out_of_shape_is_one_line_naming_it(tmp_path, field, value, says):
    """A window_log over 31 once reached zstd as it was: a ZstdError or OverflowError
    traceback, not a line."""
    manifest = edited(write_set(tmp_path, PAYLOAD), **{field: value})
    message = refused(manifest, says)
    assert message.startswith(str(manifest))


def test_a_declared_window_within_zstd_s_range_raises_the_decoder_s_limit(tmp_path):
    manifest = edited(write_set(tmp_path, PAYLOAD), compression={"window_log": 31,
                                                                  "decompression_memory": 5})
    tarset = open_tarball(manifest)
    assert tarset.window_log == 31 and tarset.decompression_memory == 5
    small = edited(manifest, compression={"window_log": 20})
    assert open_tarball(small).window_log == 27  # never below every decoder's default


@pytest.mark.parametrize("name, says", [
    ("../s.tar.zst.part000", "is not a plain file name"),
    ("sub/s.tar.zst.part000", "is not a plain file name"),
])
def test_a_part_named_outside_the_manifest_s_folder_is_refused(tmp_path, name, says):
    manifest = write_set(tmp_path, PAYLOAD)
    data = json.loads(manifest.read_text())
    data["parts"][0]["file"] = name
    manifest.write_text(json.dumps(data))
    refused(manifest, says)


def test_a_part_listed_twice_is_refused(tmp_path):
    manifest = write_set(tmp_path, PAYLOAD)
    data = json.loads(manifest.read_text())
    data["parts"].append(data["parts"][0])
    data["total_size"] += data["parts"][0]["size"]
    manifest.write_text(json.dumps(data))
    refused(manifest, "is listed twice")


def test_a_manifest_of_too_many_parts_is_refused_before_each_is_read(tmp_path):
    manifest = write_set(tmp_path, PAYLOAD)
    edited(manifest, parts=[0] * (MAX_PARTS + 1))  # refused before any is looked at
    refused(manifest, f"over the {MAX_PARTS} a set may have")


@pytest.mark.parametrize("text, says", [
    (b"{", "not valid JSON"), (b"[1]", "expected a JSON object"),
    (b"\xff\xfe{}", "s.manifest.json"), (b"[" * 100_000, "s.manifest.json")])
def test_a_manifest_that_is_no_json_object_is_one_line(tmp_path, text, says):
    (tmp_path / "s.manifest.json").write_bytes(text)
    refused(tmp_path / "s.manifest.json", says)


def test_a_missing_manifest_is_missing_input_with_exit_2(tmp_path):
    with pytest.raises(MissingInputError, match="no such file") as raised:
        read_manifest(tmp_path / "gone.manifest.json")
    assert raised.value.exit_code == 2
    with pytest.raises(MissingInputError, match="no such file"):
        open_tarball(tmp_path / "gone.tar.zst")


def test_a_missing_or_short_part_is_named_before_any_byte_is_read(tmp_path):
    manifest = write_set(tmp_path, PAYLOAD, parts=3)
    parts = sorted(tmp_path.glob("*.part*"))
    parts[1].write_bytes(parts[1].read_bytes()[:-1])
    refused(manifest, f"{parts[1]}: size")
    parts[1].unlink()
    refused(manifest, f"{parts[1]}: part is missing")


def test_a_part_changed_after_the_check_is_caught_while_it_is_read(tmp_path):
    manifest = write_set(tmp_path, PAYLOAD, parts=2)
    tarset = open_tarball(manifest)
    tarset.check()
    first = sorted(tmp_path.glob("*.part*"))[0]
    data = bytearray(first.read_bytes())
    data[-1] ^= 0xFF
    first.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match=f"{first}: sha256 mismatch"):
        with tarset.tar_stream() as stream:
            stream.read()


def test_progress_counts_every_byte_of_the_check(tmp_path):
    manifest = write_set(tmp_path, PAYLOAD, parts=3)
    tarset = open_tarball(manifest)
    counted: list[int] = []
    tarset.check(counted.append)
    assert sum(counted) == tarset.total_size == sum(p.stat().st_size for p in
                                                    tmp_path.glob("*.part*"))


def bare(tmp_path: Path, data: bytes, name: str = "image.tar") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("line", ["{hex}  image.tar\n", "{hex}\n", "{HEX} *image.tar"])
def test_a_bare_tarball_is_checked_against_its_sha256sum_line(tmp_path, line):
    path = bare(tmp_path, PAYLOAD)
    digest = hashlib.sha256(PAYLOAD).hexdigest()
    (tmp_path / "image.tar.sha256").write_text(line.format(hex=digest, HEX=digest.upper()))
    tarset = open_tarball(path)
    assert tarset.verifiable and tarset.parts[0].sha256 == digest
    with tarset.tar_stream() as stream:
        assert stream.read() == PAYLOAD


def test_a_bare_tarball_whose_sidecar_disagrees_is_corrupt(tmp_path):
    path = bare(tmp_path, PAYLOAD)
    (tmp_path / "image.tar.sha256").write_text("0" * 64 + "  image.tar\n")
    refused(path, "sha256 mismatch (part 1 of 1)")


@pytest.mark.parametrize("sidecar", [b"", b"not a checksum", b"\xff\xfe" + b"a" * 64,
                                     b"a" * 63, b"a" * 64 + b"  image.tar\n" + b" " * (70 << 10)])
def test_a_sidecar_that_is_no_checksum_line_is_one_line_naming_it(tmp_path, sidecar):
    """A .sha256 that is not UTF-8 was a UnicodeDecodeError traceback; one of any size was
    read whole."""
    path = bare(tmp_path, PAYLOAD)
    (tmp_path / "image.tar.sha256").write_bytes(sidecar)
    with pytest.raises(IntegrityError) as raised:
        open_tarball(path)
    assert str(tmp_path / "image.tar.sha256") in str(raised.value)


@pytest.mark.parametrize("data, fmt", [
    (PAYLOAD, "tar"), (gzip.compress(PAYLOAD), "gz"),
    (b"\x28\xb5\x2f\xfd" + b"\0" * 20, "zst")])
def test_the_format_is_read_from_the_bytes_not_the_name(tmp_path, data, fmt):
    assert sniff_format(bare(tmp_path, data, "renamed.bin")) == fmt


@pytest.mark.parametrize("data", [b"", b"PK\x03\x04 a zip", b"\0" * 600])
def test_a_file_of_no_known_format_is_one_line(tmp_path, data):
    refused(bare(tmp_path, data, "x.tar"), "neither a tar, gzip nor zstd file")


def test_a_gzip_tarball_of_several_members_reads_whole(tmp_path):
    half = len(PAYLOAD) // 2
    path = bare(tmp_path, gzip.compress(PAYLOAD[:half]) + gzip.compress(PAYLOAD[half:]),
                "x.tar.gz")
    with open_tarball(path).tar_stream() as stream:
        assert stream.read() == PAYLOAD


@pytest.mark.parametrize("cut, says", [(10, "truncated"), (3, "truncated")])
def test_a_cut_gzip_tarball_is_truncated(tmp_path, cut, says):
    path = bare(tmp_path, gzip.compress(PAYLOAD)[:-cut], "x.tar.gz")
    refused(path, f"the gzip stream is {says}")


def test_a_gzip_tarball_with_a_flipped_byte_is_corrupt(tmp_path):
    data = bytearray(gzip.compress(PAYLOAD))
    data[len(data) // 2] ^= 0xFF
    refused(bare(tmp_path, bytes(data), "x.tar.gz"), "x.tar.gz: the gzip stream is")


@pytest.mark.parametrize("name, manifest", [
    ("x.tar.zst", "x.manifest.json"), ("x.tar.gz", "x.manifest.json"),
    ("x.tar", "x.manifest.json"), ("x.tar.zst.part003", "x.manifest.json"),
    ("x.y.tar.zst.part1234", "x.y.manifest.json"), ("x.zip", None), ("x.part001", None)])
def test_the_manifest_a_tarball_s_name_points_to(name, manifest):
    assert manifest_name_for(name) == manifest


def test_part_names_are_written_and_recognised_by_one_rule(tmp_path):
    names = [part_name("x.tar.zst", i) for i in (0, 7, 999, 1000)]
    assert names == ["x.tar.zst.part000", "x.tar.zst.part007", "x.tar.zst.part999",
                     "x.tar.zst.part1000"]
    assert all(is_part_name(n) for n in names)
    assert not any(is_part_name(n) for n in ["x.tar.zst", "x.tar.zst.part01",
                                             "x.tar.zst.part000\n", ".part000"])
    for name in names + ["x.tar.zst", "y.tar.zst.part000"]:
        (tmp_path / name).write_bytes(b"")
    assert sorted(p.name for p in tmp_path.glob(part_glob("x.tar.zst"))) == sorted(names)


@pytest.mark.parametrize("count", [0, 1535])
def test_a_docker_save_of_fewer_bytes_than_a_tar_is_refused(count):
    with pytest.raises(IntegrityError, match=f"docker save gave {count} bytes"):
        check_stream_length(count, "vllm:x")
    check_stream_length(1536, "vllm:x")
