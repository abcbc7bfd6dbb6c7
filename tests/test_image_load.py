"""image/load.py before the engine: every check of ``inv load`` runs before ``docker load`` would
read a byte, proven with an engine the docker CLI cannot reach (a socket that is not there): a
damaged set is the set's own IntegrityError line, never the engine's error; a set that passes
every check gets as far as the engine. The line about the decoder's memory says what the
manifest states, else the bound. (Loading into a real engine: tests/test_image_publish.py.)"""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from edgevllm.common.errors import DockerUnavailableError, IntegrityError, MissingInputError
from edgevllm.containers.docker import DockerEngine
from edgevllm.image.load import decompression_note, load
from edgevllm.image.tarball import open_tarball
from support.fake_rootfs import docker_save_archive
from support.tarsets import write_set


@pytest.fixture
def nowhere(tmp_path) -> DockerEngine:
    if shutil.which("docker") is None:
        pytest.fail("the docker CLI is missing: install docker-ce-cli (no engine is needed)")
    return DockerEngine(host=f"unix://{tmp_path}/no-engine.sock")


def published(folder: Path, archive: bytes | None = None, image_id: str | None = None,
              **fields: object) -> Path:
    """A set of ``archive`` (the fake two-layer image unless given) and its manifest."""
    if archive is None:
        archive, image_id = docker_save_archive()
    image = {"id": image_id, "repo_tags": ["x:1"]}
    return write_set(folder, archive, parts=3, image=image, **fields)


def test_a_set_that_passes_every_check_gets_as_far_as_the_engine(tmp_path, nowhere):
    manifest = published(tmp_path)
    with pytest.raises(DockerUnavailableError, match="cannot reach the Docker daemon"):
        load(nowhere, manifest)  # the first thing it asks the engine: the layers it holds
    assert open_tarball(manifest).verifiable


def test_a_part_with_a_changed_byte_is_refused_before_the_engine(tmp_path, nowhere):
    manifest = published(tmp_path)
    part = sorted(tmp_path.glob("*.part*"))[1]
    data = bytearray(part.read_bytes())
    data[0] ^= 1
    part.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match=rf"{part.name}: sha256 mismatch \(part 2 of "):
        load(nowhere, manifest)


def test_a_set_whose_archive_is_another_image_is_refused_before_the_engine(tmp_path, nowhere):
    archive, _ = docker_save_archive()
    manifest = published(tmp_path, archive, "sha256:" + "0" * 64)
    with pytest.raises(IntegrityError, match="the archive holds image sha256:.*the manifest "
                                             "names sha256:0000"):
        load(nowhere, manifest)


def test_a_set_tagged_otherwise_than_its_manifest_is_refused_before_the_engine(tmp_path,
                                                                                nowhere):
    manifest = published(tmp_path)
    data = json.loads(manifest.read_text())
    data["image"]["repo_tags"] = ["y:2"]
    manifest.write_text(json.dumps(data))
    with pytest.raises(IntegrityError, match=r"tags the image \['x:1'\], the manifest says"):
        load(nowhere, manifest)


def test_a_set_holding_more_than_its_image_is_refused_before_the_engine(tmp_path, nowhere):
    archive, image_id = docker_save_archive()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(archive)) as source, \
            tarfile.open(fileobj=buffer, mode="w") as tar:
        for member in source:
            tar.addfile(member, source.extractfile(member))
        info = tarfile.TarInfo("payload.sh")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"id\n"))
    manifest = published(tmp_path, buffer.getvalue(), image_id)
    with pytest.raises(IntegrityError, match="member 'payload.sh' is not one docker save writes"):
        load(nowhere, manifest)


def test_a_missing_set_is_missing_input(tmp_path, nowhere):
    with pytest.raises(MissingInputError) as raised:
        load(nowhere, tmp_path / "gone.manifest.json")
    assert raised.value.exit_code == 2


def test_a_bare_tarball_without_a_checksum_is_said_unverified_then_checked(tmp_path, nowhere,
                                                                             capsys):
    archive, _ = docker_save_archive()
    bare = tmp_path / "image.tar"
    bare.write_bytes(archive[:len(archive) // 2])  # cut: only the content check can tell
    with pytest.raises(IntegrityError, match="image.tar: "):
        load(nowhere, bare)
    assert "no manifest and no .sha256 beside it" in capsys.readouterr().err


def note_of(tmp_path: Path, compression: dict | None) -> str:
    return decompression_note(open_tarball(write_set(tmp_path, b"x" * 2048,
                                                     compression=compression)))


@pytest.mark.parametrize("compression, note", [
    ({"window_log": 27, "decompression_memory": 134_000_000},
     "decompression needs 127.8 MiB of memory (zstd window 128.0 MiB)"),
    ({"window_log": 31, "decompression_memory": 2_200_000_000},
     "decompression needs 2.0 GiB of memory (zstd window 2.0 GiB)"),
    ({"decompression_memory": 1000}, "(zstd window 128.0 MiB)"),
    (None, "decompression needs at most 128.0 MiB of memory for the zstd window (not recorded"),
    ({"window_log": 30}, "at most 1.0 GiB of memory for the zstd window (not recorded"),
])
def test_the_decoder_s_memory_note(tmp_path, compression, note):
    assert note in note_of(tmp_path, compression)
