"""The SBOM: installed distributions found the same way in a folder (the in-image script) and in a
docker-save archive (offline), a CycloneDX 1.6 document that validates, and the check that holds
an SBOM to an image."""

from __future__ import annotations

import io
import json

import pytest

from edgevllm.common.errors import SupplyChainError
from edgevllm.inspect import inimage_dists, sbom
from edgevllm.inspect.offline import read_archive
from support.fake_rootfs import (
    INSTALLED,
    LAYER1,
    OS_RELEASE,
    SITE,
    docker_save_archive,
    dpkg_status,
    final_files,
    tar_of,
    write_tree,
)
from support.inside_locks import BYTECODE_TWIN, make_lock, sha

IMAGE_ID = "sha256:" + "ab" * 32


def by_name(dists):
    return {(d["name"], d["version"]): d for d in dists}


def test_in_image_script_finds_dist_info_and_egg_info_only_at_the_packages_level(tmp_path):
    write_tree(tmp_path, LAYER1)
    found = by_name(inimage_dists.distributions(str(tmp_path)))
    assert set(found) == {("six", "1.16.0"), ("old-pkg", "0.1"), ("flat", "2.0"),
                          ("idna", "3.10")}
    six = found[("six", "1.16.0")]
    assert six["record_sha256"] == sha_bytes(LAYER1[
        "usr/lib/python3/dist-packages/six-1.16.0.dist-info/RECORD"])
    assert found[("flat", "2.0")]["record_sha256"] is None


