"""End to end, real engine: inv diff of two real images that differ in one wheel (six 1.16.0 vs
1.17.0 from PyPI, installed with pip) and one mod names exactly those, without docker save; the
SBOM, the signed statement and inv verify-supply-chain on a local image (online) and on a
published set (offline), and every tamper failing with one line naming what was changed."""

from __future__ import annotations

import base64
import json

import pytest

from edgevllm.inspect.diff import compare
from edgevllm.inspect.facts import read_facts
from support.inside_images import scratch_variant, variant_image
from support.platforms import native_arch
from support.publish_images import NoSaveEngine


@pytest.fixture(scope="module")
def variants(engine, python_image_native):
    return (variant_image(engine, python_image_native, "1.16.0", "1.0"),
            variant_image(engine, python_image_native, "1.17.0", "1.1"))


def test_diff_names_exactly_the_wheel_and_the_mod(variants, cli):
    old, new = variants
    code, out, err = cli("diff", old, new, "--json", "--installed")
    assert code == 0, err
    result = json.loads(out)
    assert set(result["sections"]) == {"wheels", "mods", "installed"}
    assert list(result["sections"]["wheels"]["changed"]) == ["six"]
    wheel = result["sections"]["wheels"]["changed"]["six"]
    assert (wheel["old"]["version"], wheel["new"]["version"]) == ("1.16.0", "1.17.0")
    assert wheel["old"]["sha256"] != wheel["new"]["sha256"]
    assert list(result["sections"]["mods"]["changed"]) == ["fastsafetensors"]
    assert list(result["sections"]["installed"]["changed"]) == ["six"]
    layers = result["layers"]
    # the base is shared; the COPY of the wheel and the pip install differ
    assert layers["shared"]["count"] == 1 and len(layers["added"]) == len(layers["removed"]) == 2
    assert all(size > 0 for size in layers["added"].values())
    code, out, err = cli("diff", old, new)
    assert code == 0, err
    assert "- changed `six`: 1.16.0" in out and "- changed `fastsafetensors`" in out


def test_diff_never_runs_docker_save(variants):
    engine = NoSaveEngine()
    old, new = (read_facts(ref, engine) for ref in variants)
    assert set(compare(old, new)["sections"]) == {"wheels", "mods"}


def test_online_sbom_sign_verify_and_tampers(variants, cli, tmp_path):
    image = variants[0]
    key, pub = tmp_path / "key.pem", tmp_path / "key.pem.pub"
    assert cli("keygen", "--out", str(key))[0] == 0
    where = ["--image", image, "--out", str(tmp_path), "--name", "img"]
    code, out, err = cli("sbom", *where)
    assert code == 0, err
    sbom_path = tmp_path / "img.sbom.cdx.json"
    doc = json.loads(sbom_path.read_text())
    names = {(c["name"], c.get("version")) for c in doc["components"] if c["group"] == "python"}
    assert ("six", "1.16.0") in names and ("pip", "23.0.1") in names  # venv and Debian's
    debs = {c["name"]: c for c in doc["components"] if c["group"] == "deb"}
    assert len(debs) > 50 and debs["libc6"]["purl"].startswith("pkg:deb/debian/libc6@")
    assert f"arch={native_arch()}" in debs["libc6"]["purl"]   # the base is this host's platform
    assert "python3" in debs  # the base's own python
    assert cli("sign", *where, "--key", str(key))[0] == 0
    code, _, err = cli("verify-supply-chain", *where, "--key", str(pub))
    assert code == 0, err

    # A distribution the SBOM leaves out fails, even when the signer signed that SBOM.
    original = sbom_path.read_text()
    doc["components"] = [c for c in doc["components"] if c["name"] != "six"]
    sbom_path.write_text(json.dumps(doc))
    assert cli("sign", *where, "--key", str(key))[0] == 0
    code, _, err = cli("verify-supply-chain", *where, "--key", str(pub))
    assert code == 8 and "six 1.16.0 is installed at /opt/venv/" in err
    assert "missing from the SBOM" in err and "Traceback" not in err

    # A Debian package the SBOM leaves out fails the same way.
    doc = json.loads(original)
    doc["components"] = [c for c in doc["components"] if c["name"] != "libc6"]
    sbom_path.write_text(json.dumps(doc))
    assert cli("sign", *where, "--key", str(key))[0] == 0
    code, _, err = cli("verify-supply-chain", *where, "--key", str(pub))
    assert code == 8 and "Debian package libc6" in err and "missing from the SBOM" in err

    # A tampered wheel hash in the signed SBOM: the SBOM no longer matches the statement.
    sbom_path.write_text(original)
    assert cli("sign", *where, "--key", str(key))[0] == 0
    sbom_path.write_text(original.replace(_wheel_sha(original), "0" * 64))
    code, _, err = cli("verify-supply-chain", *where, "--key", str(pub))
    error_lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 8 and len(error_lines) == 1
    assert "img.sbom.cdx.json: SBOM: not the one the statement was signed with" in error_lines[0]


