"""inv publish / inv load on the real Docker engine: round trips, refusals, interrupt safety,
and the per-layer cache (a republish reads no docker save; shared layers are compressed once).

The test image (tests/support/publish_images.py) is ~40 MB of real Python packages and shared
libraries carrying edgevllm's records (lock/verify/probe labels, mods file). Every test publishes
through a layer cache of its own module (EDGEVLLM_LAYER_CACHE), never the user's.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zstandard

from edgevllm.common.errors import ConfigError, IntegrityError, PublishError
from edgevllm.containers.docker import DockerEngine
from edgevllm.image.load import load
from edgevllm.image.publish import PublishOptions, default_name, parse_size, publish
from edgevllm.image.tarball import open_tarball
from support.checks import present
from support.platforms import native_platform
from support.publish_images import (
    LOCK,
    MODS,
    PROBE,
    VERIFY,
    NoSaveEngine,
    derived_image,
    remove_everything,
    small_image,
)

REPO = Path(__file__).resolve().parent.parent
MiB = 1 << 20


@pytest.fixture(scope="module", autouse=True)
def layer_cache(tmp_path_factory):
    """This module's layer cache, for the library calls and the CLI subprocesses alike."""
    root = tmp_path_factory.mktemp("layer-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EDGEVLLM_LAYER_CACHE", str(root))
        yield root


@pytest.fixture
def image(engine, python_image_native):
    """The small test image, rebuilt from the build cache if a test removed it."""
    return small_image(engine, python_image_native)


@pytest.fixture(scope="module")
def published(engine, python_image_native, tmp_path_factory, layer_cache):
    """One split zstd set of the small image (parts of 8 MiB), shared read-only by the tests."""
    out = tmp_path_factory.mktemp("published")
    tag = small_image(engine, python_image_native)
    result = publish(engine, PublishOptions(image=tag, out_dir=out, part_size=8 * MiB))
    return result


@pytest.fixture
def cli(cli):
    """The console entry point, importable from the checkout even when not pip-installed."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return lambda *args, **kw: cli(*args, env={"PYTHONPATH": path}, **kw)


def _copy_set(result, dest: Path) -> Path:
    for path in result.part_paths + [result.manifest_path]:
        shutil.copy2(path, dest / path.name)
    return dest / result.manifest_path.name


def _removed(engine, image_id: str) -> None:
    remove_everything(engine, image_id)
    assert not engine.image_exists(image_id)


# --- pure functions ------------------------------------------------------------------------------
def test_parse_size_accepts_units_and_rejects_garbage():
    assert parse_size("2G") == 2 << 30
    assert parse_size("1900M") == 1900 << 20
    assert parse_size("2GiB") == 2 << 30
    assert parse_size(None) is None
    with pytest.raises(ConfigError, match="--part-size 'lots'"):
        parse_size("lots")
    with pytest.raises(ConfigError, match="at least 1M"):
        parse_size("10K")


def test_default_name_is_file_name_safe():
    assert default_name("ghcr.io/me/vllm:spark-1") == "vllm_spark-1"
    assert default_name("localhost:5000/x/vllm") == "vllm"
    assert default_name("vllm:0.11.0+cu130") == "vllm_0.11.0_cu130"


# --- publish -------------------------------------------------------------------------------------
def test_publish_writes_parts_with_checksums_and_full_manifest(engine, published):
    """Manifest keys the verify task reads; every part's sha256 and size match the files."""
    manifest = json.loads(published.manifest_path.read_text())
    assert manifest["schema_version"] == 1 and manifest["format"] == "zst"
    assert len(manifest["parts"]) >= 2, "8 MiB parts of a ~40 MB image must split"
    for index, part in enumerate(manifest["parts"]):
        path = published.manifest_path.parent / part["file"]
        assert part["file"].endswith(f".tar.zst.part{index:03d}")
        assert path.stat().st_size == part["size"]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == part["sha256"]
        if index < len(manifest["parts"]) - 1:
            assert part["size"] == 8 * MiB
    assert manifest["total_size"] == sum(p["size"] for p in manifest["parts"])
    assert manifest["uncompressed_size"] > manifest["total_size"]
    tag = manifest["image"]["repo_tags"][0]
    inspect = engine.image_inspect(tag)
    assert manifest["image"]["id"] == inspect["Id"]
    assert manifest["image"]["platform"] == native_platform()   # the test image's
    assert manifest["image"]["size"] == inspect["Size"]
    assert manifest["name"] == default_name(tag)
    assert manifest["lock"] == LOCK and manifest["verify"] == VERIFY
    assert manifest["probe"] == PROBE
    assert manifest["mods"] == MODS, "mods come from /opt/edgevllm/mods.json in the image"
    assert manifest["labels"]["org.opencontainers.image.title"] == "edgevllm test image"
    assert manifest["tool_version"] and manifest["created"].endswith("Z")
    leftovers = [p.name for p in published.manifest_path.parent.iterdir() if ".tmp-" in p.name]
    assert leftovers == []


