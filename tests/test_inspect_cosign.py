"""cosign's registry layout, proven with the real ``cosign`` (Debian's package, 2.5) against a
real registry (Debian's docker-registry on 127.0.0.1), both ways, without the Docker engine: a
small image is written through the registry API, edgevllm signs and attests it and ``cosign
verify`` / ``cosign verify-attestation`` pass; a tampered SBOM, a changed signature payload and
the signature of another image fail cosign and edgevllm alike; what ``cosign sign`` / ``cosign
attest`` write passes ``inv verify --supply-chain --attached``. The end-to-end run through ``inv
push --attach`` of an engine's image is tests/e2e/test_cosign_e2e.py."""

from __future__ import annotations

import base64
import json

import pytest

from edgevllm.common.errors import ConfigError
from edgevllm.image.registry import get_manifest, put_blob, put_manifest
from edgevllm.inspect import cosign, dsse
from support.cosign import cosign_verify as verify
from support.cosign import run_cosign
from support.registry import local_registry
from support.skopeo import skopeo_copy

SBOM = {"bomFormat": "CycloneDX", "specVersion": "1.5", "version": 1,
        "components": [{"type": "library", "name": "six", "version": "1.16.0"}]}
SLSA = {"buildDefinition": {"buildType": "https://edgevllm.invalid/build/v1",
                            "externalParameters": {"target": "spark"},
                            "resolvedDependencies": []},
        "runDetails": {"builder": {"id": "pkg:pypi/edgevllm"}}}


def _sha(raw: bytes) -> str:
    import hashlib

    return "sha256:" + hashlib.sha256(raw).hexdigest()


