"""image/layercache.py: layers compressed once and kept by content, on a real folder. An entry
exists only once its record does and only for the bytes its diff id names; a blob that no longer
matches its record is never handed out; ``prune`` drops the least recently used entries but never
one this run relies on; settings key the entries apart."""

from __future__ import annotations

import hashlib
import io
import json
import os
import time
from pathlib import Path

import pytest
import zstandard

from edgevllm.image.layercache import (
    DEFAULT_MAX_BYTES,
    STALE_TEMP_SECONDS,
    CorruptEntry,
    LayerCache,
    ZstdSettings,
    default_root,
    max_bytes_from_env,
)

SETTINGS = ZstdSettings(level=1, window_log=0, threads=0)


def diff_id(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def put(cache: LayerCache, data: bytes, claimed: str | None = None) -> bool:
    """``data`` compressed into the cache under ``claimed`` (its own diff id unless given)."""
    name = claimed or diff_id(data)
    with cache.entry_writer(name, len(data)) as entry:
        entry.write(cache.settings.compressor(len(data)).compress(data))
        entry.finish(hashlib.sha256(data).hexdigest())
    return entry.verified


def copied(cache: LayerCache, name: str) -> bytes:
    layer = cache.get(name)
    assert layer is not None
    out = io.BytesIO()
    cache.copy_out(layer, out)
    return zstandard.ZstdDecompressor().decompress(out.getvalue())


def test_an_entry_reads_back_exactly_the_layer_with_its_record(tmp_path):
    cache = LayerCache(tmp_path, SETTINGS)
    data = os.urandom(3000) + b"\0" * 5000
    assert put(cache, data)
    layer = cache.get(diff_id(data))
    assert layer is not None and layer.size == len(data)
    record = json.loads(layer.blob.with_suffix(".json").read_text())
    assert record == {"diff_id": diff_id(data), "size": len(data),
                      "compressed_size": layer.blob.stat().st_size,
                      "compressed_sha256": hashlib.sha256(layer.blob.read_bytes()).hexdigest()}
    assert copied(cache, diff_id(data)) == data
    assert layer.blob.parent == tmp_path / SETTINGS.key()


def test_bytes_that_are_not_the_diff_id_s_never_become_an_entry(tmp_path):
    cache = LayerCache(tmp_path, SETTINGS)
    assert not put(cache, b"tampered layer", claimed=diff_id(b"the real layer"))
    assert cache.get(diff_id(b"the real layer")) is None
    assert list(tmp_path.rglob("*")) == [tmp_path / SETTINGS.key()]  # no blob, no temporary


def test_a_write_cut_short_leaves_no_entry_and_no_temporary(tmp_path):
    cache = LayerCache(tmp_path, SETTINGS)
    data = b"layer" * 100
    with pytest.raises(KeyboardInterrupt):
        with cache.entry_writer(diff_id(data), len(data)) as entry:
            entry.write(b"\x28\xb5\x2f\xfd half a frame")
            raise KeyboardInterrupt
    assert cache.get(diff_id(data)) is None
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_a_blob_changed_after_it_was_cached_is_evicted_when_copied_out(tmp_path):
    cache = LayerCache(tmp_path, SETTINGS)
    data = b"x" * 10_000
    put(cache, data)
    layer = cache.get(diff_id(data))
    assert layer is not None
    blob = bytearray(layer.blob.read_bytes())
    blob[len(blob) // 2] ^= 1
    layer.blob.write_bytes(bytes(blob))
    with pytest.raises(CorruptEntry) as raised:
        cache.copy_out(layer, io.BytesIO())
    assert str(raised.value) == f"layer cache entry {diff_id(data)} was corrupt and has been " \
        "removed"
    assert cache.get(diff_id(data)) is None and not layer.blob.exists()


@pytest.mark.parametrize("damage", ["size", "diff_id", "not json", "no field", "no size",
                                    "size text", "size negative", "size true", "sha number",
                                    "a list", "blob gone"])
def test_a_record_that_does_not_match_its_blob_is_a_miss(tmp_path, damage):
    """A damaged record (a crash, a disk, another tool) is compressed afresh, never a
    traceback: before, a record missing a field other than the two compared raised KeyError."""
    cache = LayerCache(tmp_path, SETTINGS)
    data = b"y" * 4000
    put(cache, data)
    record_path = tmp_path / SETTINGS.key() / f"{diff_id(data)[7:]}.json"
    record = json.loads(record_path.read_text())
    if damage == "size":
        record["compressed_size"] += 1
    elif damage == "diff_id":
        record["diff_id"] = diff_id(b"other")
    elif damage == "no field":
        del record["compressed_sha256"]
    elif damage == "no size":
        del record["size"]
    elif damage.startswith("size "):
        record["size"] = {"size text": "4000", "size negative": -1, "size true": True}[damage]
    elif damage == "sha number":
        record["compressed_sha256"] = 7
    elif damage == "a list":
        record = [record]
    record_path.write_text("{" if damage == "not json" else json.dumps(record))
    if damage == "blob gone":
        record_path.with_suffix(".zst").unlink()
    assert cache.get(diff_id(data)) is None


def test_entries_are_kept_apart_by_their_compression_setting(tmp_path):
    data = b"z" * 3000
    fast = LayerCache(tmp_path, SETTINGS)
    put(fast, data)
    other = LayerCache(tmp_path, ZstdSettings(level=9, window_log=0, threads=0))
    assert other.get(diff_id(data)) is None
    assert fast.get(diff_id(data)) is not None


def test_a_config_is_kept_byte_for_byte_and_a_changed_one_is_dropped(tmp_path):
    cache = LayerCache(tmp_path, SETTINGS)
    config = b'{"architecture":"arm64","rootfs":{"diff_ids":[]}}'
    image_id = diff_id(config)
    assert cache.config(image_id) is None
    cache.put_config(image_id, config)
    assert cache.config(image_id) == config
    path = tmp_path / "configs" / f"{image_id[7:]}.json"
    assert path.stat().st_mode & 0o022 == 0
    path.write_bytes(config + b" ")
    assert cache.config(image_id) is None and not path.exists()


def test_folders_made_for_the_cache_are_the_user_s_alone(tmp_path):
    cache = LayerCache(tmp_path / "new" / "layers", SETTINGS)
    put(cache, b"a layer")
    for folder in (tmp_path / "new", tmp_path / "new" / "layers", cache.layers_dir):
        assert folder.stat().st_mode & 0o777 == 0o700, folder


def test_a_cache_folder_others_may_write_is_neither_read_nor_written(tmp_path, capsys):
    cache = LayerCache(tmp_path / "layers", SETTINGS)
    data = b"shared" * 100
    put(cache, data)
    os.chmod(cache.layers_dir, 0o777)
    assert cache.get(diff_id(data)) is None
    fresh = b"new layer" * 50
    assert not put(cache, fresh) or cache.get(diff_id(fresh)) is None
    assert not (cache.layers_dir / f"{diff_id(fresh)[7:]}.zst").exists()
    assert "not used" in capsys.readouterr().err


def entries(tmp_path: Path, count: int) -> tuple[LayerCache, list[str]]:
    """``count`` entries, each 1000 bytes apart in age (the oldest first)."""
    cache = LayerCache(tmp_path, SETTINGS)
    names = []
    now = time.time()
    for index in range(count):
        data = os.urandom(2000)
        put(cache, data)
        names.append(diff_id(data))
        record = tmp_path / SETTINGS.key() / f"{names[-1][7:]}.json"
        os.utime(record, (now - 1000 * (count - index),) * 2)
    return LayerCache(tmp_path, SETTINGS), names  # a new run: nothing used yet


def size_of(tmp_path: Path) -> int:
    return sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file())


def test_prune_drops_the_least_recently_used_first_until_it_fits(tmp_path):
    cache, names = entries(tmp_path, 4)
    total = size_of(tmp_path)
    freed = cache.prune(total - 1)
    assert freed > 0 and size_of(tmp_path) == total - freed
    assert cache.get(names[0]) is None
    assert all(cache.get(name) is not None for name in names[1:])


def test_reading_an_entry_makes_it_recent(tmp_path):
    cache, names = entries(tmp_path, 3)
    assert LayerCache(tmp_path, SETTINGS).get(names[0]) is not None  # another run read it
    cache.prune(size_of(tmp_path) - 1)
    assert cache.get(names[1]) is None
    assert cache.get(names[0]) is not None


def test_prune_never_drops_what_this_run_uses(tmp_path):
    cache, names = entries(tmp_path, 3)
    for name in names:
        assert cache.get(name) is not None
    assert cache.prune(0) == 0
    assert all(cache.get(name) is not None for name in names)


def test_prune_under_the_limit_frees_nothing(tmp_path):
    cache, names = entries(tmp_path, 2)
    assert cache.prune(size_of(tmp_path)) == 0
    assert all(cache.get(name) is not None for name in names)


def test_prune_sweeps_only_stale_temporaries(tmp_path):
    cache, _ = entries(tmp_path, 1)
    stale = cache.layers_dir / ".ab.zst.tmp-1-2"
    fresh = cache.layers_dir / ".cd.zst.tmp-3-4"
    for path in (stale, fresh):
        path.write_bytes(b"half")
    old = time.time() - STALE_TEMP_SECONDS - 60
    os.utime(stale, (old, old))
    cache.prune(1 << 40)
    assert not stale.exists() and fresh.exists()


def test_settings_name_their_entries_and_say_what_a_decoder_needs():
    assert ZstdSettings().key() == "zstd-3-long27"
    assert ZstdSettings(level=19, window_log=0).key() == "zstd-19"
    long = ZstdSettings(level=3, window_log=27)
    assert long.effective_window_log() == 27 and long.decompression_memory > 1 << 27
    plain = ZstdSettings(level=3, window_log=0)
    assert plain.effective_window_log() < 27
    assert plain.decompression_memory < long.decompression_memory
    manifest = long.manifest()
    assert manifest["codec"] == "zstd" and manifest["long_distance_matching"] is True
    assert manifest["window_log"] == 27 and manifest["layout"] == "frames-per-layer"


def test_a_long_window_frame_states_its_window_and_size_for_any_decoder():
    data = b"abc" * 100_000
    frame = ZstdSettings(level=3, window_log=27, threads=0).compressor(len(data)).compress(data)
    params = zstandard.get_frame_parameters(frame)
    assert params.content_size == len(data) and params.has_checksum
    assert zstandard.ZstdDecompressor().decompress(frame) == data


@pytest.mark.parametrize("text, limit", [("", DEFAULT_MAX_BYTES), ("1000", 1000),
                                         ("-5", DEFAULT_MAX_BYTES), ("10G", DEFAULT_MAX_BYTES),
                                         ("0", 0)])
def test_the_size_limit_comes_from_the_environment_when_it_is_a_number(monkeypatch, text, limit):
    monkeypatch.setenv("EDGEVLLM_LAYER_CACHE_MAX", text)
    assert max_bytes_from_env() == limit


def test_the_root_is_the_environment_s_else_the_user_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("EDGEVLLM_LAYER_CACHE", str(tmp_path / "mine"))
    assert default_root() == tmp_path / "mine"
    monkeypatch.delenv("EDGEVLLM_LAYER_CACHE")
    assert default_root().name == "layers"