def sha_bytes(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def test_offline_archive_reading_stacks_layers_like_the_filesystem(tmp_path):
    archive, image_id = docker_save_archive()
    read = read_archive(io.BytesIO(archive), "set")
    assert read.problems == [] and read.config_sha256 == image_id
    on_disk = inimage_dists.distributions(str(write_tree(tmp_path, final_files())))
    strip = len(str(tmp_path))
    on_disk = [{**d, "path": d["path"][strip:]} for d in on_disk]
    assert sorted(read.dists, key=lambda d: d["path"]) == sorted(on_disk, key=lambda d: d["path"])
    assert ("six", "1.17.0") in by_name(read.dists) and ("idna", "3.10") not in by_name(read.dists)


def test_offline_archive_with_a_changed_layer_names_it():
    archive, _ = docker_save_archive(corrupt_layer=True)
    problems = read_archive(io.BytesIO(archive), "set").problems
    assert len(problems) == 1 and problems[0].startswith("set: layer 1 hashes to")


def dists():
    return [inimage_dists.entry("/site/six-1.16.0.dist-info", b"Name: six\nVersion: 1.16.0\n",
                                b"six.py,,\n"),
            inimage_dists.entry("/site/idna-3.10.dist-info", b"Name: idna\nVersion: 3.10\n",
                                b"idna,,\n"),
            inimage_dists.entry("/site/extra-1.0.dist-info", b"Name: extra\nVersion: 1.0\n",
                                None)]


def debs():
    return inimage_dists.deb_packages(dpkg_status(
        ("libc6", "2.41-12", "arm64", INSTALLED), ("libc6", "2.41-12", "amd64", INSTALLED),
        ("zlib1g", "1:1.3.dfsg+really1.3.1-1", "arm64", INSTALLED)), OS_RELEASE)


def document(lock=None, mods=None) -> dict:
    text = sbom.build_sbom(sbom.Subject("img:1", IMAGE_ID, []), lock or make_lock(), dists(),
                           mods, debs())
    return json.loads(text)


def test_debian_packages_are_found_the_same_in_a_folder_and_in_the_archive(tmp_path):
    """Only ``installed`` entries count (curl's config files outlive it); the later layer's
    dpkg status wins; os-release names the distribution."""
    in_folder = inimage_dists.debs(str(write_tree(tmp_path, final_files())))
    archive, _ = docker_save_archive()
    assert read_archive(io.BytesIO(archive), "set").debs == in_folder
    assert [(d["name"], d["version"], d["arch"], d["distro"], d["codename"]) for d in in_folder] \
        == [("libc6", "2.41-12", "amd64", "debian", "trixie"),
            ("zlib1g", "1:1.3.dfsg+really1.3.1-1", "amd64", "debian", "trixie")]


def test_an_image_without_dpkg_has_no_debian_packages(tmp_path):
    assert inimage_dists.debs(str(tmp_path)) == []
    assert inimage_dists.deb_packages(b"Package: x\nVersion: 1\n", None) == []  # no Status


def test_debian_packages_are_purls_in_the_document():
    from packageurl import PackageURL

    found = {(c["name"], c["bom-ref"]): c for c in document()["components"]
             if c.get("group") == "deb"}
    assert set(found) == {("libc6", "deb:libc6:amd64"), ("libc6", "deb:libc6:arm64"),
                          ("zlib1g", "deb:zlib1g:arm64")}
    purl = PackageURL.from_string(found[("zlib1g", "deb:zlib1g:arm64")]["purl"])
    assert (purl.type, purl.namespace, purl.name, purl.version, purl.qualifiers) == (
        "deb", "debian", "zlib1g", "1:1.3.dfsg+really1.3.1-1",
        {"arch": "arm64", "distro": "trixie"})


def test_check_names_a_debian_package_missing_changed_or_extra():
    assert sbom.check_sbom(document(), "s", IMAGE_ID, dists(), make_lock(), debs()) == []
    image = debs()
    image[0]["version"] = "2.41-13"  # libc6 amd64 upgraded
    image.append({**image[2], "name": "curl", "version": "8.14.1-2"})
    del image[2]  # zlib1g removed
    problems = sbom.check_sbom(document(), "s", IMAGE_ID, dists(), make_lock(), image)
    assert problems == [
        "s: Debian package libc6 (amd64): version 2.41-12 in the SBOM, 2.41-13 in the image",
        "s: Debian package curl 8.14.1-2 (arm64) is installed but missing from the SBOM",
        "s: the SBOM lists Debian package zlib1g 1:1.3.dfsg+really1.3.1-1 (arm64), which the "
        "image does not have"]


def test_document_is_valid_cyclonedx_1_6_with_every_input():
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    text = sbom.build_sbom(sbom.Subject("img:1", IMAGE_ID, ["reg/img@sha256:" + "c" * 64]),
                           make_lock(), dists(),
                           [{"name": "fastsafetensors", "version": "1.0", "outcome": "applied"}],
                           debs())
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    doc = json.loads(text)
    groups = {(c.get("group"), c["name"]): c for c in doc["components"]}
    assert groups[("python", "six")]["hashes"] == [{"alg": "SHA-256",
                                                    "content": sha("six-1.16.0", 64)}]
    assert "hashes" not in groups[("python", "extra")]  # not in the lock: no wheel hash
    assert groups[("source", "vllm")]["version"] == sha("commit")
    assert groups[("cmake-dep", "cutlass")]["version"] == sha("cutlass")
    assert groups[("base-image", "nvcr.io/nvidia/cuda:13.0.0-runtime-ubuntu24.04")]
    twin = groups[("base-image", BYTECODE_TWIN)]  # the byte-code's base, local only: no digest
    assert twin["bom-ref"] == "base:bytecode" and twin["version"] == ""
    assert not any(p["name"] == "edgevllm:digest" for p in twin["properties"])
    mod = groups[("edgevllm-mod", "fastsafetensors")]
    assert {"name": "edgevllm:outcome", "value": "applied"} in mod["properties"]
    assert sbom.sbom_image_id(doc) == IMAGE_ID


def test_check_passes_on_the_image_it_was_made_from():
    assert sbom.check_sbom(document(), "s", IMAGE_ID, dists(), make_lock()) == []


def test_check_names_a_distribution_missing_from_the_sbom():
    doc = document()
    doc["components"] = [c for c in doc["components"] if c["name"] != "extra"]
    problems = sbom.check_sbom(doc, "s", IMAGE_ID, dists(), make_lock())
    assert problems == ["s: extra 1.0 is installed at /site/extra-1.0.dist-info but missing "
                        "from the SBOM"]


def test_check_names_a_changed_record_hash_and_an_extra_entry():
    changed = dists()
    changed[1]["record_sha256"] = "0" * 64
    problems = sbom.check_sbom(document(), "s", IMAGE_ID, changed[:2], make_lock())
    assert any("idna at /site/idna-3.10.dist-info: record_sha256" in p for p in problems)
    assert any("lists extra 1.0" in p and "does not have" in p for p in problems)


def test_check_names_a_tampered_wheel_hash():
    doc = document()
    six = next(c for c in doc["components"] if c["name"] == "six")
    six["hashes"][0]["content"] = "f" * 64
    problems = sbom.check_sbom(doc, "s", IMAGE_ID, dists(), make_lock())
    assert problems == [f"s: wheel six 1.16.0: sha256 ffffffffffff… in the SBOM, "
                        f"{sha('six-1.16.0', 64)[:12]}… in the image's lock"]


def test_check_names_another_image():
    problems = sbom.check_sbom(document(), "s", "sha256:" + "0" * 64, dists(), make_lock())
    assert problems == [f"s: the SBOM describes image {IMAGE_ID}, not sha256:{'0' * 64}"]


def test_not_an_sbom():
    with pytest.raises(SupplyChainError, match="not a CycloneDX SBOM"):
        sbom.parse_sbom("{}", "s")
    with pytest.raises(SupplyChainError, match="not JSON"):
        sbom.parse_sbom("{", "s")


def test_lock_names_match_distributions_by_their_canonical_name():
    lock = make_lock()
    assert lock.closure is not None
    lock.closure.wheels[0].name = "Six"  # as a resolver may write it
    doc = document(lock)
    six = next(c for c in doc["components"] if c["name"] == "six")
    assert six["hashes"][0]["content"] == sha("six-1.16.0", 64)
    assert sbom.check_sbom(doc, "s", IMAGE_ID, dists(), lock) == []


def test_a_small_set_of_metadata_files_stops_at_the_metadata_budget():
    """25 METADATA files of 12 MiB of zeros in one layer, a zstd stream of a few hundred KB
    (the issue's 48 KB set held 1.6 GB before): each is under the per-file limit, and the
    reader stops once all of them pass ALL_KEPT_LIMIT, holding no more than that."""
    import tarfile
    import tracemalloc

    import zstandard

    from edgevllm.common.errors import ResourceLimitError
    from edgevllm.inspect.offline import ALL_KEPT_LIMIT

    compressor = zstandard.ZstdCompressor(level=1).compressobj()
    out, zeros = [], bytes(12 << 20)
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w|") as tar:
        for index in range(25):
            info = tarfile.TarInfo(f"{SITE}/pkg{index}-1.0.dist-info/METADATA")
            info.size = len(zeros)
            tar.addfile(info, io.BytesIO(zeros))
            out.append(compressor.compress(layer.getvalue()))
            layer.seek(0)
            layer.truncate()
    blob = b"".join(out) + compressor.compress(layer.getvalue()) + compressor.flush()
    archive = tar_of({"blobs/sha256/" + "a" * 64: blob, "manifest.json": json.dumps(
        [{"Config": "blobs/sha256/" + "b" * 64, "Layers": ["blobs/sha256/" + "a" * 64]}]).encode()})
    assert len(archive) < 2 << 20
    del out, zeros
    tracemalloc.start()
    try:
        with pytest.raises(ResourceLimitError, match="package metadata declares over 128 MiB"):
            read_archive(io.BytesIO(archive), "set")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < ALL_KEPT_LIMIT + (32 << 20), peak >> 20


@pytest.mark.parametrize("metadata, location, name", [
    (b"Version: 1.0\n\nNo name here", "/usr/lib/python3/dist-packages/foo_bar-1.0.dist-info",
     "foo-bar"),
    (b"Name:   \nVersion: 2\n", "/site-packages/-2.dist-info", "unnamed"),
    (b"", "/site-packages/x.egg-info", "x"),
])
def test_a_distribution_without_a_name_gets_its_folders_in_the_sbom(metadata, location, name):
    dist = inimage_dists.entry(location, metadata, None)
    assert dist["name"] == name
    doc = json.loads(sbom.build_sbom(sbom.Subject("img:1", IMAGE_ID, []), None, [dist]))
    assert sbom.sbom_dists(doc)[location]["name"] == name
