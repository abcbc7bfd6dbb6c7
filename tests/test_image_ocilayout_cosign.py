"""The offline bundle's OCI layout carries the image's cosign signature and attestations
(inspect/cosignlayout.py), proven with the real ``skopeo`` (the layout is readable,
``oci:DIR:<ref>``) and the real ``cosign`` against a real registry (Debian's docker-registry on
127.0.0.1), without the Docker engine: after ``skopeo copy --preserve-digests`` of the image and
its two tags out of the layout, ``cosign verify`` / ``verify-attestation`` and ``inv verify
--supply-chain --attached`` pass; the image's digest in the layout is the registry's."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from edgevllm.common.errors import IntegrityError
from edgevllm.inspect import cosign, cosignlayout, dsse
from support.cosign import cosign_verify as verify
from support.ocilayouts import make_layout
from support.registry import local_registry
from support.skopeo import run_skopeo, skopeo_copy

SBOM = {"bomFormat": "CycloneDX", "specVersion": "1.5", "version": 1, "components": []}
SLSA = {"buildDefinition": {"buildType": "https://edgevllm.invalid/build/v1",
                            "externalParameters": {}, "resolvedDependencies": []},
        "runDetails": {"builder": {"id": "pkg:pypi/edgevllm"}}}


def test_a_layouts_signatures_verify_with_cosign_after_skopeo_copies_it(tmp_path, cli):
    layout = tmp_path / "image"
    digest = make_layout(layout, b"an image for a site without network")
    private, public = dsse.generate_key(tmp_path / "k.pem")
    with local_registry() as host:
        dest = f"{host}/bundled"
        written = cosignlayout.add_signatures(
            layout, dest, dsse.load_private_key(private),
            {cosign.SLSA_PROVENANCE_1: SLSA, cosign.CYCLONEDX: SBOM})
        assert written[-1] == "index.json" and len(written) == 8  # 3 layers, 2 configs, 2 manifests
        assert cosignlayout.image_digest(layout) == digest
        tags = ["v1", cosign.tag_for(digest, "sig"), cosign.tag_for(digest, "att")]
        for tag in tags:
            found = run_skopeo("inspect", "--raw", f"oci:{layout}:{tag}")
            assert found.returncode == 0, found.stderr
            copied = skopeo_copy(f"oci:{layout}:{tag}", f"docker://{dest}:{tag}")
            assert copied.returncode == 0, copied.stderr
        ref = f"{dest}@{digest}"  # the layout's digest is the registry's
        result = verify(None, public, ref)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)[0]["critical"]["image"]["docker-manifest-digest"] \
            == digest
        for kind in ("slsaprovenance1", "cyclonedx"):
            result = verify(kind, public, ref)
            assert result.returncode == 0, result.stderr
        code, _, err = cli("verify", "--supply-chain", "--attached", "--image", f"{dest}:v1",
                           "--key", str(public))
        assert code == 0, err
        _, other = dsse.generate_key(tmp_path / "other.pem")
        assert verify("cyclonedx", other, ref).returncode != 0


def test_signing_the_layout_again_replaces_its_two_entries(tmp_path):
    """A bundle written again: two cosign entries still, and no blob left that none names."""
    layout = tmp_path / "image"
    digest = make_layout(layout, b"written twice")
    private, _ = dsse.generate_key(tmp_path / "k.pem")
    key = dsse.load_private_key(private)
    first = cosignlayout.add_signatures(layout, "127.0.0.1:5000/x", key, {cosign.CYCLONEDX: SBOM})
    second = cosignlayout.add_signatures(layout, "127.0.0.1:5000/x", key, {cosign.CYCLONEDX: SBOM})
    index = json.loads((layout / "index.json").read_text())
    names = [m["annotations"][cosignlayout.REF_NAME] for m in index["manifests"]]
    assert names == ["v1", cosign.tag_for(digest, "sig"), cosign.tag_for(digest, "att")]
    blobs = {f"blobs/sha256/{p.name}" for p in (layout / "blobs/sha256").iterdir()}
    assert set(second) - {"index.json"} <= blobs
    assert not (set(first) - set(second)) & blobs  # the first signing's blobs are gone
    assert len(blobs) == 3 + len(second) - 1  # the image's 3, and the second signing's


def test_a_layout_of_two_images_is_refused(tmp_path):
    layout = tmp_path / "image"
    make_layout(layout, b"one")
    index = json.loads((layout / "index.json").read_text())
    index["manifests"].append({**index["manifests"][0], "digest": "sha256:" + "1" * 64})
    (layout / "index.json").write_text(json.dumps(index))
    with pytest.raises(IntegrityError, match="2 images"):
        cosignlayout.image_digest(layout)


def test_bundle_attach_without_an_sbom_is_one_line_before_any_work(tmp_path, cli):
    private, _ = dsse.generate_key(tmp_path / "k.pem")
    code, _, err = cli("bundle", "--image", "x:1", "--recipe", "any", "--out",
                       str(tmp_path / "out"), "--key", str(private), "--attach",
                       str(tmp_path / "x.lock.json"))
    assert code == 2 and "run inv sbom first" in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()
