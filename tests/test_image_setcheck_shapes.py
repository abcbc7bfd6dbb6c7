"""image/setcheck.py, each of docker save's documents in each shape it may take: what Docker 25+
writes (OCI blobs, index.json, a v1 layer record nothing lists), what older engines wrote
(``<id>/layer.tar``, ``<hex>.json``, ``repositories``), and each way a document can disagree with
``manifest.json`` or be damaged: one IntegrityError line (exit 10) naming what is wrong."""

from __future__ import annotations

import io
import json
import tarfile

import pytest

from edgevllm.common.errors import IntegrityError
from edgevllm.image import setcheck
from edgevllm.image.setcheck import check_archive
from support.fake_rootfs import sha, tar_of

LAYER = tar_of({"etc/hello": b"hello\n"})
CONFIG = json.dumps({"config": {}, "rootfs": {"type": "layers",
                                              "diff_ids": ["sha256:" + sha(LAYER)]}}).encode()
IMAGE_ID = "sha256:" + sha(CONFIG)
L_BLOB, C_BLOB = f"blobs/sha256/{sha(LAYER)}", f"blobs/sha256/{sha(CONFIG)}"
OCI_MANIFEST = json.dumps({"schemaVersion": 2, "config": {"digest": IMAGE_ID},
                           "layers": [{"digest": "sha256:" + sha(LAYER)}]}).encode()
M_BLOB = f"blobs/sha256/{sha(OCI_MANIFEST)}"


def index(*names: str | None, digest: str = "sha256:" + sha(OCI_MANIFEST)) -> bytes:
    entries = [{"digest": digest, **({"annotations": {"io.containerd.image.name": n}}
                                     if n else {})} for n in names or (None,)]
    return json.dumps({"schemaVersion": 2, "manifests": entries}).encode()


def docker25(tags: list[str] | None = None, changes: dict[str, bytes | None] | None = None,
             **files: bytes | None) -> bytes:
    """What Docker 25+ saves of the image tagged ``tags`` (x:1), members ``changes`` (by name)
    and ``files`` (``index_dot_json``: index.json) changed (None: removed); manifest.json
    last."""
    tags = ["x:1"] if tags is None else tags
    members: dict[str, bytes | None] = {
        "oci-layout": b'{"imageLayoutVersion":"1.0.0"}', L_BLOB: LAYER, C_BLOB: CONFIG,
        M_BLOB: OCI_MANIFEST,
        "index.json": index(*[t if "/" in t else f"docker.io/library/{t}" for t in tags]),
        "manifest.json": json.dumps([{"Config": C_BLOB, "RepoTags": tags,
                                      "Layers": [L_BLOB]}]).encode()}
    members.update({k.replace("_dot_", "."): v for k, v in files.items()})
    members.update(changes or {})
    kept = {k: v for k, v in members.items() if v is not None and k != "manifest.json"}
    last = members.get("manifest.json")
    return tar_of({**kept, **({"manifest.json": last} if last is not None else {})})


def check(archive: bytes, image_id: str | None = IMAGE_ID, tags: list[str] | None = None):
    return check_archive(io.BytesIO(archive), "s.tar", image_id, tags)


def refused(archive: bytes, needle: str, **kwargs) -> str:
    with pytest.raises(IntegrityError) as raised:
        check(archive, **kwargs)
    message = str(raised.value)
    assert message.startswith("s.tar: ") and needle in message, message
    assert raised.value.exit_code == 10 and "\n" not in message
    return message


def test_a_docker_25_archive_passes_and_says_what_it_holds():
    shape = check(docker25(), tags=["x:1"])
    assert shape.image_id == IMAGE_ID and shape.tags == ["x:1"]
    assert shape.layers == [L_BLOB] and shape.diff_ids == ["sha256:" + sha(LAYER)]
    assert shape.unpacked == sum(shape.sizes.values()) and shape.sizes[L_BLOB] == len(LAYER)


def test_tags_with_and_without_docker_io_library_are_one_tag():
    check(docker25(["docker.io/library/x:1"]), tags=["x:1"])
    check(docker25(["x:1"]), tags=["docker.io/library/x:1"])


def test_an_untagged_image_passes_with_no_tags():
    shape = check(docker25([]), tags=[])
    assert shape.tags == []


def test_a_legacy_archive_of_an_older_engine_passes():
    v1 = "a" * 64
    archive = tar_of({f"{v1}/layer.tar": LAYER, f"{v1}/json": b'{"id": "x"}',
                      f"{v1}/VERSION": b"1.0", f"{sha(CONFIG)}.json": CONFIG,
                      "repositories": json.dumps({"x": {"1": v1}}).encode(),
                      "manifest.json": json.dumps([{"Config": f"{sha(CONFIG)}.json",
                                                    "RepoTags": ["x:1"],
                                                    "Layers": [f"{v1}/layer.tar"]}]).encode()})
    assert check(archive, tags=["x:1"]).image_id == IMAGE_ID


def test_docker_s_unlisted_v1_layer_record_is_inert_and_passes():
    record = json.dumps({"id": "b" * 64, "created": "1970-01-01T00:00:00Z"}).encode()
    check(docker25(changes={f"blobs/sha256/{sha(record)}": record}))


