"""The one layer reader: an image's layers from a docker-save archive, in the manifest's order
(legacy and OCI layouts), whiteouts and opaque folders applied, each layer's diff id when asked,
and what ``keep`` returns held for the files that are left."""

from __future__ import annotations

import gzip
import hashlib
import io
import json

import pytest

from edgevllm.common.errors import NotATarballError
from edgevllm.verify.archive import config_name, entry_kind, layer_order, read_image, stack
from support.checks import present
from support.fake_rootfs import tar_of


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


BOTTOM = tar_of({"etc/a": b"a1", "etc/keep": b"k", "opt/x/1": b"1", "opt/y": b"y"})
TOP = tar_of({"etc/a": b"a2", "etc/.wh.keep": b"", "opt/x/.wh..wh..opq": b"", "opt/x/2": b"2"})
CONFIG = json.dumps({"rootfs": {"diff_ids": [f"sha256:{_sha(BOTTOM)}",
                                             f"sha256:{_sha(TOP)}"]}}).encode()


def _docker_save() -> bytes:
    """Docker 25's layout: every blob under blobs/sha256, a gzip layer among them."""
    top = gzip.compress(TOP)
    names = [f"blobs/sha256/{_sha(b)}" for b in (CONFIG, BOTTOM, top)]
    manifest = [{"Config": names[0], "Layers": names[1:]}]
    return tar_of({names[0]: CONFIG, names[1]: BOTTOM, names[2]: top,
                 "manifest.json": json.dumps(manifest).encode()})


def _oci_only() -> bytes:
    """An OCI layout with no docker manifest.json (buildx --output type=oci)."""
    blobs = {f"blobs/sha256/{_sha(b)}": b for b in (CONFIG, BOTTOM, TOP)}
    manifest = json.dumps({"config": {"digest": f"sha256:{_sha(CONFIG)}"}, "layers": [
        {"digest": f"sha256:{_sha(b)}"} for b in (BOTTOM, TOP)]}).encode()
    blobs[f"blobs/sha256/{_sha(manifest)}"] = manifest
    index = {"manifests": [{"digest": f"sha256:{_sha(manifest)}"}]}
    return tar_of({**blobs, "index.json": json.dumps(index).encode()})


def _content(tar, member, path):
    return tar.extractfile(member).read()


@pytest.mark.parametrize("archive", [_docker_save(), _oci_only()], ids=["docker", "oci"])
def test_layers_stack_with_whiteouts_and_opaque_folders(archive):
    found = read_image(io.BytesIO(archive), "img", _content, hashed=True)
    assert stack(found, "img") == {"etc/a": b"a2", "opt/x/2": b"2", "opt/y": b"y"}
    assert found.json_blobs[present(config_name(found))] == CONFIG
    diff_ids = [found.layers[name].sha256 for name in present(layer_order(found, "img"))]
    assert diff_ids == json.loads(CONFIG)["rootfs"]["diff_ids"]  # the gzip layer's too


def test_a_root_filesystem_tarball_is_its_own_single_layer():
    found = read_image(io.BytesIO(BOTTOM), "rootfs", _content)
    assert layer_order(found, "rootfs") is None and stack(found, "rootfs")["etc/a"] == b"a1"


def test_a_layer_the_manifest_names_but_the_archive_lacks():
    bottom = "blobs/sha256/" + _sha(BOTTOM)
    files = {bottom: BOTTOM, "manifest.json": json.dumps(
        [{"Config": "c", "Layers": [bottom, "blobs/sha256/gone"]}]).encode()}
    found = read_image(io.BytesIO(tar_of(files)), "img", _content)
    with pytest.raises(NotATarballError, match="layer blobs/sha256/gone named in the image "
                                               "manifest is missing"):
        stack(found, "img")


def test_member_names_read_one_way():
    assert entry_kind("./usr/lib/.wh..wh..opq") == ("opaque", "usr/lib")
    assert entry_kind("usr/.wh.lib") == ("whiteout", "usr/lib")
    assert entry_kind("/.wh.opt") == ("whiteout", "opt")
    assert entry_kind("./etc/hosts") == ("path", "etc/hosts")
