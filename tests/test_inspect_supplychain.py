"""Signing and the supply-chain check without an engine: an ImageView made by hand stands in
for what the engine (or a published set) reports; the files are the real ones, written and
checked by the real code. Each tamper fails with a line naming the file that was changed."""

from __future__ import annotations

import base64
import json

import pytest

from edgevllm.common.errors import SupplyChainError
from edgevllm.inspect import dsse, provenance
from edgevllm.inspect.supplychain import check, raise_first, sign, write_sbom
from support.inside_locks import make_lock
from support.inside_view import IMAGE_ID
from support.inside_view import make_view as view


@pytest.fixture
def signed(tmp_path):
    private, public = dsse.generate_key(tmp_path / "key.pem")
    stem = tmp_path / "img"
    write_sbom(view(), stem)
    envelope = sign(view(), stem, private)
    return stem, envelope, public


def test_statement_names_image_inputs_mods_and_sbom(signed):
    stem, envelope, public = signed
    payload = dsse.verify(dsse.read_envelope(envelope), dsse.load_public_key(public), "e")
    found = provenance.parse_statement(payload, "e")
    assert provenance.subject_id(found) == IMAGE_ID
    definition = found["predicate"]["buildDefinition"]
    assert definition["externalParameters"]["mods"] == [
        {"name": "fastsafetensors", "version": "1.0", "outcome": "applied"}]
    names = {d["name"] for d in definition["resolvedDependencies"]}
    assert {"vllm", "vllm:pick:40082", "cmake-dep:cutlass", "base-image:runtime",
            "base-image:bytecode", "wheel:six-1.16.0-py3-none-any.whl"} <= names
    bases = {d["name"]: d for d in definition["resolvedDependencies"]
             if d["name"].startswith("base-image:")}
    assert "digest" in bases["base-image:runtime"]
    assert "digest" not in bases["base-image:bytecode"]  # local only: its ref, no digest
    assert envelope.name == "img.provenance.dsse.json"


def test_everything_agrees(signed):
    stem, _, public = signed
    assert check(view(), stem, public) == []


def test_tampered_statement_fails_naming_the_envelope(signed):
    stem, envelope_path, public = signed
    envelope = json.loads(envelope_path.read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["subject"][0]["digest"]["sha256"] = "0" * 64
    envelope["payload"] = base64.b64encode(provenance.canonical(statement)).decode()
    envelope_path.write_text(json.dumps(envelope))
    with pytest.raises(SupplyChainError, match=r"img\.provenance\.dsse\.json: no valid signature"):
        check(view(), stem, public)


def test_tampered_sbom_wheel_hash_fails_naming_the_sbom(signed):
    stem, _, public = signed
    sbom_path, _ = provenance.artefact_paths(stem)
    doc = json.loads(sbom_path.read_text())
    six = next(c for c in doc["components"] if c["name"] == "six")
    six["hashes"][0]["content"] = "e" * 64
    sbom_path.write_text(json.dumps(doc))
    problems = check(view(), stem, public)
    assert problems[0] == (f"{sbom_path}: SBOM: not the one the statement was signed with "
                           "(its sha256 differs)")
    assert any("wheel six 1.16.0: sha256 eeeeeeeeeeee…" in p for p in problems)
    with pytest.raises(SupplyChainError) as raised:
        raise_first(problems)
    assert "\n" not in str(raised.value) and "(and 1 more above)" in str(raised.value)


def test_another_image_and_another_lock_fail(signed):
    stem, envelope, public = signed
    problems = check(view(image_id="sha256:" + "0" * 64), stem, public)
    assert problems[0].startswith(f"{envelope}: statement: signed for image {IMAGE_ID}")
    problems = check(view(lock=make_lock(six="1.17.0")), stem, public)
    assert any("statement: lock sha256" in p for p in problems)


def test_signing_needs_the_images_sbom(tmp_path):
    private, _ = dsse.generate_key(tmp_path / "key.pem")
    with pytest.raises(SupplyChainError, match="no SBOM to sign; run inv sbom first"):
        sign(view(), tmp_path / "img", private)
    write_sbom(view(image_id="sha256:" + "0" * 64), tmp_path / "img")
    with pytest.raises(SupplyChainError, match="the SBOM describes image"):
        sign(view(), tmp_path / "img", private)


def test_stems():
    from pathlib import Path

    assert provenance.stem_of(Path("o/x.lock.json")) == Path("o/x")
    assert provenance.stem_of(Path("o/x.manifest.json")) == Path("o/x")
    assert provenance.image_stem(Path("o"), "ghcr.io/me/vllm:spark-1") == Path("o/vllm_spark-1")


@pytest.mark.parametrize("data, said", [
    (b"\xff\xfe{}", "not UTF-8 text (byte 0)"),
    (b'{"bomFormat": "CycloneDX", "x": "caf\xe9"}', "not UTF-8 text"),
    (b" " * ((16 << 20) + 1), "more than such a file may hold"),
])
def test_an_sbom_that_is_no_utf8_text_is_one_line_checking_or_signing(signed, data, said):
    """It was a UnicodeDecodeError traceback out of inv verify --supply-chain and inv sign."""
    stem, _, public = signed
    sbom_path, _ = provenance.artefact_paths(stem)
    sbom_path.write_bytes(data)
    for run in (lambda: check(view(), stem, public),
                lambda: sign(view(), stem, stem.with_name("key.pem"))):
        with pytest.raises(SupplyChainError) as raised:
            run()
        assert str(raised.value).startswith(f"{sbom_path}: ") and said in str(raised.value)
        assert raised.value.exit_code == 8 and "\n" not in str(raised.value)


def test_an_sbom_path_that_is_a_folder_is_a_missing_sbom(signed):
    stem, _, public = signed
    sbom_path, _ = provenance.artefact_paths(stem)
    sbom_path.unlink()
    sbom_path.mkdir()
    assert check(view(), stem, public)[-1] == f"{sbom_path}: the SBOM is missing"