def test_publish_then_remove_then_load_gives_same_image(engine, image, published, tmp_path):
    """The full round trip through the engine, driven through the CLI's load."""
    image_id = engine.image_id(image)
    _removed(engine, image_id)
    manifest = _copy_set(published, tmp_path)
    result = load(engine, manifest)
    assert result.verified and result.image_id == image_id
    assert result.loaded == [image]
    assert engine.image_id(image) == image_id


def test_gzip_publish_loads_with_plain_docker_load(engine, image, cli, tmp_path):
    """--format gz is for `docker load < x.tar.gz` users: the real docker reads it as it is."""
    image_id = engine.image_id(image)
    code, out, err = cli(
        "publish", "--image", image, "--out", str(tmp_path), "--format", "gz", "--name", "gz"
    )
    assert code == 0, err
    tarball = tmp_path / "gz.tar.gz"
    assert out.split() == [str(tarball), str(tmp_path / "gz.manifest.json")]
    _removed(engine, image_id)
    with open(tarball, "rb") as handle:
        proc = subprocess.run(["docker", "load"], stdin=handle, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert engine.image_id(image) == image_id


def test_cli_load_prints_loaded_tags(engine, image, published, cli, tmp_path):
    image_id = engine.image_id(image)
    _copy_set(published, tmp_path)
    _removed(engine, image_id)
    part = sorted(tmp_path.glob("*.part001"))[0]
    code, out, err = cli("load", str(part))  # any part finds its manifest beside it
    assert code == 0, err
    assert out.split() == [image]
    assert f"free under {engine.root_dir()} (docker load needs 0.0" in err, err
    assert engine.image_id(image) == image_id


def test_publish_refuses_to_overwrite_without_force(engine, image, published):
    out = published.manifest_path.parent
    with pytest.raises(PublishError, match="already exists: pass --force"):
        publish(engine, PublishOptions(image=image, out_dir=out, part_size=8 * MiB))


def test_force_replaces_a_split_set_with_one_file(engine, image, tmp_path):
    publish(engine, PublishOptions(image=image, out_dir=tmp_path, name="x", part_size=4 * MiB))
    result = publish(engine, PublishOptions(image=image, out_dir=tmp_path, name="x", force=True))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.manifest.json", "x.tar.zst"]
    assert open_tarball(result.manifest_path).parts[0].path == tmp_path / "x.tar.zst"


def test_publish_of_a_missing_image_is_one_line(cli, tmp_path):
    code, out, err = cli(
        "publish", "--image", "edgevllm-test-publish-absent:nope", "--out", str(tmp_path)
    )
    assert code == 4 and "image 'edgevllm-test-publish-absent:nope' not found" in err
    assert "Traceback" not in err and list(tmp_path.iterdir()) == []


# --- refusals before anything reaches the engine -------------------------------------------------
def _corrupt_flip(manifest: Path) -> None:
    part = sorted(manifest.parent.glob("*.part001"))[0]
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0x01
    part.write_bytes(bytes(data))


def _corrupt_truncate(manifest: Path) -> None:
    part = sorted(manifest.parent.glob("*.part000"))[0]
    with open(part, "r+b") as handle:
        handle.truncate(part.stat().st_size - 1000)


def _corrupt_missing(manifest: Path) -> None:
    sorted(manifest.parent.glob("*.part001"))[0].unlink()


def _corrupt_manifest(manifest: Path) -> None:
    """A manifest that does not match its parts: their checksums listed the wrong way round."""
    data = json.loads(manifest.read_text())
    first, second = data["parts"][0], data["parts"][1]
    first["sha256"], second["sha256"] = second["sha256"], first["sha256"]
    manifest.write_text(json.dumps(data))


@pytest.mark.parametrize(
    "corrupt, message",
    [
        (_corrupt_flip, "sha256 mismatch"),
        (_corrupt_truncate, "truncated or corrupt"),
        (_corrupt_missing, "part is missing"),
        (_corrupt_manifest, "sha256 mismatch"),
    ],
)
def test_damaged_sets_are_refused_before_loading(
    engine, image, published, cli, tmp_path, corrupt, message
):
    image_id = engine.image_id(image)
    manifest = _copy_set(published, tmp_path)
    corrupt(manifest)
    _removed(engine, image_id)
    code, out, err = cli("load", str(manifest))
    assert code == 10, err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not engine.image_exists(image_id), "nothing may reach the engine"


def test_manifest_naming_another_image_is_refused(engine, image, published, tmp_path):
    manifest = _copy_set(published, tmp_path)
    data = json.loads(manifest.read_text())
    data["image"]["id"] = "sha256:" + "0" * 64
    manifest.write_text(json.dumps(data))
    with pytest.raises(IntegrityError, match="the manifest names"):  # before docker load
        load(engine, manifest)


def test_malformed_manifest_names_the_field(published, tmp_path):
    manifest = _copy_set(published, tmp_path)
    data = json.loads(manifest.read_text())
    del data["parts"][0]["sha256"]
    manifest.write_text(json.dumps(data))
    with pytest.raises(IntegrityError, match=r"field 'parts\.0\.sha256'"):
        open_tarball(manifest)
    manifest.write_text("{not json")
    with pytest.raises(IntegrityError, match=r"manifest\.json: not valid JSON \(line 1"):
        open_tarball(manifest)


# --- bare tarballs -------------------------------------------------------------------------------
def _bare_zst(engine, image: str, dest: Path) -> Path:
    with engine.save_stream([image]) as stream, open(dest, "wb") as out:
        zstandard.ZstdCompressor(level=1, write_checksum=True).copy_stream(stream, out)
    return dest


def test_bare_tarball_loads_with_a_warning(engine, image, cli, tmp_path):
    image_id = engine.image_id(image)
    tarball = _bare_zst(engine, image, tmp_path / "bare.tar.zst")
    _removed(engine, image_id)
    code, out, err = cli("load", str(tarball))
    assert code == 0, err
    assert "could not be verified" in err and out.split() == [image]
    assert engine.image_id(image) == image_id


def test_bare_tarball_with_wrong_sidecar_is_refused(engine, image, cli, tmp_path):
    tarball = _bare_zst(engine, image, tmp_path / "side.tar.zst")
    (tmp_path / "side.tar.zst.sha256").write_text("0" * 64 + "  side.tar.zst\n")
    code, out, err = cli("load", str(tarball))
    assert code == 10 and "sha256 mismatch" in err


def test_corrupt_bare_tarball_is_refused_with_one_line(engine, image, cli, tmp_path):
    image_id = engine.image_id(image)
    tarball = _bare_zst(engine, image, tmp_path / "bad.tar.zst")
    data = bytearray(tarball.read_bytes())
    truncated = tmp_path / "cut.tar.zst"
    truncated.write_bytes(bytes(data[: len(data) * 2 // 3]))
    data[len(data) // 2] ^= 0x40
    tarball.write_bytes(bytes(data))
    _removed(engine, image_id)
    # The flipped byte is refused by whichever check meets it first: zstd's own (a corrupt
    # block) or, where it lands in a stored block of the image's random bytes, the blob's hash.
    for path, messages in ((tarball, ("zstd stream is corrupt", "does not hash to its name")),
                           (truncated, ("truncated",))):
        code, out, err = cli("load", str(path))
        assert code == 10, err
        assert any(m in err for m in messages) and "Traceback" not in err, err
        assert err.strip().splitlines()[-1].startswith("error:"), err
        assert not engine.image_exists(image_id)


def test_not_a_tarball_is_refused(cli, tmp_path):
    junk = tmp_path / "junk.tar.zst"
    junk.write_bytes(b"hello" * 200)
    code, out, err = cli("load", str(junk))
    assert code == 10 and "neither a tar, gzip nor zstd file" in err


# --- interrupt safety ----------------------------------------------------------------------------
def test_ctrl_c_during_publish_leaves_nothing(python_image_native, tmp_path, layer_cache):
    """Ctrl-C while parts are being written: no final name, no temporary (in the output or the
    layer cache), exit 130.

    The ~490 MB Debian + Python base image at zstd level 12 takes tens of seconds on two
    cores, so the signal lands while the stream is flowing (the test waits for the first
    temporary parts to appear), however fast or loaded the machine is.
    """
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from edgevllm.cli import main; main()",
            "publish",
            "--image",
            python_image_native,
            "--out",
            str(out),
            "--part-size",
            "4M",
            "--level",
            "12",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
        env={**os.environ, "NO_COLOR": "1"},
        start_new_session=True,
    )  # its own process group, as a terminal's Ctrl-C signals it
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        temps = list(out.glob(".*.tmp-*")) if out.exists() else []
        if len(temps) >= 2:
            break
        time.sleep(0.05)
    assert proc.poll() is None, (
        "publish ended before it could be interrupted: "
        + present(proc.stderr).read().decode(errors="replace")
    )
    os.killpg(proc.pid, signal.SIGINT)  # to publish and its `docker save` child alike
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err.decode()
    assert "interrupted" in err.decode()
    assert list(out.iterdir()) == []
    assert list(layer_cache.glob("*/.*.tmp-*")) == [], "a half-compressed layer stays out"


def test_gzip_set_loads_through_inv_load_and_truncation_is_caught(engine, image, tmp_path):
    """The multi-member gzip path of the reader: a whole set loads, a cut copy is refused."""
    image_id = engine.image_id(image)
    result = publish(
        engine,
        PublishOptions(image=image, out_dir=tmp_path / "set", format="gz", part_size=4 * MiB),
    )
    assert len(result.part_paths) >= 2
    cut = tmp_path / "cut.tar.gz"
    with open(cut, "wb") as out:
        for part in result.part_paths[:-1]:
            out.write(part.read_bytes())
    _removed(engine, image_id)
    with pytest.raises(IntegrityError, match="gzip stream is truncated"):
        load(engine, cut)
    assert not engine.image_exists(image_id)
    loaded = load(engine, result.manifest_path)
    assert loaded.image_id == image_id and loaded.loaded == [image]


# --- the layer cache -----------------------------------------------------------------------------
def _stream_bytes(result) -> bytes:
    return b"".join(path.read_bytes() for path in result.part_paths)


def _members(manifest: Path) -> dict[str, bytes]:
    """The decompressed archive of a set, member name → data (the test image is small)."""
    import tarfile

    with open_tarball(manifest).tar_stream() as stream:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            return {m.name: present(tar.extractfile(m)).read() for m in tar if m.isfile()}


def test_republish_reads_no_docker_save_and_writes_the_same_bytes(
    engine, image, tmp_path, layer_cache
):
    cache = tmp_path / "cache"
    cold = publish(
        engine,
        PublishOptions(
            image=image, out_dir=tmp_path / "a", layer_cache=cache, read_layer_store=False
        ),
    )
    warm = publish(
        NoSaveEngine(), PublishOptions(image=image, out_dir=tmp_path / "b", layer_cache=cache)
    )
    layers = len(set(engine.image_inspect(image)["RootFS"]["Layers"]))
    assert cold.layers is not None and warm.layers is not None
    assert cold.layers.saved and cold.layers.compressed_layers == layers
    assert not warm.layers.saved and warm.layers.cached_layers == layers
    assert _stream_bytes(warm) == _stream_bytes(cold)
    assert warm.manifest["parts"] == cold.manifest["parts"]


def test_the_archive_is_what_docker_load_and_oci_readers_expect(engine, image, published):
    """manifest.json names the config and the layers in order; every blob is its own digest.
    Checked against the image the set was published from (the id publish read): the tag may
    name a rebuilt image by now, if an earlier test removed it and the build cache was gone."""
    members = _members(published.manifest_path)
    docker_manifest = json.loads(members["manifest.json"])
    assert docker_manifest[0]["RepoTags"] == [image]
    config = members[docker_manifest[0]["Config"]]
    image_id = published.manifest["image"]["id"]  # what publish read of the image
    assert image_id and "sha256:" + hashlib.sha256(config).hexdigest() == image_id
    diff_ids = json.loads(config)["rootfs"]["diff_ids"]
    assert ["sha256:" + name.rsplit("/", 1)[1] for name in docker_manifest[0]["Layers"]] == diff_ids
    if engine.image_exists(image_id):  # the engine's view of the same image agrees
        assert engine.image_inspect(image_id)["RootFS"]["Layers"] == diff_ids
    for name, data in members.items():
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(data).hexdigest() == name.rsplit("/", 1)[1], name
    index = json.loads(members["index.json"])
    oci = json.loads(members["blobs/sha256/" + index["manifests"][0]["digest"].split(":")[1]])
    assert oci["config"]["digest"] == image_id
    assert (
        index["manifests"][0]["annotations"]["io.containerd.image.name"]
        == f"docker.io/library/{image}"
    )


def test_an_image_sharing_layers_compresses_only_its_own(engine, image, tmp_path):
    cache = tmp_path / "cache"
    publish(engine, PublishOptions(image=image, out_dir=tmp_path / "base", layer_cache=cache))
    derived = derived_image(engine, image, "derived")
    try:
        result = publish(
            engine, PublishOptions(image=derived, out_dir=tmp_path / "derived", layer_cache=cache)
        )
        shared = len(set(engine.image_inspect(image)["RootFS"]["Layers"]))
        assert result.layers is not None
        assert (result.layers.cached_layers, result.layers.compressed_layers) == (shared, 1)
        image_id = engine.image_id(derived)
        _removed(engine, image_id)
        assert load(engine, result.manifest_path).image_id == image_id
    finally:
        remove_everything(engine, engine.image_id(derived)) if engine.image_exists(
            derived
        ) else None


def test_a_corrupt_cache_entry_is_evicted_and_compressed_again(engine, image, tmp_path):
    cache = tmp_path / "cache"
    first = publish(engine, PublishOptions(image=image, out_dir=tmp_path / "a", layer_cache=cache))
    blob = max(cache.glob("zstd-*/*.zst"), key=lambda p: p.stat().st_size)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0x10
    blob.write_bytes(bytes(data))
    again = publish(engine, PublishOptions(image=image, out_dir=tmp_path / "b", layer_cache=cache))
    assert again.layers is not None
    assert again.layers.compressed_layers == 1 and again.layers.cached_layers == 2
    assert _stream_bytes(again) == _stream_bytes(first), "the set must not carry the bad bytes"
    assert blob.read_bytes() != bytes(data), "the entry is written afresh"


def test_prime_cache_makes_the_first_publish_warm(engine, image, cli, tmp_path):
    cache = tmp_path / "cache"
    code, out, err = cli("publish", "--image", image, "--prime-cache", "--layer-cache", str(cache))
    assert code == 0, err
    assert "compressed into the cache" in err and list(cache.glob("configs/*.json"))
    result = publish(
        NoSaveEngine(), PublishOptions(image=image, out_dir=tmp_path / "out", layer_cache=cache)
    )
    assert result.layers is not None
    assert not result.layers.saved


def test_manifest_states_the_window_and_load_says_the_memory(
    engine, image, published, cli, tmp_path
):
    compression = json.loads(published.manifest_path.read_text())["compression"]
    assert compression["codec"] == "zstd" and compression["long_distance_matching"] is True
    assert compression["window_log"] == 27 and compression["layout"] == "frames-per-layer"
    assert 128 * MiB < compression["decompression_memory"] < 130 * MiB
    image_id = engine.image_id(image)
    manifest = _copy_set(published, tmp_path)
    _removed(engine, image_id)
    code, out, err = cli("load", str(manifest))
    assert code == 0, err
    from edgevllm.image.progress import human

    memory = human(compression["decompression_memory"])
    assert f"decompression needs {memory} of memory (zstd window 128.0 MiB)" in err


def test_every_frame_fits_the_declared_window(published):
    """Walk the stream frame by frame: no frame asks a decoder for more than the manifest says."""
    declared = 1 << json.loads(published.manifest_path.read_text())["compression"]["window_log"]
    data, frames = _stream_bytes(published), 0
    while data:
        assert zstandard.get_frame_parameters(data).window_size <= declared
        obj = zstandard.ZstdDecompressor(max_window_size=declared).decompressobj()
        obj.decompress(data)
        assert obj.eof
        data, frames = obj.unused_data, frames + 1
    assert frames > 4, "headers, layers and metadata are frames of their own"


def test_a_set_in_the_previous_layout_still_loads(engine, image, tmp_path):
    """A set as edgevllm wrote it before the layer cache: one zstd frame, level 3, no window
    record in the manifest. It loads as it is, and the note says the window bound."""
    result = publish(
        engine, PublishOptions(image=image, out_dir=tmp_path, long=0, use_layer_cache=False)
    )
    manifest = json.loads(result.manifest_path.read_text())
    manifest["compression"] = {"level": 3, "threads": -1}
    result.manifest_path.write_text(json.dumps(manifest))
    image_id = engine.image_id(image)
    _removed(engine, image_id)
    assert load(engine, result.manifest_path).image_id == image_id


def _frame_needing(window_log: int, payload: bytes) -> bytes:
    """A valid zstd frame (one raw block) whose header asks for a 2**window_log window."""
    descriptor = (window_log - 10) << 3
    block = (1 | (len(payload) << 3)).to_bytes(3, "little")  # last block, raw
    return b"\x28\xb5\x2f\xfd" + bytes([0x00, descriptor]) + block + payload


def test_the_reader_takes_the_window_its_manifest_declares_and_no_more(tmp_path):
    from edgevllm.image.tarball import TarballSet, from_manifest

    frame = _frame_needing(28, b"x" * 100)
    bare = tmp_path / "big-window.tar.zst"
    bare.write_bytes(frame)
    with pytest.raises(IntegrityError, match=r"needs a window over 128 MiB.*zstd -d --long=31"):
        with open_tarball(bare).tar_stream() as stream:
            stream.read()
    manifest = {
        "schema_version": 1,
        "name": "w",
        "format": "zst",
        "compression": {"window_log": 28},
        "parts": [
            {"file": bare.name, "size": len(frame), "sha256": hashlib.sha256(frame).hexdigest()}
        ],
        "total_size": len(frame),
        "uncompressed_size": 100,
        "image": {},
        "labels": {},
        "tool_version": "test",
        "created": "2026-01-01T00:00:00Z",
    }
    path = tmp_path / "w.manifest.json"
    path.write_text(json.dumps(manifest))
    tarset = from_manifest(path)
    assert isinstance(tarset, TarballSet) and tarset.window_log == 28
    with tarset.tar_stream() as stream:
        assert stream.read() == b"x" * 100


def test_bad_long_window_is_one_line(cli, image, tmp_path):
    code, out, err = cli("publish", "--image", image, "--out", str(tmp_path), "--long", "40")
    assert code == 2 and "--long 40: expected a whole number from 10 to 31" in err
    assert err.count("\n") == 1 and list(tmp_path.iterdir()) == []


# --- cold publish from the local layer store -----------------------------------------------------
def _require_layer_store(engine) -> None:
    from edgevllm.image.layerstore import LocalLayerStore

    if LocalLayerStore.find(engine) is None:
        pytest.fail(
            "these tests read the engine's overlay2 layer store: run them as root "
            "against the local default Docker engine (as .ci/run does)"
        )


def test_cold_publish_from_the_layer_store_runs_no_docker_save(engine, image, tmp_path):
    _require_layer_store(engine)
    via_save = publish(
        engine,
        PublishOptions(
            image=image,
            out_dir=tmp_path / "save",
            layer_cache=tmp_path / "c1",
            read_layer_store=False,
        ),
    )
    via_store = publish(
        NoSaveEngine(),
        PublishOptions(image=image, out_dir=tmp_path / "store", layer_cache=tmp_path / "c2"),
    )
    assert via_save.layers is not None and via_store.layers is not None
    assert via_save.layers.saved and not via_store.layers.saved and via_store.layers.from_store
    assert via_store.layers.compressed_layers == via_save.layers.compressed_layers > 0
    assert _stream_bytes(via_store) == _stream_bytes(via_save)


def test_a_layer_store_giving_other_bytes_falls_back_to_docker_save(
    engine, image, tmp_path, monkeypatch
):
    from edgevllm.image.layerstore import LocalLayerStore

    _require_layer_store(engine)
    real_blocks = LocalLayerStore.tar_blocks

    def flipped(self, chain_id):
        for block in real_blocks(self, chain_id):
            yield bytes([block[0] ^ 1]) + block[1:] if block else block

    monkeypatch.setattr(LocalLayerStore, "tar_blocks", flipped)
    cache = tmp_path / "cache"
    result = publish(engine, PublishOptions(image=image, out_dir=tmp_path / "a", layer_cache=cache))
    assert result.layers is not None
    assert result.layers.saved and not result.layers.from_store
    image_id = engine.image_id(image)
    _removed(engine, image_id)
    assert load(engine, result.manifest_path).image_id == image_id
    monkeypatch.undo()
    again = publish(
        NoSaveEngine(), PublishOptions(image=image, out_dir=tmp_path / "b", layer_cache=cache)
    )
    assert _stream_bytes(again) == _stream_bytes(result), "only true bytes were cached"


class EmptySaveEngine(DockerEngine):
    """The real engine, except that ``docker save`` gives an empty stream (a daemon that closed
    the pipe): publish must refuse rather than write a set holding nothing."""

    @contextlib.contextmanager
    def save_stream(self, refs):
        yield io.BytesIO(b"")


@pytest.mark.parametrize("fmt", ["zst", "gz"])
def test_publish_of_an_empty_save_stream_writes_no_set(image, tmp_path, fmt):
    options = PublishOptions(image=image, out_dir=tmp_path, format=fmt, use_layer_cache=False)
    with pytest.raises(IntegrityError, match="docker save gave 0 bytes"):
        publish(EmptySaveEngine(), options)
    assert list(tmp_path.iterdir()) == []


# --- loading only what the engine lacks (image/loadskip.py) --------------------------------------
def test_a_load_sends_only_the_layers_the_engine_lacks(engine, image, cli, tmp_path):
    """An update of an image whose base the engine holds: only the new layer is sent."""
    derived = derived_image(engine, image, "update")
    try:
        shared = len(engine.image_inspect(image)["RootFS"]["Layers"])
        code, out, err = cli("publish", "--image", derived, "--out", str(tmp_path))
        assert code == 0, err
        manifest = [line for line in out.split() if line.endswith(".manifest.json")][-1]
        image_id = engine.image_id(derived)
        _removed(engine, image_id)
        assert engine.image_exists(image)
        code, out, err = cli("load", manifest)
        assert code == 0, err
        assert f"{shared} of {shared + 1} layers (" in err and "already in the engine" in err
        assert out.split() == [derived] and engine.image_id(derived) == image_id
        _removed(engine, image_id)
        code, out, err = cli("load", manifest, "--every-layer")   # the whole archive, as before
        assert code == 0, err
        assert "already in the engine" not in err and out.split() == [derived]
        assert engine.image_id(derived) == image_id
    finally:
        remove_everything(engine, engine.image_id(derived)) if engine.image_exists(
            derived) else None


def test_a_layer_gone_between_the_look_and_the_load_is_sent_after_all(engine, tmp_path, capsys):
    """An imported one-layer image (no build cache holds its layer): left out while the image
    is there, then the image goes before docker load runs; the load runs again with it."""
    from edgevllm.image.load import _held_layers, _load_sending
    from support.images import one_file_image

    tag = one_file_image(engine, tmp_path, f"edgevllm-test-loadskip:{os.urandom(4).hex()}",
                         os.urandom(4096))
    try:
        result = publish(engine, PublishOptions(image=tag, out_dir=tmp_path / "set"))
        tarset = open_tarball(result.manifest_path)
        tarset.check_contents()
        skip = _held_layers(engine, tarset)
        assert len(skip.members) == 1, skip
        image_id = engine.image_id(tag)
        _removed(engine, image_id)
        assert _load_sending(engine, tarset, skip) == [tag]
        assert engine.image_id(tag) == image_id
        assert "loading again with every layer" in capsys.readouterr().err
    finally:
        remove_everything(engine, tag) if engine.image_exists(tag) else None