def _wheel_sha(sbom_text: str) -> str:
    doc = json.loads(sbom_text)
    return next(c["hashes"][0]["content"] for c in doc["components"] if c["name"] == "six")


def test_offline_on_a_published_set_and_tampers(variants, engine, cli, tmp_path):
    image = scratch_variant(engine, variants[1])
    key, pub = tmp_path / "key.pem", tmp_path / "key.pem.pub"
    assert cli("keygen", "--out", str(key))[0] == 0
    code, _, err = cli("publish", "--image", image, "--out", str(tmp_path), "--name", "set",
                       "--part-size", "1M")
    assert code == 0, err
    manifest = tmp_path / "set.manifest.json"
    where = ["--tarball", str(manifest)]
    for task in (["sbom"], ["sign", "--key", str(key)], ["verify-supply-chain", "--key",
                                                            str(pub)]):
        code, out, err = cli(*task, *where)
        assert code == 0, f"{task}: {err}"
    doc = json.loads((tmp_path / "set.sbom.cdx.json").read_text())
    assert {(c["name"], c["version"]) for c in doc["components"] if c["group"] == "python"} \
        == {("six", "1.17.0"), ("pip", "23.0.1"), ("setuptools", "66.1.1")}  # the venv's

    # The manifest's labels edited: named, exit 8.
    original = manifest.read_text()
    edited = json.loads(original)
    edited["labels"]["org.opencontainers.image.title"] = "something else"
    manifest.write_text(json.dumps(edited))
    code, _, err = cli("verify-supply-chain", *where, "--key", str(pub))
    assert code == 8 and "set.manifest.json: manifest: field 'labels' differs" in err
    manifest.write_text(original)

    # The statement edited after signing: named, exit 8.
    envelope_path = tmp_path / "set.provenance.dsse.json"
    envelope = json.loads(envelope_path.read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["buildDefinition"]["externalParameters"]["mods"] = []
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    envelope_path.write_text(json.dumps(envelope))
    code, _, err = cli("verify-supply-chain", *where, "--key", str(pub))
    assert code == 8 and "set.provenance.dsse.json: no valid signature" in err

    # A part changed on disk: the set's own checksum fails first (publish's exit code, 10).
    part = sorted(tmp_path.glob("set.tar.zst*"))[0]
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF
    part.write_bytes(bytes(data))
    code, _, err = cli("verify-supply-chain", *where, "--key", str(pub))
    assert code == 10 and part.name in err and "Traceback" not in err


def test_publish_carries_the_sbom_and_statement_made_online(variants, cli, tmp_path):
    """The SBOM made in a container of the image (online) holds against the same image read
    from its published set (offline): both ways find the same distributions and Debian
    packages (the offline ones from the layers' dpkg status)."""
    key, pub = tmp_path / "key.pem", tmp_path / "key.pem.pub"
    assert cli("keygen", "--out", str(key))[0] == 0
    code, out, err = cli("publish", "--image", variants[0], "--out", str(tmp_path), "--name",
                         "pub", "--sign-key", str(key))
    assert code == 0, err
    assert str(tmp_path / "pub.sbom.cdx.json") in out
    assert str(tmp_path / "pub.provenance.dsse.json") in out
    code, _, err = cli("verify-supply-chain", "--tarball", str(tmp_path / "pub.manifest.json"),
                       "--key", str(pub))
    assert code == 0, err


def test_push_attaches_what_the_real_cosign_verifies(variants, engine, cli, tmp_path):
    """inv push --attach --key: the pushed image's signature and its SBOM and SLSA provenance
    attestations, in cosign's layout in a real local registry, pass the real cosign verify and
    verify-attestation and inv verify --supply-chain --attached; a second image pushed without
    them fails both until inv sign --attach signs it where it is; an SBOM of another image is
    refused before anything is attached."""
    from support.cosign import cosign_verify
    from support.registry import local_registry

    image, other = variants
    key, pub = tmp_path / "key.pem", tmp_path / "key.pem.pub"
    assert cli("keygen", "--out", str(key))[0] == 0
    where = ["--image", image, "--out", str(tmp_path), "--name", "img"]
    assert cli("sbom", *where)[0] == 0
    sbom_file = str(tmp_path / "img.sbom.cdx.json")
    pushed = []
    with local_registry() as host:
        code, out, err = cli("push", "--image", image, "--registry", host, "--attach", sbom_file,
                             "--key", str(key))
        assert code == 0, err
        pushed_ref, digest, _ = out.splitlines()[0].split()
        pushed.append(pushed_ref)
        repo = f"{host}/edgevllm-test-inside-variant"
        assert [line.split()[0] for line in out.splitlines() if line.endswith(" attached")] == [
            f"{repo}:{digest.replace(':', '-')}.{suffix}" for suffix in ("sig", "att")]
        ref = f"{repo}@{digest}"
        result = cosign_verify(None, pub, ref)
        assert result.returncode == 0, result.stderr
        for kind in ("slsaprovenance1", "cyclonedx"):
            result = cosign_verify(kind, pub, ref)
            assert result.returncode == 0, result.stderr
            statement = json.loads(base64.b64decode(json.loads(result.stdout)["payload"]))
            predicate = statement["predicate"]
            if kind == "cyclonedx":
                assert predicate == json.loads((tmp_path / "img.sbom.cdx.json").read_text())
            else:
                definition = predicate["buildDefinition"]
                assert any(d["name"].startswith("wheel:six-1.16.0")
                           for d in definition["resolvedDependencies"])
                assert definition["externalParameters"]["lock_sha256"]
        code, _, err = cli("verify", "--supply-chain", "--attached", "--image", ref, "--key",
                           str(pub))
        assert code == 0, err

        code, out, err = cli("push", "--image", other, "--registry", host)
        assert code == 0, err
        second_ref, second, _ = out.splitlines()[0].split()
        pushed.append(second_ref)
        assert cosign_verify(None, pub, f"{repo}@{second}").returncode != 0
        code, _, err = cli("verify", "--supply-chain", "--attached", "--image",
                           f"{repo}@{second}", "--key", str(pub))
        assert code == 8 and "nothing there (no cosign signature)" in err
        code, _, err = cli("push", "--image", other, "--registry", host, "--attach", sbom_file,
                           "--key", str(key))
        assert code == 8 and "the SBOM describes image" in err
        # inv sign --attach: the image pushed before, signed and attested where it is.
        code, _, err = cli("sign", *where, "--key", str(key), "--attach", f"{repo}@{second}")
        assert code == 10 and f"the registry's image ({second}) is not {image}" in err
        other_where = ["--image", other, "--out", str(tmp_path), "--name", "other"]
        assert cli("sbom", *other_where)[0] == 0
        code, out, err = cli("sign", *other_where, "--key", str(key), "--attach",
                             f"{repo}@{second}")
        assert code == 0 and out.count(" attached") == 2, err
        assert cosign_verify(None, pub, f"{repo}@{second}").returncode == 0
        assert cosign_verify("cyclonedx", pub, f"{repo}@{second}").returncode == 0
    for ref in pushed:
        engine.remove_image(ref)
    code, _, err = cli("push", "--image", image, "--registry", "127.0.0.1:1", "--attach",
                       str(tmp_path / "missing.sbom.cdx.json"), "--key", str(key))
    assert code == 2 and "missing.sbom.cdx.json not found; run inv sbom" in err
    code, _, err = cli("push", "--image", image, "--registry", "127.0.0.1:1", "--attach",
                       sbom_file)
    assert code == 2 and "--attach needs --key" in err
