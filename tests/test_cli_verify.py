"""``inv verify --supply-chain``: the check of ``inv verify-supply-chain`` reached through
``inv verify``, run in-process through the CLI's own entry. The hand-made ImageView of the inspect
tests stands in for what the engine (online, ``--image``) or a published set (offline,
``--tarball``) reports; the SBOM, key and signed statement are real files written by the real
code, so a pass, a tamper and the exit codes are the real ones."""

from __future__ import annotations

import json

import pytest

from edgevllm.inspect import dsse, provenance, supplychain
from support.inprocess import run_cli
from support.inside_view import IMAGE_ID, make_view


@pytest.fixture
def signed(tmp_path, monkeypatch):
    """A signed image's files under ``tmp_path`` (stem ``img``), its public key, and the engine
    and published-set readers replaced by the stand-in view; ``seen`` records which was asked."""
    private, public = dsse.generate_key(tmp_path / "key.pem")
    stem = tmp_path / "img"
    supplychain.write_sbom(make_view(), stem)
    supplychain.sign(make_view(), stem, private)
    seen: list[tuple[str, str]] = []
    def of_image(engine, ref):
        seen.append(("image", ref))
        return make_view()

    def of_tarball(path):
        seen.append(("tarball", str(path)))
        return make_view()

    monkeypatch.setattr(supplychain, "view_of_image", of_image)
    monkeypatch.setattr(supplychain, "view_of_tarball", of_tarball)
    return stem, public, seen


def test_online_on_an_image_passes(signed, capsys, monkeypatch):
    stem, public, seen = signed
    code, err = run_cli(capsys, monkeypatch, "verify", "--supply-chain", "--image", "img:1",
                    "--out", str(stem.parent), "--name", "img", "--key", str(public))
    assert code == 0, err
    assert f"OK: {IMAGE_ID}: signature, statement, SBOM (1 distributions, 0 Debian " \
        "packages)" in err
    assert seen == [("image", "img:1")]


def test_offline_on_a_published_set_reads_the_files_beside_its_manifest(signed, capsys,
                                                                        monkeypatch):
    stem, public, seen = signed
    manifest = stem.parent / "img.manifest.json"
    code, err = run_cli(capsys, monkeypatch, "verify", "--supply-chain", "--tarball", str(manifest),
                    "--key", str(public))
    assert code == 0, err
    assert seen == [("tarball", str(manifest))]


def test_a_tampered_sbom_fails_as_verify_supply_chain_does(signed, capsys, monkeypatch):
    stem, public, _ = signed
    sbom_path, _ = provenance.artefact_paths(stem)
    doc = json.loads(sbom_path.read_text())
    next(c for c in doc["components"] if c["name"] == "six")["hashes"][0]["content"] = "e" * 64
    sbom_path.write_text(json.dumps(doc))
    where = ["--image", "img:1", "--out", str(stem.parent), "--name", "img", "--key", str(public)]
    flag = run_cli(capsys, monkeypatch, "verify", "--supply-chain", *where)
    task = run_cli(capsys, monkeypatch, "verify-supply-chain", *where)
    assert flag[0] == task[0] == 8
    last = [err.strip().splitlines()[-1] for _, err in (flag, task)]
    assert last[0] == last[1]
    assert last[0].startswith(f"error: {sbom_path}: SBOM: not the one the statement was signed")


def test_another_key_fails(signed, capsys, monkeypatch, tmp_path):
    stem, _, _ = signed
    _, other = dsse.generate_key(tmp_path / "other.pem")
    code, err = run_cli(capsys, monkeypatch, "verify", "--supply-chain", "--image", "img:1",
                    "--out", str(stem.parent), "--name", "img", "--key", str(other))
    assert code == 8
    assert "img.provenance.dsse.json: no valid signature" in err.strip().splitlines()[-1]


def test_with_a_target_both_checks_run(signed, capsys, monkeypatch, tmp_path):
    """``--supply-chain --target``: the supply-chain check, then the arch gate on the same image
    (here on an engine nobody answers: the gate's own exit 3, after the check's OK)."""
    stem, public, seen = signed
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'nobody-listens.sock'}")
    code, err = run_cli(capsys, monkeypatch, "verify", "--supply-chain", "--target", "spark",
                    "--image", "img:1", "--out", str(stem.parent), "--name", "img",
                    "--key", str(public))
    assert f"OK: {IMAGE_ID}: signature, statement, SBOM" in err
    assert code == 3 and "cannot reach the Docker daemon" in err.strip().splitlines()[-1], err
    assert seen == [("image", "img:1")]
