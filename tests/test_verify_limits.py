"""The ceilings of verify's decoders: an LZ4 block and a ZSTD payload decode at most ``limit``
bytes and at most what their stored bytes can make, in linear time; a declared size over the
library ceiling (``EDGEVLLM_MAX_LIBRARY_SIZE``) is refused before anything is allocated."""

from __future__ import annotations

import time
import tracemalloc

import pytest
import zstandard

from edgevllm.common.errors import ConfigError, CorruptBinaryError, ResourceLimitError
from edgevllm.verify.decompress import lz4_block, payload_bytes
from edgevllm.verify.limits import DEFAULT_MAX_LIBRARY, check_declared, max_library_bytes


def _lz4_run(length_bytes: int) -> bytes:
    """One literal then a match of distance 1 whose length continues over ``length_bytes``."""
    return bytes([0x1F]) + b"A" + (1).to_bytes(2, "little") + b"\xff" * length_bytes + b"\x00"


def test_an_lz4_match_of_distance_one_decodes_in_linear_time():
    block = _lz4_run(40_000)  # 40 KB that say "repeat the last byte 10 million times"
    start = time.process_time()
    out = lz4_block(block, 1 << 40)
    assert len(out) == 1 + 40_000 * 255 + 15 + 4 and set(out) == {ord("A")}
    assert time.process_time() - start < 2.0


def test_an_lz4_match_stops_at_the_limit():
    tracemalloc.start()
    try:
        out = lz4_block(_lz4_run(40_000), 4096)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out == b"A" * 4096 and peak < 1 << 20


def test_a_declared_size_is_held_to_what_lz4_can_make_of_the_stored_bytes():
    with pytest.raises(ResourceLimitError, match="more than its compression can produce"):
        payload_bytes(_lz4_run(10), "lz4", 1 << 30)
    with pytest.raises(ResourceLimitError, match="over the 4.0 GiB"):
        payload_bytes(b"\x28\xb5\x2f\xfd" + bytes(60), "zstd", 1 << 40)


def test_a_zstd_payload_is_read_in_pieces_not_at_its_declared_size():
    frame = zstandard.ZstdCompressor().compress(b"cubin" * 1000)
    tracemalloc.start()
    try:
        out = payload_bytes(frame, "zstd", 3 << 30)  # declared 3 GiB, holds 5,000 bytes
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out == b"cubin" * 1000 and peak < 8 << 20
    with pytest.raises(CorruptBinaryError, match="does not decompress"):
        payload_bytes(frame[:8] + b"\xff" * 20, "zstd", 1000)


@pytest.mark.parametrize("text,size", [("", DEFAULT_MAX_LIBRARY), ("8G", 8 << 30),
                                       ("512M", 512 << 20), ("1000000", 1000000),
                                       ("2GiB", 2 << 30)])
def test_the_ceiling_setting(monkeypatch, text, size):
    monkeypatch.setenv("EDGEVLLM_MAX_LIBRARY_SIZE", text)
    assert max_library_bytes() == size


@pytest.mark.parametrize("text", ["0", "-1", "4X", "lots", "1.5G"])
def test_a_bad_ceiling_setting_is_one_line(monkeypatch, text):
    monkeypatch.setenv("EDGEVLLM_MAX_LIBRARY_SIZE", text)
    with pytest.raises(ConfigError, match="EDGEVLLM_MAX_LIBRARY_SIZE"):
        max_library_bytes()


def test_check_declared():
    check_declared(1 << 20, "ok.so", stored=1 << 10, ratio=1032)
    check_declared(3 << 30, "unknown-ratio.so", stored=10, ratio=0)  # bzip2/lzma: ceiling only
    with pytest.raises(ResourceLimitError, match="over the 4.0 GiB"):
        check_declared(5 << 30, "unknown-ratio.so", stored=10, ratio=0)
    with pytest.raises(ResourceLimitError, match="stored.so"):
        check_declared(1 << 20, "stored.so", stored=1000, ratio=1)


def test_a_small_unit_that_inflates_past_a_gigabyte_stops_at_the_unit_limit():
    """A zstd fatbin entry of a few KB declaring 3 GiB (within the library ceiling) and holding
    more than MAX_UNIT_BYTES of zeros (3 GiB would be about 100 KB): decoding stops at the unit
    limit, before the pieces are joined (was: all of it in memory, twice)."""
    from edgevllm.verify.decompress import MAX_UNIT_BYTES

    compressor = zstandard.ZstdCompressor(level=1).compressobj()
    zeros = bytes(16 << 20)
    frame = b"".join(compressor.compress(zeros) for _ in range((MAX_UNIT_BYTES >> 24) + 2))
    frame += compressor.flush()
    assert len(frame) < 1 << 20
    tracemalloc.start()
    try:
        with pytest.raises(ResourceLimitError, match="decompresses to over 128.0 MiB"):
            payload_bytes(frame, "zstd", 3 << 30)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < MAX_UNIT_BYTES + (8 << 20), peak >> 20


def test_a_cache_ceiling_comes_from_its_setting_or_is_one_line(monkeypatch):
    import pytest

    from edgevllm.common.errors import ConfigError
    from edgevllm.verify.limits import size_setting

    monkeypatch.delenv("EDGEVLLM_X_MAX", raising=False)
    assert size_setting("EDGEVLLM_X_MAX", 7, "x cache") == 7
    monkeypatch.setenv("EDGEVLLM_X_MAX", "2M")
    assert size_setting("EDGEVLLM_X_MAX", 7, "x cache") == 2 << 20
    monkeypatch.setenv("EDGEVLLM_X_MAX", "lots")
    with pytest.raises(ConfigError, match=r"^EDGEVLLM_X_MAX='lots': .* or 0 \(no x cache\)$"):
        size_setting("EDGEVLLM_X_MAX", 7, "x cache")


def test_the_oldest_records_go_first_until_the_rest_fit(tmp_path):
    import os

    from edgevllm.verify.limits import drop_oldest

    records = []
    for age, name in enumerate(["new", "mid", "old"]):
        path = tmp_path / name
        path.write_bytes(b"x" * 10)
        os.utime(path, (1000 - age, 1000 - age))
        records.append((path.stat().st_mtime, 10, str(path)))
    assert drop_oldest(records, 20) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mid", "new"]
    assert drop_oldest(records, 0) == 2 and not list(tmp_path.iterdir())
