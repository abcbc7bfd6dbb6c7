"""A published set is checked whole before the engine sees a byte (image/setcheck.py,
``TarballSet.check_contents``): exactly one image, every member listed and hashed, the manifest's
image id and tags; a part listed twice or a million parts are refused at the manifest. The
archives are docker-save shaped (tests/support/fake_rootfs.py), carrying a second, unsigned,
tagged image where a test says so; the load tests use the real engine and assert that nothing
reached it."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import time
import tracemalloc
from pathlib import Path

import pytest

from edgevllm.common.errors import IntegrityError
from edgevllm.image.setcheck import check_archive
from edgevllm.image.tarball import open_tarball
from edgevllm.image.tarmanifest import MAX_PARTS, read_manifest
from support.checks import present
from support.fake_rootfs import LAYER1, docker_save_archive, sha, tar_of
from support.tarsets import write_set

EVIL = "edgevllm-test/second-unsigned:33"


def _members(archive: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return {m.name: present(tar.extractfile(m)).read() for m in tar if m.isfile()}


def _with_second_image(archive: bytes, listed: bool = True) -> bytes:
    """The archive plus a second image (its own config and layer), tagged EVIL; ``listed``:
    manifest.json names it too (as `docker save a b` writes), else it rides along unlisted."""
    files = _members(archive)
    layer = tar_of({"etc/evil": b"payload\n"})
    config = json.dumps({"config": {}, "rootfs": {"type": "layers",
                                                  "diff_ids": ["sha256:" + sha(layer)]}}).encode()
    files[f"blobs/sha256/{sha(layer)}"] = layer
    files[f"blobs/sha256/{sha(config)}"] = config
    if listed:
        entries = json.loads(files["manifest.json"])
        entries.append({"Config": f"blobs/sha256/{sha(config)}", "RepoTags": [EVIL],
                        "Layers": [f"blobs/sha256/{sha(layer)}"]})
        files["manifest.json"] = json.dumps(entries).encode()
    manifest = files.pop("manifest.json")
    return tar_of({**files, "manifest.json": manifest})


def test_one_whole_image_passes_with_its_id_and_tags():
    archive, image_id = docker_save_archive()
    shape = check_archive(io.BytesIO(archive), "s.tar", image_id, ["x:1"])
    assert shape.image_id == image_id and shape.tags == ["x:1"]


@pytest.mark.parametrize(("change", "needle"), [
    (lambda a: _with_second_image(a), "manifest.json names 2 images"),
    (lambda a: _with_second_image(a, listed=False), "that the image does not list"),
    (lambda a: tar_of({**_members(a), "notes.txt": b"hi"}), "not one docker save writes"),
    (lambda a: a.replace(b"six.py,sha256=abc", b"six.py,sha256=XYZ"), "does not hash to its name"),
])
def test_an_archive_that_is_not_exactly_one_image_is_refused(change, needle):
    archive, image_id = docker_save_archive()
    with pytest.raises(IntegrityError, match=needle):
        check_archive(io.BytesIO(change(archive)), "s.tar", image_id, ["x:1"])


def test_the_manifest_s_id_and_tags_are_the_archive_s():
    archive, image_id = docker_save_archive()
    with pytest.raises(IntegrityError, match="the manifest names sha256:0000"):
        check_archive(io.BytesIO(archive), "s.tar", "sha256:" + "0" * 64, ["x:1"])
    with pytest.raises(IntegrityError, match="the manifest says"):
        check_archive(io.BytesIO(archive), "s.tar", image_id, ["x:1", EVIL])


def _set(folder: Path, archive: bytes, image_id: str, tags: list[str]) -> Path:
    return write_set(folder, archive, parts=3, image={"id": image_id, "repo_tags": tags})


def test_a_part_listed_twice_is_refused_at_the_manifest(tmp_path):
    archive, image_id = docker_save_archive()
    manifest = _set(tmp_path, archive, image_id, ["x:1"])
    data = json.loads(manifest.read_text())
    data["parts"].insert(1, data["parts"][0])
    data["total_size"] += data["parts"][0]["size"]
    manifest.write_text(json.dumps(data))
    with pytest.raises(IntegrityError, match="'s.tar.zst.part000' is listed twice"):
        open_tarball(manifest)


def test_a_million_part_manifest_is_refused_before_its_parts_are_read(tmp_path):
    """A manifest of a million parts (1.2 GB and 35 s, then "part 1 missing", before): one over
    16 MiB is refused by its size, a smaller one by its part count, before any part is
    validated or looked for (180,000 and 100,001 parts here: the file is the test's cost)."""
    line = '{"file": "s.tar.zst.part%07d", "size": 1, "sha256": "%s"}'
    # (the one JSON reader, common/dataload.py, may refuse the count of values first)
    for count, needle in ((180_000, "over the 16 MiB"),
                          (MAX_PARTS + 1, "parts, over the|more than 200000 values")):
        parts = ",".join(line % (i, "0" * 64) for i in range(count))
        path = tmp_path / f"{count}.manifest.json"
        path.write_text('{"schema_version": 1, "parts": [' + parts + "]}")
        started = time.monotonic()
        tracemalloc.start()
        try:
            with pytest.raises(IntegrityError, match=needle):
                read_manifest(path)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 160 << 20, peak >> 20
        assert time.monotonic() - started < 60  # not a timing assertion: a bound on a hang


def test_load_refuses_a_second_unsigned_tagged_image_before_the_engine_sees_a_byte(
        engine, tmp_path):
    from edgevllm.image.load import load

    archive, image_id = docker_save_archive()
    manifest = _set(tmp_path, _with_second_image(archive), image_id, ["x:1"])
    with pytest.raises(IntegrityError, match="names 2 images"):
        load(engine, manifest)
    assert not engine.image_exists(EVIL) and not engine.image_exists(image_id)


def test_load_refuses_a_part_listed_twice_before_the_engine_sees_a_byte(engine, tmp_path):
    from edgevllm.image.load import load

    archive, image_id = docker_save_archive()
    manifest = _set(tmp_path, archive, image_id, ["x:1"])
    data = json.loads(manifest.read_text())
    data["parts"].append(data["parts"][-1])
    data["total_size"] += data["parts"][-1]["size"]
    manifest.write_text(json.dumps(data))
    with pytest.raises(IntegrityError, match="listed twice"):
        load(engine, manifest)
    assert not engine.image_exists(image_id)


def test_the_fake_archive_is_what_the_set_check_reads():
    """Guard for the tests above: the seed archive's layer holds the files the SBOM tests use."""
    files = _members(docker_save_archive()[0])
    assert any(hashlib.sha256(tar_of(LAYER1)).hexdigest() in name for name in files)
