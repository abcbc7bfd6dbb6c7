"""inspect/cosignlayout.py on real layout folders (its end to end with skopeo, cosign and a
registry: tests/test_image_ocilayout_cosign.py): which entry is the image, what a damaged
``index.json`` says (one line naming the file, exit 10, nothing written), what signing writes and
what signing again removes (only blobs no entry names any more)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgevllm.common.errors import IntegrityError
from edgevllm.inspect import cosign, cosignlayout, dsse
from support.ocilayouts import make_layout, put_blob

DEST = "127.0.0.1:5000/bundled"
SBOM = {"bomFormat": "CycloneDX", "specVersion": "1.5", "version": 1, "components": []}


@pytest.fixture(scope="module")
def key(tmp_path_factory):
    private, _ = dsse.generate_key(tmp_path_factory.mktemp("key") / "k.pem")
    return dsse.load_private_key(private)


def index_of(layout: Path) -> dict:
    return json.loads((layout / "index.json").read_text())


def blobs(layout: Path) -> set[str]:
    return {f"blobs/sha256/{p.name}" for p in (layout / "blobs/sha256").iterdir()}


def test_signing_alone_writes_one_sig_entry_and_its_three_blobs(tmp_path, key):
    layout = tmp_path / "image"
    digest = make_layout(layout, b"signed only")
    before = blobs(layout)
    written = cosignlayout.add_signatures(layout, DEST, key, {})
    assert written[-1] == "index.json" and len(written) == 4  # payload, config, manifest
    assert set(written[:-1]) == blobs(layout) - before
    names = [m["annotations"][cosignlayout.REF_NAME] for m in index_of(layout)["manifests"]]
    assert names == ["v1", cosign.tag_for(digest, "sig")]
    assert cosignlayout.signature_blobs(layout) == set(written[:-1])


def test_the_signature_names_the_image_s_digest_and_the_destination(tmp_path, key):
    layout = tmp_path / "image"
    digest = make_layout(layout, b"what is signed")
    cosignlayout.add_signatures(layout, DEST, key, {cosign.CYCLONEDX: SBOM})
    entries = {m["annotations"][cosignlayout.REF_NAME]: m for m in index_of(layout)["manifests"]}
    sig = json.loads((layout / "blobs/sha256" / entries[cosign.tag_for(digest, "sig")][
        "digest"].split(":")[1]).read_bytes())
    payload = json.loads((layout / "blobs/sha256" / sig["layers"][0]["digest"].split(":")[1])
                         .read_bytes())
    assert payload["critical"]["image"]["docker-manifest-digest"] == digest
    assert payload["critical"]["identity"]["docker-reference"] == DEST


def test_the_image_keeps_its_digest_and_its_entry_through_every_signing(tmp_path, key):
    layout = tmp_path / "image"
    digest = make_layout(layout, b"unchanged")
    entry = index_of(layout)["manifests"][0]
    for _ in range(3):
        cosignlayout.add_signatures(layout, DEST, key, {cosign.CYCLONEDX: SBOM})
        assert cosignlayout.image_digest(layout) == digest
        assert index_of(layout)["manifests"][0] == entry
    assert len(index_of(layout)["manifests"]) == 3


def test_signing_again_keeps_blobs_the_image_shares_with_nothing_lost(tmp_path, key):
    layout = tmp_path / "image"
    make_layout(layout, b"again")
    image_blobs = blobs(layout)
    cosignlayout.add_signatures(layout, DEST, key, {cosign.CYCLONEDX: SBOM})
    second = cosignlayout.add_signatures(layout, DEST, key, {})  # the attestation dropped
    assert blobs(layout) == image_blobs | set(second[:-1])
    assert len(index_of(layout)["manifests"]) == 2


def test_an_index_holding_an_index_names_the_index_as_the_image(tmp_path):
    layout = tmp_path / "image"
    make_layout(layout, b"multi")
    index = index_of(layout)
    child = put_blob(layout, json.dumps({"schemaVersion": 2, "manifests": index[
        "manifests"]}).encode())
    index["manifests"] = [{"mediaType": "application/vnd.oci.image.index.v1+json",
                           "digest": child, "size": 10}]
    (layout / "index.json").write_text(json.dumps(index))
    assert cosignlayout.image_digest(layout) == child


def test_the_same_image_under_two_tags_is_one_image(tmp_path):
    layout = tmp_path / "image"
    digest = make_layout(layout, b"two tags")
    index = index_of(layout)
    index["manifests"].append({**index["manifests"][0], "annotations": {
        cosignlayout.REF_NAME: "latest"}})
    (layout / "index.json").write_text(json.dumps(index))
    assert cosignlayout.image_digest(layout) == digest


@pytest.mark.parametrize("text, says", [
    (b"{", "index.json"),
    (b"[]", "not an OCI image index"),
    (b'{"manifests": {}}', "not an OCI image index"),
    (b'{"manifests": []}', "0 images; a bundle's layout holds exactly one"),
    (b'{"manifests": ["x", 1]}', "0 images"),
    (b'{"manifests": [{"digest": "md5:abc"}]}', "the image has no sha256 digest"),
    (b'{"manifests": [{"mediaType": "x"}]}', "the image has no sha256 digest"),
    (b'{"manifests": [{"digest": "sha256:../../../etc/passwd"}]}', "no sha256 digest"),
    (b"\xff\xfe", "index.json"),
])
def test_a_damaged_index_is_one_line_and_nothing_is_written(tmp_path, key, text, says):
    layout = tmp_path / "image"
    make_layout(layout, b"damaged")
    (layout / "index.json").write_bytes(text)
    before = blobs(layout)
    with pytest.raises(IntegrityError) as raised:
        cosignlayout.add_signatures(layout, DEST, key, {})
    assert says in str(raised.value) and "\n" not in str(raised.value)
    assert raised.value.exit_code == 10
    assert blobs(layout) == before and (layout / "index.json").read_bytes() == text


@pytest.mark.parametrize("damage", ["gone", "a folder"])
def test_an_index_that_is_not_there_or_no_file_is_one_line(tmp_path, key, damage):
    """It was a FileNotFoundError (or IsADirectoryError) traceback."""
    layout = tmp_path / "image"
    make_layout(layout, b"no index")
    (layout / "index.json").unlink()
    if damage == "a folder":
        (layout / "index.json").mkdir()
    with pytest.raises(IntegrityError, match=r"index\.json: cannot read the layout's index"):
        cosignlayout.add_signatures(layout, DEST, key, {})


def test_an_index_too_large_to_be_one_is_refused_unread(tmp_path):
    layout = tmp_path / "image"
    make_layout(layout, b"big")
    (layout / "index.json").write_bytes(b" " * (cosignlayout.INDEX_LIMIT + 1))
    with pytest.raises(IntegrityError, match="over the 8 MiB"):
        cosignlayout.image_digest(layout)


def test_signature_blobs_skip_entries_whose_manifest_is_gone_or_no_json(tmp_path, key):
    layout = tmp_path / "image"
    make_layout(layout, b"partial")
    written = cosignlayout.add_signatures(layout, DEST, key, {cosign.CYCLONEDX: SBOM})
    entries = [m for m in index_of(layout)["manifests"] if m["annotations"][
        cosignlayout.REF_NAME] != "v1"]
    (layout / "blobs/sha256" / entries[1]["digest"].split(":")[1]).write_bytes(b"not json")
    kept = cosignlayout.signature_blobs(layout)
    sig_manifest = f"blobs/sha256/{entries[0]['digest'].split(':')[1]}"
    assert sig_manifest in kept and kept < set(written)


def test_signature_blobs_never_name_a_path_outside_the_blobs(tmp_path):
    layout = tmp_path / "image"
    make_layout(layout, b"hostile")
    hostile = put_blob(layout, json.dumps({"config": {"digest": "sha256:../../../index"},
                                           "layers": [{"digest": "../x"}, "y", {}]}).encode())
    names = cosignlayout.signature_blobs(layout, [{"digest": hostile}])
    assert names == {f"blobs/sha256/{hostile.split(':')[1]}"}
