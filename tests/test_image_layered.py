"""image/layered.py: the docker-save archive written as zstd frames from the layer cache.

Real layer tars, a real ``docker save``-shaped archive (read as a stream, from a real ``cat``
subprocess where the pipe matters), a real layer cache on disk and a fake local layer store laid
out as Docker lays it out; the output is read back by ``zstd -dc`` and ``tarfile``."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import zstandard

from edgevllm.image.layercache import CorruptEntry, LayerCache, ZstdSettings
from edgevllm.image.layered import (
    FrameSink,
    UnexpectedSaveLayout,
    normalized_ref,
    write_from_cache,
    write_from_save,
    write_from_store,
)
from edgevllm.image.layerstore import StoreUnusable, chain_ids
from support.layer_store import fake_store
from support.tars import tar_bytes

SETTINGS = ZstdSettings(level=1, window_log=0, threads=0)
REFS = ["vllm:test"]


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Image:
    """Two layers, their config and the ``docker save`` archive of them."""

    def __init__(self, base: bytes = b"base layer file\n" * 300, top: bytes = b"top\n"):
        self.layers = [tar_bytes([("etc/", None, 0), ("etc/base", base, 0)]),
                       tar_bytes([("app", top, 0)])]
        self.diff_ids = [digest(layer) for layer in self.layers]
        self.config = json.dumps({"architecture": "arm64", "os": "linux", "rootfs": {
            "type": "layers", "diff_ids": self.diff_ids}}).encode()
        self.image_id = digest(self.config)

    def save(self, blobs: dict[str, bytes] | None = None, tail: int = 0) -> bytes:
        """What ``docker save`` (Docker 25+) writes: blobs by digest, in digest order."""
        blobs = blobs if blobs is not None else self.blobs()
        members: list[tuple[str, bytes | None, int]] = [("blobs/", None, 0),
                                                         ("blobs/sha256/", None, 0)]
        members += [("blobs/sha256/" + d.split(":")[1], data, 0) for d, data in sorted(
            blobs.items())]
        members.append(("manifest.json", b"[]", 0))
        return tar_bytes(members) + b"\0" * tail

    def blobs(self) -> dict[str, bytes]:
        return {self.image_id: self.config, **{digest(layer): layer for layer in self.layers}}


def cache_at(tmp_path: Path) -> LayerCache:
    return LayerCache(tmp_path / "layers", SETTINGS)


def cold(cache: LayerCache, image: Image, save: bytes | None = None):
    out = io.BytesIO()
    stats = write_from_save(FrameSink(out, 1), cache, io.BytesIO(save or image.save()),
                            image.image_id, image.diff_ids, REFS)
    return out.getvalue(), stats


def warm(cache: LayerCache, image: Image):
    out, counted = io.BytesIO(), list[int]()
    layers = {d: cache.get(d) for d in image.diff_ids}
    assert all(layers.values()), "the cold write cached every layer"
    stats = write_from_cache(FrameSink(out, 1), cache, image.config, layers,  # type: ignore[arg-type]
                             image.diff_ids, REFS, counted.append)
    return out.getvalue(), stats, sum(counted)


def unzstd(data: bytes) -> bytes:
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
    return reader.read()


def members(archive: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore


def test_a_cold_write_is_a_docker_save_archive_docker_load_and_oci_tools_read(tmp_path):
    image = Image()
    data, stats = cold(cache_at(tmp_path), image)
    files = members(unzstd(data))
    manifest = json.loads(files["manifest.json"])
    assert manifest == [{"Config": "blobs/sha256/" + image.image_id.split(":")[1],
                         "RepoTags": REFS,
                         "Layers": ["blobs/sha256/" + d.split(":")[1] for d in image.diff_ids]}]
    for diff_id, layer in zip(image.diff_ids, image.layers, strict=True):
        assert files["blobs/sha256/" + diff_id.split(":")[1]] == layer
    assert stats.saved and stats.compressed_layers == 2 and stats.cached_layers == 0
    assert stats.uncompressed == len(unzstd(data))
    assert stats.layer_sizes == dict(zip(image.diff_ids, map(len, image.layers), strict=True))


def test_index_json_names_an_oci_manifest_whose_blobs_are_in_the_archive(tmp_path):
    image = Image()
    files = members(unzstd(cold(cache_at(tmp_path), image)[0]))
    index = json.loads(files["index.json"])
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    (entry,) = index["manifests"]
    assert entry["annotations"] == {"io.containerd.image.name": "docker.io/library/vllm:test",
                                    "org.opencontainers.image.ref.name": "test"}
    blob = files["blobs/sha256/" + entry["digest"].split(":")[1]]
    assert digest(blob) == entry["digest"] and len(blob) == entry["size"]
    oci = json.loads(blob)
    assert oci["config"]["digest"] == image.image_id
    for layer in oci["layers"]:
        data = files["blobs/sha256/" + layer["digest"].split(":")[1]]
        assert digest(data) == layer["digest"] and len(data) == layer["size"]


def test_an_archive_without_tags_still_has_one_index_entry_and_no_repo_tags(tmp_path):
    image = Image()
    out = io.BytesIO()
    write_from_save(FrameSink(out, 1), cache_at(tmp_path), io.BytesIO(image.save()),
                    image.image_id, image.diff_ids, [])
    files = members(unzstd(out.getvalue()))
    assert json.loads(files["manifest.json"])[0]["RepoTags"] is None
    (entry,) = json.loads(files["index.json"])["manifests"]
    assert "annotations" not in entry


def test_the_warm_write_is_byte_for_byte_the_cold_one_without_compressing(tmp_path):
    image = Image()
    cache = cache_at(tmp_path)
    cold_bytes, _ = cold(cache, image)
    warm_bytes, stats, counted = warm(cache, image)
    assert warm_bytes == cold_bytes
    assert stats.cached_layers == 2 and stats.compressed_layers == 0 and not stats.saved
    assert counted == sum(cache.get(d).compressed_size for d in image.diff_ids)  # type: ignore


def test_each_layer_is_its_cache_entry_s_frames_verbatim_in_the_stream(tmp_path):
    image = Image()
    cache = cache_at(tmp_path)
    data, _ = cold(cache, image)
    for diff_id in image.diff_ids:
        entry = cache.get(diff_id)
        assert entry is not None
        frames = entry.blob.read_bytes()
        assert frames in data
        assert unzstd(frames) == image.layers[image.diff_ids.index(diff_id)]
    assert cache.config(image.image_id) == image.config


def test_the_zstd_cli_reads_the_frames_as_one_stream(tmp_path):
    if shutil.which("zstd") is None:
        pytest.fail("the zstd command is missing: install it (apt-get install zstd)")
    image = Image()
    (tmp_path / "set.tar.zst").write_bytes(cold(cache_at(tmp_path), image)[0])
    proc = subprocess.run(["zstd", "-dc", str(tmp_path / "set.tar.zst")], capture_output=True,
                          check=True)
    assert "manifest.json" in members(proc.stdout)


def test_a_layer_already_cached_is_copied_and_only_the_new_one_compressed(tmp_path):
    cache = cache_at(tmp_path)
    first = Image(top=b"one\n")
    cold(cache, first)
    second = Image(top=b"two, another top layer\n")
    assert second.diff_ids[0] == first.diff_ids[0]
    data, stats = cold(cache, second)
    assert stats.cached_layers == 1 and stats.compressed_layers == 1
    assert members(unzstd(data))["blobs/sha256/" + second.diff_ids[1].split(":")[1]] == \
        second.layers[1]


def test_a_layer_whose_bytes_are_not_its_diff_id_is_refused_and_never_cached(tmp_path):
    image = Image()
    cache = cache_at(tmp_path)
    blobs = image.blobs()
    blobs[image.diff_ids[1]] = tar_bytes([("app", b"tampered\n", 0)])
    with pytest.raises(UnexpectedSaveLayout, match=image.diff_ids[1]):
        cold(cache, image, image.save(blobs))
    assert cache.get(image.diff_ids[1]) is None
    assert not list((cache.layers_dir).glob("*.zst.tmp*"))


def test_a_save_missing_a_layer_says_how_many_are_missing(tmp_path):
    image = Image()
    blobs = image.blobs()
    del blobs[image.diff_ids[0]]
    with pytest.raises(UnexpectedSaveLayout, match="1 of 2 layers missing"):
        cold(cache_at(tmp_path), image, image.save(blobs))


def test_a_save_whose_config_is_not_the_image_id_is_refused(tmp_path):
    image = Image()
    blobs = image.blobs()
    blobs[image.image_id] = image.config + b" "
    with pytest.raises(UnexpectedSaveLayout, match="0 of 2 layers missing"):
        cold(cache_at(tmp_path), image, image.save(blobs))
    assert cache_at(tmp_path).config(image.image_id) is None


def test_an_engine_naming_layers_otherwise_is_an_unexpected_layout(tmp_path):
    image = Image()
    legacy = tar_bytes([(f"{i}/layer.tar", layer, 0) for i, layer in enumerate(image.layers)])
    with pytest.raises(UnexpectedSaveLayout, match="2 of 2 layers missing"):
        cold(cache_at(tmp_path), image, legacy)


def test_a_layer_listed_twice_is_stored_once_and_listed_twice(tmp_path):
    image = Image()
    image.diff_ids.append(image.diff_ids[0])
    files = members(unzstd(cold(cache_at(tmp_path), image)[0]))
    layers = json.loads(files["manifest.json"])[0]["Layers"]
    assert len(layers) == 3 and layers[0] == layers[2]
    with tarfile.open(fileobj=io.BytesIO(unzstd(cold(cache_at(tmp_path), image)[0]))) as tar:
        names = [m.name for m in tar]
    assert len(names) == len(set(names))


def test_the_save_stream_is_read_to_its_end_so_docker_save_never_meets_a_closed_pipe(tmp_path):
    image = Image()
    (tmp_path / "save.tar").write_bytes(image.save(tail=4 << 20))  # docker save's record padding
    with subprocess.Popen(["cat", str(tmp_path / "save.tar")], stdout=subprocess.PIPE) as cat:
        assert cat.stdout is not None
        write_from_save(FrameSink(io.BytesIO(), 1), cache_at(tmp_path), cat.stdout,
                        image.image_id, image.diff_ids, REFS)
        cat.stdout.close()
    assert cat.returncode == 0


def test_a_corrupt_cache_entry_is_evicted_and_named(tmp_path):
    image = Image()
    cache = cache_at(tmp_path)
    cold(cache, image)
    entry = cache.get(image.diff_ids[0])
    assert entry is not None
    blob = bytearray(entry.blob.read_bytes())
    blob[-1] ^= 0xFF
    entry.blob.write_bytes(bytes(blob))
    with pytest.raises(CorruptEntry, match=image.diff_ids[0]):
        warm(cache, image)
    assert cache.get(image.diff_ids[0]) is None


def store_for(root: Path, image: Image):
    chains = chain_ids(image.diff_ids)
    for i, (layer, chain) in enumerate(zip(image.layers, chains, strict=True)):
        store = fake_store(root, layer, chain=chain, cache_id=f"cache{i}")
    store.imagedb.mkdir(parents=True, exist_ok=True)
    (store.imagedb / image.image_id.split(":")[1]).write_bytes(image.config)
    return store


def test_the_layer_store_gives_the_same_archive_as_docker_save(tmp_path):
    image = Image()
    saved, _ = cold(cache_at(tmp_path / "a"), image)
    out, counted = io.BytesIO(), list[int]()
    cache = cache_at(tmp_path / "b")
    stats = write_from_store(FrameSink(out, 1), cache, store_for(tmp_path / "docker", image),
                             image.image_id, image.diff_ids, REFS, counted.append)
    assert out.getvalue() == saved
    assert stats.from_store and stats.compressed_layers == 2 and not stats.saved
    assert sum(counted) == sum(len(layer) for layer in image.layers)
    assert cache.config(image.image_id) == image.config


def test_a_layer_store_with_other_bytes_is_unusable_and_caches_nothing(tmp_path):
    image = Image()
    store = store_for(tmp_path / "docker", image)
    diff = tmp_path / "docker" / "overlay2" / "cache1" / "diff" / "app"
    diff.write_bytes(b"TOP\n")  # same size, other bytes
    cache = cache_at(tmp_path)
    with pytest.raises(StoreUnusable, match=image.diff_ids[1]):
        write_from_store(FrameSink(io.BytesIO(), 1), cache, store, image.image_id,
                         image.diff_ids, REFS, lambda n: None)
    assert cache.get(image.diff_ids[1]) is None


def test_a_layer_store_config_that_is_not_the_image_id_is_unusable(tmp_path):
    image = Image()
    store = store_for(tmp_path / "docker", image)
    (store.imagedb / image.image_id.split(":")[1]).write_bytes(image.config + b"\n")
    with pytest.raises(StoreUnusable, match="does not hash to its id"):
        write_from_store(FrameSink(io.BytesIO(), 1), cache_at(tmp_path), store, image.image_id,
                         image.diff_ids, REFS, lambda n: None)


@pytest.mark.parametrize("ref, name", [
    ("vllm:x", "docker.io/library/vllm:x"),
    ("me/vllm:x", "docker.io/me/vllm:x"),
    ("localhost/vllm:x", "localhost/vllm:x"),
    ("localhost:5000/vllm:x", "localhost:5000/vllm:x"),
    ("ghcr.io/me/vllm:x", "ghcr.io/me/vllm:x"),
    ("registry:5000/vllm:x", "registry:5000/vllm:x"),
])
def test_refs_are_named_as_containerd_names_them(ref, name):
    assert normalized_ref(ref) == name
