"""image/parts.py: the part files of a published set, written under temporary names, hashed as
they fill, renamed only by ``commit`` and removed whole by ``discard`` (what Ctrl-C or a failed
check runs), and the zstd and multi-member gzip compressors that fill them. Real files, real
zstandard and zlib; what is written is read back by the decoders ``docker load`` and a user's
``zstd -dc``/``gunzip`` use."""

from __future__ import annotations

import gzip
import hashlib
import io
import os

import pytest
import zstandard

from edgevllm.image.layercache import ZstdSettings
from edgevllm.image.parts import (
    COMPRESSORS,
    GZIP_BLOCK,
    CountingReader,
    PartWriter,
    glob_escape,
)
from edgevllm.image.tarmanifest import is_part_name, part_name

DATA = os.urandom(10_000) + bytes(5_000)  # some that compresses, some that does not


def written(folder, stem: str, part_size: int | None, chunks: list[bytes]) -> PartWriter:
    writer = PartWriter(folder, stem, part_size)
    for chunk in chunks:
        assert writer.write(chunk) == len(chunk)
    writer.finish()
    return writer


def test_parts_fill_to_their_size_each_hashed_and_only_commit_names_them(tmp_path):
    writer = written(tmp_path, "img", 4096, [DATA[:3000], DATA[3000:9001], DATA[9001:]])
    assert [p.size for p in writer.parts] == [4096, 4096, 4096, len(DATA) - 3 * 4096]
    assert all(p.name.startswith(".img.tmp-") for p in tmp_path.iterdir())  # nothing final yet
    paths = writer.commit(".tar.zst")
    assert [p.name for p in paths] == [part_name("img.tar.zst", i) for i in range(4)]
    assert all(is_part_name(p.name) for p in paths)
    assert b"".join(p.read_bytes() for p in paths) == DATA
    for part, path in zip(writer.parts, paths, strict=True):
        assert part.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert sorted(tmp_path.iterdir()) == sorted(paths)  # no temporary left


def test_a_set_in_one_part_has_the_whole_name(tmp_path):
    writer = written(tmp_path, "img", None, [DATA])
    (path,) = writer.commit(".tar.gz")
    assert path.name == "img.tar.gz" and path.read_bytes() == DATA


def test_an_empty_stream_still_makes_one_empty_part(tmp_path):
    writer = written(tmp_path, "img", 4096, [])
    (path,) = writer.commit(".tar.zst")
    assert path.read_bytes() == b"" and writer.parts[0].sha256 == hashlib.sha256().hexdigest()


def test_discard_removes_temporaries_and_renamed_parts_but_nothing_else(tmp_path):
    (tmp_path / "other.tar.zst").write_bytes(b"someone else's")
    writer = written(tmp_path, "img", 4096, [DATA])
    writer.commit(".tar.zst")
    half = PartWriter(tmp_path, "img", 4096)
    half.write(DATA[:5000])  # a second set cut short: one part closed, one open
    half.discard()
    writer.discard()
    assert [p.name for p in tmp_path.iterdir()] == ["other.tar.zst"]


def test_a_stem_with_glob_characters_discards_only_its_own(tmp_path):
    """The leftover sweep globs the temporary prefix: ``[`` ``*`` ``?`` in the stem are literal."""
    wild = PartWriter(tmp_path, "img[1]*", 4096)
    wild.write(DATA[:100])
    neighbour = PartWriter(tmp_path, "img1x", 4096)
    neighbour.write(DATA[:100])
    neighbour.finish()
    wild.discard()
    assert len(list(tmp_path.iterdir())) == 1 and neighbour.parts[0].tmp.exists()
    assert glob_escape("a[b]*?") == "a[[]b][*][?]"


def test_reset_starts_the_set_again_from_its_first_part(tmp_path):
    writer = PartWriter(tmp_path, "img", 4096)
    writer.write(DATA)
    writer.reset()
    writer.write(b"again")
    writer.finish()
    (path,) = writer.commit(".tar.zst")
    assert path.read_bytes() == b"again" and list(tmp_path.iterdir()) == [path]


def test_the_counting_reader_reports_every_byte_once():
    seen: list[int] = []
    reader = CountingReader(io.BytesIO(DATA), seen.append)
    while reader.read(4000):
        pass
    assert reader.count == sum(seen) == len(DATA)


@pytest.mark.parametrize("kind", sorted(COMPRESSORS))
def test_each_compressor_writes_what_its_decoder_reads_back(tmp_path, kind):
    data = DATA * 3
    seen: list[int] = []
    writer = PartWriter(tmp_path, "img", 2048)
    COMPRESSORS[kind](CountingReader(io.BytesIO(data), seen.append), writer,
                      ZstdSettings(level=1, window_log=0, threads=2))
    writer.finish()
    stream = b"".join(p.read_bytes() for p in writer.commit(f".tar.{kind}"))
    assert sum(seen) == len(data)
    if kind == "gz":
        assert gzip.decompress(stream) == data
    else:
        assert zstandard.ZstdDecompressor().decompressobj().decompress(stream) == data


def test_gzip_is_one_member_per_block_so_threads_compress_apart(tmp_path):
    data = os.urandom(GZIP_BLOCK // 4) * 9  # a little over two blocks
    writer = PartWriter(tmp_path, "img", None)
    COMPRESSORS["gz"](CountingReader(io.BytesIO(data), lambda _: None), writer,
                      ZstdSettings(level=1, threads=2))
    writer.finish()
    stream = writer.commit(".tar.gz")[0].read_bytes()
    assert stream.count(b"\x1f\x8b\x08") >= 3  # each member's header
    assert gzip.decompress(stream) == data


def test_a_zstd_part_set_with_a_flipped_byte_is_refused_by_its_checksum(tmp_path):
    """The frame carries a checksum: a flipped byte fails to decode, never decodes silently."""
    writer = PartWriter(tmp_path, "img", None)
    COMPRESSORS["zst"](CountingReader(io.BytesIO(DATA), lambda _: None), writer,
                       ZstdSettings(level=1, window_log=0))
    writer.finish()
    stream = bytearray(writer.commit(".tar.zst")[0].read_bytes())
    stream[len(stream) // 2] ^= 0x01
    with pytest.raises(zstandard.ZstdError):
        zstandard.ZstdDecompressor().decompressobj().decompress(bytes(stream))
