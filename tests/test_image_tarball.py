"""Reading published sets without Docker: the manifest's checksums cannot be switched off, a set
with a manifest is checked whole before its first byte is read, and the zstd reader is bounded
(a bomb streams in 1 MiB pieces) and tells a truncated stream from a whole one."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import tracemalloc
from pathlib import Path

import pytest
import zstandard

from edgevllm.common.errors import IntegrityError
from edgevllm.image.tarball import from_manifest, open_tarball
from edgevllm.image.zstdframes import CHUNK, zstd_chunks
from support.fake_rootfs import tar_of
from support.tarsets import write_set


@pytest.mark.parametrize("sha", ["", "0" * 63, "0" * 65, "g" * 64, None, 0])
def test_a_part_checksum_that_is_not_64_hex_digits_refuses_the_set(tmp_path, sha):
    manifest = write_set(tmp_path, tar_of({"a": b"x" * 100}))
    data = json.loads(manifest.read_text())
    data["parts"][0]["sha256"] = sha
    manifest.write_text(json.dumps(data))
    with pytest.raises(IntegrityError, match=r"field 'parts\.0\.sha256'"):
        open_tarball(manifest)


@pytest.mark.parametrize("field,value", [("size", -1), ("size", True), ("size", "12")])
def test_part_sizes_are_non_negative_integers(tmp_path, field, value):
    manifest = write_set(tmp_path, tar_of({"a": b"x"}))
    data = json.loads(manifest.read_text())
    data["parts"][0][field] = value
    manifest.write_text(json.dumps(data))
    with pytest.raises(IntegrityError, match=rf"field 'parts\.0\.{field}'"):
        open_tarball(manifest)


def test_a_set_with_a_manifest_is_checked_before_its_first_byte_is_read(tmp_path):
    manifest = write_set(tmp_path, tar_of({"a": bytes(range(256)) * 400}), parts=3)
    last = sorted(tmp_path.glob("*.part*"))[-1]
    data = bytearray(last.read_bytes())
    data[-1] ^= 0xFF  # same size, other bytes: only the checksum can tell
    last.write_bytes(bytes(data))
    tarset = from_manifest(manifest)
    assert tarset.verifiable and not tarset.checked
    with pytest.raises(IntegrityError, match="sha256 mismatch"):
        with tarset.tar_stream() as stream:  # the caller forgot check(): the stream does it
            pytest.fail(f"a byte of a corrupt set was readable: {stream.read(1)!r}")


def test_a_whole_set_reads_back(tmp_path):
    payload = tar_of({"lib/a.so": b"y" * 5000})
    with from_manifest(write_set(tmp_path, payload, parts=3)).tar_stream() as stream:
        assert stream.read() == payload


def test_a_zstd_bomb_streams_in_bounded_pieces():
    bomb = zstandard.ZstdCompressor(level=1).compress(b"\0" * (256 << 20))
    assert len(bomb) < 64 << 10  # a few kilobytes that decode to 256 MiB
    tracemalloc.start()
    try:
        total = 0
        for piece in zstd_chunks(io.BytesIO(bomb), "bomb", 27):
            assert len(piece) <= CHUNK
            total += len(piece)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert total == 256 << 20 and peak < 16 << 20, f"peak {peak >> 20} MiB"


def _frames() -> bytes:
    one = zstandard.ZstdCompressor(write_checksum=True).compress(bytes(range(256)) * 3000)
    two = zstandard.ZstdCompressor(write_content_size=False).compress(b"tail" * 5000)
    return one + two


@pytest.mark.parametrize("cut", [1, 3, 4, 100, 2000])
def test_a_zstd_stream_cut_anywhere_is_truncated(cut):
    data = _frames()
    with pytest.raises(IntegrityError, match="truncated"):
        for _ in zstd_chunks(io.BytesIO(data[:-cut]), "cut", 27):
            pass


def test_an_empty_or_foreign_stream_is_refused():
    with pytest.raises(IntegrityError, match="truncated"):
        list(zstd_chunks(io.BytesIO(b""), "empty", 27))
    with pytest.raises(IntegrityError, match="corrupt"):
        list(zstd_chunks(io.BytesIO(b"not zstd at all" * 10), "text", 27))


def test_skippable_frames_pass_and_whole_frames_decode():
    skippable = (0x184D2A50).to_bytes(4, "little") + (3).to_bytes(4, "little") + b"abc"
    data = skippable + _frames()
    assert b"".join(zstd_chunks(io.BytesIO(data), "ok", 27)).endswith(b"tail")


def test_a_frame_whose_checksum_fails_never_hands_over_its_last_piece():
    """A bare tarball has no sha256 to check first: the frame checksum is the last line of
    defence, so the piece before it is held back (docker load then never sees the tar's end)."""
    payload = (bytes(range(256)) * (12 << 10)) + b"tail" * 25  # 3 MiB and 100 bytes
    frame = bytearray(zstandard.ZstdCompressor(write_checksum=True).compress(payload))
    frame[-1] ^= 0xFF
    received = []
    with pytest.raises(IntegrityError, match="corrupt"):
        for piece in zstd_chunks(io.BytesIO(bytes(frame)), "bad", 27):
            received.append(piece)
    assert 0 < sum(map(len, received)) <= len(payload) - CHUNK  # a whole piece kept back
    assert payload.startswith(b"".join(received))
