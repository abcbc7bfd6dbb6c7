"""inv publish / inv load on the real Docker engine: round trips, refusals, interrupt safety.

The test image (tests/support/publish_images.py) is ~40 MB of real Python packages and shared
libraries carrying edgevllm's records (lock/verify/probe labels, mods file).
"""

from __future__ import annotations

import hashlib
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

from edgevllm.kernel.errors import ConfigError, IntegrityError, PublishError
from edgevllm.image.publish import PublishOptions, default_name, load, parse_size, publish
from edgevllm.image.tarball import open_tarball
from support.publish_images import LOCK, MODS, PROBE, VERIFY, remove_everything, small_image

REPO = Path(__file__).resolve().parent.parent
MiB = 1 << 20


@pytest.fixture
def image(engine, python_image_amd64):
    """The small test image, rebuilt from the build cache if a test removed it."""
    return small_image(engine, python_image_amd64)


@pytest.fixture(scope="module")
def published(engine, python_image_amd64, tmp_path_factory):
    """One split zstd set of the small image (parts of 8 MiB), shared read-only by the tests."""
    out = tmp_path_factory.mktemp("published")
    tag = small_image(engine, python_image_amd64)
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


# --- pure functions ----------------------------------------------------------------------------
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


# --- publish -----------------------------------------------------------------------------------
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
    assert manifest["image"]["platform"] == "linux/amd64"
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
    code, out, err = cli("publish", "--image", image, "--out", str(tmp_path), "--format", "gz",
                         "--name", "gz")
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
    code, out, err = cli("publish", "--image", "edgevllm-test-publish-absent:nope",
                         "--out", str(tmp_path))
    assert code == 4 and "image 'edgevllm-test-publish-absent:nope' not found" in err
    assert "Traceback" not in err and list(tmp_path.iterdir()) == []


# --- refusals before anything reaches the engine -----------------------------------------------
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


@pytest.mark.parametrize("corrupt, message", [
    (_corrupt_flip, "sha256 mismatch"),
    (_corrupt_truncate, "truncated or corrupt"),
    (_corrupt_missing, "part is missing"),
    (_corrupt_manifest, "sha256 mismatch"),
])
def test_damaged_sets_are_refused_before_loading(engine, image, published, cli, tmp_path,
                                                 corrupt, message):
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
    with pytest.raises(IntegrityError, match="is not the one the manifest names"):
        load(engine, manifest)


def test_malformed_manifest_names_the_field(published, tmp_path):
    manifest = _copy_set(published, tmp_path)
    data = json.loads(manifest.read_text())
    del data["parts"][0]["sha256"]
    manifest.write_text(json.dumps(data))
    with pytest.raises(IntegrityError, match=r"field 'parts\.0\.sha256'"):
        open_tarball(manifest)
    manifest.write_text("{not json")
    with pytest.raises(IntegrityError, match="not a JSON manifest"):
        open_tarball(manifest)


# --- bare tarballs -----------------------------------------------------------------------------
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
    for path, message in ((tarball, "zstd stream is corrupt"), (truncated, "truncated")):
        code, out, err = cli("load", str(path))
        assert code == 10, err
        assert message in err and "Traceback" not in err
        assert not engine.image_exists(image_id)


def test_not_a_tarball_is_refused(cli, tmp_path):
    junk = tmp_path / "junk.tar.zst"
    junk.write_bytes(b"hello" * 200)
    code, out, err = cli("load", str(junk))
    assert code == 10 and "neither a tar, gzip nor zstd file" in err


# --- interrupt safety --------------------------------------------------------------------------
def test_ctrl_c_during_publish_leaves_nothing(python_image_amd64, tmp_path):
    """Ctrl-C while parts are being written: no final name, no temporary, exit 130.

    The ~490 MB Debian + Python base image takes seconds to compress, so the signal lands while
    the stream is flowing (the test waits for the first temporary part to appear).
    """
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-c", "from edgevllm.cli import main; main()", "publish",
         "--image", python_image_amd64, "--out", str(out), "--part-size", "4M", "--level", "9"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO, env={**os.environ, "NO_COLOR": "1"},
        start_new_session=True)  # its own process group, as a terminal's Ctrl-C signals it
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        temps = list(out.glob(".*.tmp-*")) if out.exists() else []
        if len(temps) >= 2:
            break
        time.sleep(0.05)
    assert proc.poll() is None, f"publish ended before it could be interrupted: {proc.stderr.read()}"
    os.killpg(proc.pid, signal.SIGINT)  # to publish and its `docker save` child alike
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err.decode()
    assert "interrupted" in err.decode()
    assert list(out.iterdir()) == []


def test_gzip_set_loads_through_inv_load_and_truncation_is_caught(engine, image, tmp_path):
    """The multi-member gzip path of the reader: a whole set loads, a cut copy is refused."""
    image_id = engine.image_id(image)
    result = publish(engine, PublishOptions(image=image, out_dir=tmp_path / "set", format="gz",
                                            part_size=4 * MiB))
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
