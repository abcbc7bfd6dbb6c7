"""image/zstdframes.py: the frame walker follows every frame the real ``zstd`` command writes
(checksums or none, content sizes or none, long windows, threads, several frames, skippable
frames), fed whole or a byte at a time, and a stream cut anywhere but between frames is refused
in one line naming the set."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import zstandard

from edgevllm.common.errors import IntegrityError
from edgevllm.image.zstdframes import CHUNK, FrameWalker, zstd_chunks

DATA = os.urandom(40_000) + b"\0" * 300_000 + b"text " * 50_000  # raw, RLE and compressed blocks


def zstd_cli(tmp_path: Path, data: bytes, *flags: str) -> bytes:
    if shutil.which("zstd") is None:
        pytest.fail("the zstd command is missing: install it (apt-get install zstd)")
    source = tmp_path / "in"
    source.write_bytes(data)
    return subprocess.run(["zstd", "-q", "-c", *flags, str(source)], capture_output=True,
                          check=True).stdout


def walked(data: bytes, step: int | None = None) -> FrameWalker:
    walker = FrameWalker()
    step = step or len(data) or 1
    for at in range(0, len(data), step):
        walker.feed(data[at:at + step])
    return walker


def skippable(payload: bytes, magic: int = 0x184D2A50) -> bytes:
    return magic.to_bytes(4, "little") + len(payload).to_bytes(4, "little") + payload


@pytest.mark.parametrize("flags", [
    (), ("--no-check",), ("--no-content-size",), ("-19",), ("--long=27",), ("-T2", "-B65536"),
    ("--fast=5",), ("-1", "--no-check", "--no-content-size")])
def test_every_frame_the_zstd_command_writes_is_followed_to_its_end(tmp_path, flags):
    data = zstd_cli(tmp_path, DATA, *flags)
    whole = walked(data)
    assert whole.between_frames and whole.frames >= 1
    one_by_one = walked(data, 1)
    assert one_by_one.between_frames and one_by_one.frames == whole.frames
    assert b"".join(zstd_chunks(io.BytesIO(data), "set.tar.zst", 27)) == DATA


def test_frames_written_one_after_another_are_counted_and_read_as_one_stream(tmp_path):
    parts = [DATA[:1000], b"", DATA, b"end"]
    data = b"".join(zstd_cli(tmp_path, part) for part in parts)
    assert walked(data).frames == 4
    assert walked(data, 7).frames == 4
    assert b"".join(zstd_chunks(io.BytesIO(data), "set", 27)) == b"".join(parts)


def test_skippable_frames_of_any_magic_count_as_frames_and_hold_no_output(tmp_path):
    frame = zstd_cli(tmp_path, b"payload")
    data = skippable(b"x" * 70_000) + frame + skippable(b"", 0x184D2A5F) + frame
    walker = walked(data, 4096)
    assert walker.frames == 4 and walker.between_frames
    assert b"".join(zstd_chunks(io.BytesIO(data), "set", 27)) == b"payload" * 2


def test_a_stream_cut_anywhere_inside_a_frame_is_truncated_and_between_frames_is_whole(tmp_path):
    first = zstd_cli(tmp_path, DATA[:1500])
    second = zstd_cli(tmp_path, b"second frame" * 100, "--no-check")
    data = first + second
    for cut in range(1, len(data)):
        walker = walked(data[:cut], 1 + cut % 5)
        assert walker.between_frames == (cut == len(first)), cut


@pytest.mark.parametrize("cut", [1, 4, 5, 9, 100])
def test_a_truncated_set_is_one_line_naming_it_and_what_to_do(tmp_path, cut):
    data = zstd_cli(tmp_path, DATA)
    with pytest.raises(IntegrityError) as raised:
        list(zstd_chunks(io.BytesIO(data[:-cut]), "out/x.tar.zst", 27))
    message = str(raised.value)
    assert message.startswith("out/x.tar.zst: the zstd stream ")
    assert ("truncated" in message or "corrupt" in message) and "\n" not in message
    assert raised.value.exit_code == IntegrityError("x").exit_code


def test_a_frame_needing_a_larger_window_than_declared_says_how_to_decompress_it(tmp_path):
    big = os.urandom(1 << 20) * 3  # repeats 1 MiB apart: only a long window finds them
    data = zstd_cli(tmp_path, big, "--long=30", "--zstd=wlog=30")
    with pytest.raises(IntegrityError, match="needs a window over 1 MiB.*--long=31"):
        list(zstd_chunks(io.BytesIO(data), "x.tar.zst", 20))
    assert b"".join(zstd_chunks(io.BytesIO(data), "x.tar.zst", 30)) == big


def test_no_piece_is_over_chunk_even_from_a_frame_of_one_rle_block_run():
    data = zstandard.ZstdCompressor(level=1).compress(b"\0" * (5 * CHUNK + 3))
    assert len(data) < 2000
    pieces = list(zstd_chunks(io.BytesIO(data), "bomb", 27))
    assert max(map(len, pieces)) <= CHUNK
    assert sum(map(len, pieces)) == 5 * CHUNK + 3


def test_garbage_after_a_whole_frame_is_refused():
    data = zstandard.ZstdCompressor().compress(b"whole") + b"trailing garbage!"
    with pytest.raises(IntegrityError, match="^set: the zstd stream is"):
        list(zstd_chunks(io.BytesIO(data), "set", 27))


def test_a_walker_fed_nothing_has_seen_no_frame():
    walker = walked(b"")
    assert walker.between_frames and walker.frames == 0
    with pytest.raises(IntegrityError, match="truncated"):
        list(zstd_chunks(io.BytesIO(b""), "empty", 27))


def test_a_skippable_frame_cut_inside_its_payload_is_not_between_frames():
    data = skippable(b"y" * 100)
    assert not walked(data[:50]).between_frames
    assert not walked(data[:6]).between_frames  # inside its size field
    assert walked(data).between_frames