def push_image(host: str, name: str, tag: str, content: bytes) -> str:
    """A one-layer OCI image written through the registry API; its manifest digest."""
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                         "rootfs": {"type": "layers", "diff_ids": [_sha(content)]}}).encode()
    put_blob(host, name, _sha(content), content, len(content))
    put_blob(host, name, _sha(config), config, len(config))
    raw = json.dumps({"schemaVersion": 2, "mediaType": cosign.OCI_MANIFEST,
                      "config": {"mediaType": cosign.OCI_CONFIG, "size": len(config),
                                 "digest": _sha(config)},
                      "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                                  "size": len(content), "digest": _sha(content)}]}).encode()
    return put_manifest(host, name, tag, raw, cosign.OCI_MANIFEST)


@pytest.fixture(scope="module")
def registry():
    with local_registry() as host:
        yield host


@pytest.fixture
def signed(registry, tmp_path):
    """An image edgevllm signed and attested (SLSA provenance, CycloneDX SBOM) with a new
    P-256 key: (ref by digest, digest, public key path)."""
    private, public = dsse.generate_key(tmp_path / "k.pem")
    name = f"demo-{tmp_path.name.lower().replace('_', '-')[-20:].strip('-')}"
    digest = push_image(registry, name, "v1", tmp_path.name.encode())
    cosign.attach(f"{registry}/{name}:v1", digest, dsse.load_private_key(private),
                  {cosign.SLSA_PROVENANCE_1: SLSA, cosign.CYCLONEDX: SBOM})
    return f"{registry}/{name}@{digest}", digest, public


def test_cosign_verifies_what_edgevllm_attached(signed):
    ref, digest, public = signed
    result = verify(None, public, ref)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)[0]["critical"]["image"]["docker-manifest-digest"] == digest
    for kind, predicate in (("slsaprovenance1", SLSA), ("cyclonedx", SBOM)):
        result = verify(kind, public, ref)
        assert result.returncode == 0, result.stderr
        statement = json.loads(base64.b64decode(json.loads(result.stdout)["payload"]))
        assert statement["predicate"] == predicate
        assert statement["subject"][0]["digest"]["sha256"] == digest.split(":")[1]
    found = cosign.check(ref, dsse.load_public_key(public))
    assert found.problems == [] and found.signatures == 1
    assert found.predicates == {cosign.SLSA_PROVENANCE_1: SLSA, cosign.CYCLONEDX: SBOM}


def test_a_tampered_sbom_fails_cosign_and_edgevllm(signed, cli):
    """The SBOM's statement with one component changed, its signature kept."""
    ref, digest, public = signed
    host, name = ref.split("/")[0], ref.split("/")[1].split("@")[0]
    tag = cosign.tag_for(digest, "att")
    manifest = json.loads(_raw(host, name, tag))
    layer = next(d for d in manifest["layers"]
                 if d["annotations"]["predicateType"] == cosign.CYCLONEDX)
    envelope = json.loads(_blob(host, name, layer["digest"]))
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["components"][0]["version"] = "1.17.0"
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    blob = json.dumps(envelope).encode()
    put_blob(host, name, _sha(blob), blob, len(blob))
    layer |= {"digest": _sha(blob), "size": len(blob)}
    put_manifest(host, name, tag, json.dumps(manifest).encode(), cosign.OCI_MANIFEST)
    assert verify("cyclonedx", public, ref).returncode != 0
    assert verify("slsaprovenance1", public, ref).returncode == 0  # the other still holds
    code, _, err = cli("verify", "--supply-chain", "--attached", "--image", ref, "--key",
                       str(public))
    assert code == 8 and "Traceback" not in err
    assert f"{tag} layer 1: no valid signature" in err


def _raw(host: str, name: str, tag: str) -> bytes:
    raw = get_manifest(host, name, tag, cosign.OCI_MANIFEST)
    assert raw is not None, f"{name}:{tag} is not in the registry"
    return raw


def _blob(host: str, name: str, digest: str) -> bytes:
    from edgevllm.image.registry import get_blob

    response = get_blob(host, name, digest)
    assert response is not None
    return response.content


def test_another_images_signature_fails_cosign_and_edgevllm(signed, registry, cli):
    """The first image's .sig and .att copied onto a second image's tags."""
    ref, digest, public = signed
    name = ref.split("/")[1].split("@")[0]
    other = push_image(registry, name, "v2", b"another image")
    for suffix in ("sig", "att"):
        raw = _raw(registry, name, cosign.tag_for(digest, suffix))
        put_manifest(registry, name, cosign.tag_for(other, suffix), raw, cosign.OCI_MANIFEST)
    second = f"{registry}/{name}@{other}"
    assert verify(None, public, second).returncode != 0
    transplanted = verify("cyclonedx", public, second)
    assert transplanted.returncode != 0
    assert "no matching subject digest" in transplanted.stderr  # cosign checks the subject too
    code, _, err = cli("verify", "--supply-chain", "--attached", "--image", second, "--key",
                       str(public))
    assert code == 8 and f"signed for image {digest}, not {other}" in err
    found = cosign.check(second, dsse.load_public_key(public))
    assert sum("attests another image" in p for p in found.problems) == 2


def test_skopeo_copy_to_another_registry_keeps_them_verifiable(signed, cli):
    """The image and its two cosign tags copied to a second registry with ``skopeo copy --all
    --preserve-digests``: cosign and edgevllm verify them there (the signature's
    docker-reference still names registry A: cosign checks the digest, not the name)."""
    ref, digest, public = signed
    host, name = ref.split("/")[0], ref.split("/")[1].split("@")[0]
    with local_registry() as other:
        for tag in ("v1", cosign.tag_for(digest, "sig"), cosign.tag_for(digest, "att")):
            copied = skopeo_copy(f"docker://{host}/{name}:{tag}", f"docker://{other}/{name}:{tag}")
            assert copied.returncode == 0, copied.stderr
        there = f"{other}/{name}@{digest}"
        assert verify(None, public, there).returncode == 0
        for kind in ("slsaprovenance1", "cyclonedx"):
            result = verify(kind, public, there)
            assert result.returncode == 0, result.stderr
        code, _, err = cli("verify", "--supply-chain", "--attached", "--image",
                           f"{other}/{name}:v1", "--key", str(public))
        assert code == 0, err
        assert "1 signature(s)" in err
        # Without the tags the image alone is not verifiable there: the copy is what carries them.
        assert skopeo_copy(f"docker://{host}/{name}:v1",
                           f"docker://{other}/bare:v1").returncode == 0
        assert verify(None, public, f"{other}/bare@{digest}").returncode != 0


def test_another_key_fails_both(signed, tmp_path):
    ref, _, _ = signed
    _, other = dsse.generate_key(tmp_path / "other.pem")
    assert verify(None, other, ref).returncode != 0
    assert verify("cyclonedx", other, ref).returncode != 0
    found = cosign.check(ref, dsse.load_public_key(other))
    assert len(found.problems) == 3 and found.signatures == 0 and not found.predicates


def test_edgevllm_verifies_what_cosign_signed_and_attested(registry, tmp_path, cli):
    """cosign generate-key-pair, cosign sign --key, cosign attest --key --type cyclonedx:
    inv verify --supply-chain --attached --key cosign.pub passes, and names the predicate."""
    assert run_cosign("generate-key-pair", cwd=tmp_path).returncode == 0
    digest = push_image(registry, "from-cosign", "v1", b"signed by cosign")
    ref = f"{registry}/from-cosign@{digest}"
    offline = ["--key", "cosign.key", "--tlog-upload=false", "--allow-http-registry", "--yes"]
    result = run_cosign("sign", *offline, ref, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (tmp_path / "sbom.json").write_text(json.dumps(SBOM))
    result = run_cosign("attest", *offline, "--type", "cyclonedx", "--predicate", "sbom.json",
                        ref, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    code, _, err = cli("verify", "--supply-chain", "--attached", "--image", ref, "--key",
                       str(tmp_path / "cosign.pub"))
    assert code == 0, err
    assert "1 signature(s) and attestations https://cyclonedx.org/bom check" in err
    found = cosign.check(ref, dsse.load_public_key(tmp_path / "cosign.pub"))
    assert found.predicates == {cosign.CYCLONEDX: SBOM}
    # edgevllm's attestation beside cosign's: cosign's signature layer is kept.
    private, _ = dsse.generate_key(tmp_path / "k.pem")
    cosign.attach(ref, digest, dsse.load_private_key(private), {cosign.SLSA_PROVENANCE_1: SLSA})
    raw = _raw(registry, "from-cosign", cosign.tag_for(digest, "sig"))
    assert len(json.loads(raw)["layers"]) == 2
    assert verify(None, tmp_path / "cosign.pub", ref).returncode == 0


def test_an_ed25519_key_still_checks_here_and_says_cosign_will_not(registry, tmp_path, cli):
    private, public = dsse.generate_key(tmp_path / "ed.pem", "ed25519")
    digest = push_image(registry, "ed", "v1", b"ed25519")
    ref = f"{registry}/ed@{digest}"
    cosign.attach(ref, digest, dsse.load_private_key(private), {cosign.CYCLONEDX: SBOM})
    code, _, err = cli("verify-supply-chain", "--attached", "--image", ref, "--key", str(public))
    assert code == 0, err
    warnings = [line for line in err.splitlines() if "cosign" in line and "do not" in line]
    assert len(warnings) == 1 and "sigstore/cosign#5074" in warnings[0]


def test_keygen_makes_a_p256_key(tmp_path, cli):
    """What cosign verify --key reads (the tests above verify with such keys). Debian's cosign
    2.5.0 import-key-pair refuses every P-256 PEM, openssl's too ('unsupported public key
    type'), so edgevllm's private key is not turned into cosign's here."""
    code, out, err = cli("keygen", "--out", str(tmp_path / "k.pem"))
    assert code == 0, err
    public = (tmp_path / "k.pem.pub").read_text()
    assert public.startswith("-----BEGIN PUBLIC KEY-----")
    assert (tmp_path / "k.pem").read_text().startswith("-----BEGIN PRIVATE KEY-----")
    from edgevllm.common.keys import p256

    assert p256(dsse.load_private_key(tmp_path / "k.pem"))
    code, _, err = cli("keygen", "--out", str(tmp_path / "x.pem"), "--kind", "rsa")
    assert code == 2 and "--kind 'rsa': one of p256, ed25519" in err


def test_a_cosign_private_key_is_named_as_such(tmp_path):
    assert run_cosign("generate-key-pair", cwd=tmp_path).returncode == 0
    with pytest.raises(ConfigError, match="a cosign private key"):
        dsse.load_private_key(tmp_path / "cosign.key")


@pytest.mark.parametrize("ref", ["demo:v1", "127.0.0.1:5000", "127.0.0.1:5000/Demo:v1",
                                 "127.0.0.1:5000/demo@sha256:abc"])
def test_a_ref_that_names_no_pushed_image_is_one_line(ref):
    with pytest.raises(ConfigError):
        cosign.split_ref(ref)
