"""inspect/provenance.py: the in-toto statement a build signs, its file names, and the reading
back of a statement any signer may have written (each field of any JSON shape: None, never a
traceback)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from edgevllm import __version__
from edgevllm.common.errors import SupplyChainError
from edgevllm.inspect import provenance
from edgevllm.specs.lock import Lock, lock_hash
from support.inside_locks import lock_data, make_lock

IMAGE_ID = "sha256:" + "a" * 64


@pytest.mark.parametrize("name", [
    "X.lock.json", "X.manifest.json", "X.lock.yaml", "X.lock.yml", "X.sbom.cdx.json",
    "X.provenance.dsse.json", "X.json", "X.txt"])
def test_every_artefact_of_a_build_has_the_same_stem(tmp_path, name):
    assert provenance.stem_of(tmp_path / name) == tmp_path / "X"


def test_a_stem_keeps_its_dots_and_its_folder(tmp_path):
    assert provenance.stem_of(tmp_path / "vllm-0.33.0.lock.json") == tmp_path / "vllm-0.33.0"
    sbom, envelope = provenance.artefact_paths(tmp_path / "vllm-0.33.0")
    assert (sbom.name, envelope.name) == ("vllm-0.33.0.sbom.cdx.json",
                                          "vllm-0.33.0.provenance.dsse.json")
    assert sbom.parent == envelope.parent == tmp_path


@pytest.mark.parametrize("ref, name", [
    ("vllm:spark", "vllm_spark"),
    ("ghcr.io/me/vllm:spark", "vllm_spark"),
    ("localhost:5000/vllm@sha256:" + "b" * 64, "vllm"),
    ("../../etc/passwd", "passwd"),
    ("vllm:$(rm -rf ~)", "vllm_rm_-rf"),
    ("...", "image"),
    ("/", "image"),
])
def test_an_image_stem_is_one_safe_file_name_in_the_folder(tmp_path, ref, name):
    stem = provenance.image_stem(tmp_path, ref)
    assert stem == tmp_path / name
    assert stem.parent == tmp_path


def statement_of(lock: Lock | None, mods: list | None = None, sbom: str = "{}") -> dict:
    return provenance.statement("reg/vllm:1", IMAGE_ID, lock, mods, sbom)


def test_the_statement_names_the_image_by_its_id_and_the_builder_by_its_version():
    found = statement_of(make_lock())
    assert found["subject"] == [{"name": "reg/vllm:1", "digest": {"sha256": "a" * 64}}]
    builder = found["predicate"]["runDetails"]["builder"]
    assert builder == {"id": f"pkg:pypi/edgevllm@{__version__}",
                       "version": {"edgevllm": __version__}}
    assert provenance.subject_id(found) == IMAGE_ID


def test_the_sbom_and_the_lock_are_covered_by_their_sha256():
    lock = make_lock()
    found = statement_of(lock, sbom='{"bomFormat": "CycloneDX"}')
    assert provenance.sbom_digest(found) == hashlib.sha256(
        b'{"bomFormat": "CycloneDX"}').hexdigest()
    assert provenance.lock_digest(found) == lock_hash(lock)
    assert provenance.lock_digest(statement_of(make_lock(six="1.17.0"))) != lock_hash(lock)


def test_every_input_of_the_lock_is_a_dependency_by_digest():
    deps = {d["name"]: d for d in statement_of(make_lock())["predicate"]["buildDefinition"][
        "resolvedDependencies"]}
    data = lock_data()
    assert deps["vllm"]["digest"] == {"gitCommit": data["vllm"]["commit"],
                                      "gitTree": data["vllm"]["tree"]}
    assert deps["vllm:pick:40082"]["digest"]["sha256"] == data["vllm"]["picks"][0]["diff_sha256"]
    assert deps["cmake-dep:cutlass"] == {
        "name": "cmake-dep:cutlass", "uri": "git+https://github.com/NVIDIA/cutlass",
        "digest": {"gitCommit": data["cmake_deps"]["cutlass"]["commit"],
                   "gitTree": data["cmake_deps"]["cutlass"]["tree"]}}
    for wheel in data["closure"]["wheels"]:
        assert deps[f"wheel:{wheel['filename']}"]["digest"] == {"sha256": wheel["sha256"]}
    assert deps["base-image:runtime"]["uri"] == f"docker://{data['base_images']['runtime']['ref']}"


def test_a_supplied_cmake_folder_is_said_to_stand_in_unproven():
    data = lock_data()
    dep = data["cmake_deps"]["cutlass"]
    dep.update(commit=None, supplied=True)
    deps = {d["name"]: d for d in statement_of(Lock.model_validate(data))["predicate"][
        "buildDefinition"]["resolvedDependencies"]}
    found = deps["cmake-dep:cutlass"]
    assert found["uri"] == "supplied-folder:cutlass"
    assert found["digest"] == {"gitTree": dep["tree"]}  # no commit it could not prove
    assert found["annotations"] == {"supplied": True, "proven": False,
                                    "standsInFor": "git+https://github.com/NVIDIA/cutlass@v4.2.1"}


def test_each_mod_carries_its_outcome_from_the_image_s_record():
    mods = [{"name": "fastsafetensors", "outcome": "applied"}, "not a record", {"outcome": "x"}]
    params = statement_of(make_lock(), mods)["predicate"]["buildDefinition"][
        "externalParameters"]
    assert params["mods"] == [{"name": "fastsafetensors", "version": "1.0",
                               "outcome": "applied"}]
    assert params["target"] == "spark" and params["mode"] == "prebuilt"
    assert params["build_args"] == {"MAX_JOBS": "8"}
    unknown = statement_of(make_lock(), None)["predicate"]["buildDefinition"][
        "externalParameters"]["mods"]
    assert unknown == [{"name": "fastsafetensors", "version": "1.0", "outcome": None}]


def test_an_image_without_a_lock_has_a_statement_with_no_inputs():
    found = statement_of(None)
    definition = found["predicate"]["buildDefinition"]
    assert definition["resolvedDependencies"] == []
    assert definition["externalParameters"] == {"target": None, "mode": None,
                                                "lock_sha256": None, "mods": [],
                                                "build_args": {}}
    assert provenance.lock_digest(found) is None
    assert provenance.parse_statement(provenance.canonical(found), "e") == found


def test_canonical_bytes_do_not_depend_on_key_order():
    assert provenance.canonical({"b": 1, "a": [1, {"d": 2, "c": 3}]}) == \
        b'{"a":[1,{"c":3,"d":2}],"b":1}'


@pytest.mark.parametrize("payload, says", [
    (b"\xff\xfe not json", "not JSON"),
    (b"[1, 2]", "not an in-toto provenance statement"),
    (json.dumps({"_type": provenance.STATEMENT_TYPE}).encode(),
     "not an in-toto provenance statement"),
    (json.dumps({"_type": "https://in-toto.io/Statement/v0.1",
                 "predicateType": provenance.PREDICATE_TYPE}).encode(),
     "not an in-toto provenance statement"),
    (json.dumps({"_type": provenance.STATEMENT_TYPE,
                 "predicateType": "https://slsa.dev/provenance/v0.2"}).encode(),
     "not an in-toto provenance statement"),
])
def test_a_payload_that_is_no_provenance_statement_is_one_named_line(payload, says):
    with pytest.raises(SupplyChainError) as raised:
        provenance.parse_statement(payload, "out/x.provenance.dsse.json")
    assert str(raised.value).startswith("out/x.provenance.dsse.json: ")
    assert says in str(raised.value) and "\n" not in str(raised.value)
    assert raised.value.exit_code == 8  # verify's code: the check failed


@pytest.mark.parametrize("subject", [None, [], "sha256:x", [{}], [{"digest": None}],
                                     [{"digest": {"sha512": "x"}}], [["a"]]])
def test_a_statement_without_a_subject_digest_has_no_subject(subject):
    assert provenance.subject_id({"subject": subject}) is None


@pytest.mark.parametrize("predicate", [
    None, [], {"runDetails": None}, {"runDetails": {"byproducts": {"name": "sbom"}}},
    {"runDetails": {"byproducts": ["sbom", None, {"name": "sbom"}]}},
    {"runDetails": {"byproducts": [{"name": "sbom", "digest": {"sha256": 7}}]}},
    {"runDetails": {"byproducts": [{"name": "other", "digest": {"sha256": "ab"}}]}},
])
def test_a_statement_of_another_shape_has_no_sbom_digest(predicate):
    assert provenance.sbom_digest({"predicate": predicate}) is None


@pytest.mark.parametrize("definition", [
    None, "x", {"externalParameters": []}, {"externalParameters": {"lock_sha256": 5}},
    {"externalParameters": {"lock_sha256": ["ab"]}}])
def test_a_statement_of_another_shape_has_no_lock_digest(definition):
    assert provenance.lock_digest({"predicate": {"buildDefinition": definition}}) is None


def test_the_first_sbom_byproduct_is_the_one_read():
    found = {"predicate": {"runDetails": {"byproducts": [
        {"name": "log", "digest": {"sha256": "11"}}, {"name": "sbom", "digest": {"sha256": "22"}},
        {"name": "sbom", "digest": {"sha256": "33"}}]}}}
    assert provenance.sbom_digest(found) == "22"


def test_a_stem_is_never_taken_from_the_folder_name(tmp_path: Path):
    folder = tmp_path / "out.lock.json"
    assert provenance.stem_of(folder / "x.manifest.json") == folder / "x"