@pytest.mark.parametrize("extra", [
    json.dumps({"id": "b" * 64, "rootfs": {}}).encode(),  # a config in disguise
    json.dumps({"id": "b" * 64, "layers": []}).encode(),  # a manifest in disguise
    json.dumps({"id": "not hex"}).encode(),
    b"plain bytes",
])
def test_any_other_unlisted_blob_is_a_second_image_or_a_payload(extra):
    refused(docker25(changes={f"blobs/sha256/{sha(extra)}": extra}),
            "1 member(s) that the image does not list")


def test_an_index_naming_two_image_manifests_is_refused():
    two = json.loads(index(None))
    two["manifests"].append({"digest": "sha256:" + "c" * 64})
    refused(docker25(index_dot_json=json.dumps(two).encode()), "index.json names 2 image")


def test_an_index_whose_manifest_is_another_image_s_is_refused():
    other = json.dumps({"config": {"digest": "sha256:" + "d" * 64}}).encode()
    archive = docker25(changes={M_BLOB: None, f"blobs/sha256/{sha(other)}": other},
                       index_dot_json=index(None, digest="sha256:" + sha(other)))
    refused(archive, "index.json's image manifest is not the image of manifest.json")


def test_an_index_naming_a_manifest_not_in_the_archive_is_refused():
    refused(docker25(index_dot_json=index(None, digest="sha256:" + "e" * 64)),
            "index.json's image manifest is not the image")


def test_an_index_tagging_the_image_otherwise_is_refused():
    refused(docker25(index_dot_json=index("docker.io/library/x:1", "evil:latest")),
            "index.json tags evil:latest, which manifest.json does not give the image")


@pytest.mark.parametrize("repositories, needle", [
    ({"x": {"1": "id"}, "evil": {"2": "id"}}, "repositories tags evil:2"),
    (["x"], "repositories is not docker save's mapping"),
    ({"x": "1"}, "repositories is not docker save's mapping"),
])
def test_repositories_giving_other_tags_or_no_mapping_are_refused(repositories, needle):
    refused(docker25(repositories=json.dumps(repositories).encode()), needle)


def test_a_config_or_layer_named_but_absent_is_incomplete():
    refused(docker25(changes={L_BLOB: None}), "is not in the archive; it is incomplete")


def test_layers_that_are_not_the_config_s_diff_ids_are_refused():
    other = tar_of({"etc/other": b"x"})
    manifest = json.dumps([{"Config": C_BLOB, "RepoTags": ["x:1"],
                            "Layers": [f"blobs/sha256/{sha(other)}"]}]).encode()
    archive = docker25(changes={L_BLOB: None, f"blobs/sha256/{sha(other)}": other},
                       index_dot_json=None, manifest_dot_json=manifest)
    refused(archive, "the layers are not the ones the image config names")


@pytest.mark.parametrize("manifest, needle", [
    (b"{not json", "manifest.json is not JSON"),
    (b"{}", "manifest.json names no list of images"),
    (b"[]", "manifest.json names 0 images"),
    (b'["x"]', "manifest.json names 1 images"),
    (json.dumps([{"Config": C_BLOB, "Layers": L_BLOB}]).encode(), "does not name a config"),
    (json.dumps([{"Config": C_BLOB, "Layers": [L_BLOB], "RepoTags": [1]}]).encode(),
     "does not name a config"),
])
def test_a_manifest_json_of_another_shape_is_refused(manifest, needle):
    refused(docker25(manifest_dot_json=manifest, index_dot_json=None), needle)


def test_an_archive_without_a_manifest_json_is_no_docker_save():
    refused(docker25(manifest_dot_json=None), "the archive has no manifest.json")


def test_the_set_s_manifest_naming_another_image_or_tags_is_refused():
    refused(docker25(), "the manifest names sha256:" + "f" * 64,
            image_id="sha256:" + "f" * 64)
    refused(docker25(), "the archive tags the image ['x:1'], the manifest says ['y:1']",
            tags=["y:1"])


@pytest.mark.parametrize("name", ["notes.txt", "blobs/sha512/" + "a" * 128, "a" * 64 + "/other",
                                  "blobs/sha256/" + "A" * 64])
def test_a_member_docker_save_never_writes_is_refused(name):
    refused(tar_of({name: b"x", "manifest.json": b"[]"}), "is not one docker save writes")


def test_a_folder_docker_save_never_writes_is_refused():
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("etc")
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    refused(buffer.getvalue(), "folder 'etc' is not one docker save writes")


def test_an_archive_cut_inside_a_blob_is_damaged_or_truncated():
    archive = docker25()
    at = archive.index(LAYER[:64])
    with pytest.raises(IntegrityError, match="s.tar: .*(truncated|damaged)"):
        check(archive[:at + 100])


def test_json_documents_beyond_what_one_image_holds_are_refused(monkeypatch):
    monkeypatch.setattr(setcheck, "HELD_LIMIT", 100)
    refused(docker25(), "MiB of JSON documents; the archive is not one docker save wrote")
