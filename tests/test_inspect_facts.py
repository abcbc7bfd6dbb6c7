"""What ``inv diff`` reads from one side's labels: the records (mods, verify, probe) through
common.labels.label_record, a label that is not JSON left out with a warning naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgevllm.common import labels
from edgevllm.common.errors import ConfigError, MissingInputError
from edgevllm.inspect.facts import (
    Layer,
    _records_from_labels,
    lock_from_label,
    read_facts,
    source_kind,
)
from support.inside_locks import lock_data
from support.tars import tar_bytes
from support.tarsets import write_set


def test_records_are_read_from_their_labels_and_bad_json_is_named(capsys):
    found = {labels.MODS: json.dumps([{"name": "m", "outcome": "applied"}]),
             labels.VERIFY: "{not json", labels.TARGET: "spark",
             labels.LOCK: json.dumps({"target": "spark"})}
    records = _records_from_labels(found, "img:1")
    assert records == {"mods": [{"name": "m", "outcome": "applied"}]}
    err = capsys.readouterr().err
    assert f"label {labels.VERIFY} of img:1 is not JSON; left out" in err
    assert labels.PROBE not in err and labels.LOCK not in err


# --- which kind of side, and a published set's or a lock's facts (no engine) --------------------
def lock_file(tmp_path: Path) -> Path:
    path = tmp_path / "x.lock.json"
    path.write_text(json.dumps(lock_data()))
    return path


@pytest.mark.parametrize("name", ["gone.lock.json", "gone.manifest.json", "gone.tar.zst",
                                  "gone.tar", "gone.tar.gz", "gone.lock.yaml"])
def test_a_missing_file_is_one_line_naming_it_not_an_image_ref(tmp_path, name):
    with pytest.raises(MissingInputError) as raised:
        source_kind(str(tmp_path / name))
    assert str(raised.value).startswith(f"{tmp_path / name}: no such file;")
    assert raised.value.exit_code == 2


def test_each_kind_of_side_is_told_by_what_is_there(tmp_path):
    (tmp_path / "set.tar.zst").write_bytes(b"x")
    (tmp_path / "set.tar.zst.part000").write_bytes(b"x")
    assert source_kind(str(lock_file(tmp_path))) == "lock"
    assert source_kind(str(tmp_path / "set.tar.zst")) == "tarball"
    assert source_kind(str(tmp_path / "set.tar.zst.part000")) == "tarball"
    assert source_kind(str(write_set(tmp_path, b"payload"))) == "tarball"
    assert source_kind("vllm:spark") == "image"
    assert source_kind("ghcr.io/me/vllm@sha256:" + "a" * 64) == "image"


def test_a_lock_side_has_its_lock_and_nothing_recorded_of_an_image(tmp_path):
    facts = read_facts(str(lock_file(tmp_path)))
    assert facts.kind == "lock" and facts.lock is not None
    assert facts.lock.target == "spark"
    assert facts.image_id is None and facts.layers is None and facts.records == {}


def test_a_published_set_says_what_its_manifest_recorded(tmp_path):
    records: dict[str, object] = {"mods": [{"name": "m", "outcome": "applied"}],
                                  "verify": {"ok": True}}
    manifest = write_set(tmp_path, b"payload", lock=lock_data(), labels={
        labels.TARGET: "spark", "count": 3}, image={
        "id": "sha256:" + "1" * 64, "layers": ["sha256:" + "2" * 64, 7],
        "config": {"User": "vllm"}, "repo_digests": ["reg/x@sha256:" + "3" * 64]},
        mods=records["mods"], verify=records["verify"])
    facts = read_facts(str(manifest))
    assert facts.kind == "tarball" and facts.image_id == "sha256:" + "1" * 64
    assert facts.lock is not None and facts.lock.target == "spark"
    assert facts.labels == {labels.TARGET: "spark", "count": "3"}
    assert facts.layers == [Layer("sha256:" + "2" * 64), Layer("7")]
    assert facts.config == {"User": "vllm"}
    assert facts.records == records
    assert facts.repo_digests == ["reg/x@sha256:" + "3" * 64]


def test_a_set_whose_manifest_holds_fields_of_other_shapes_reads_as_not_recorded(tmp_path):
    manifest = write_set(tmp_path, b"payload", image={"id": 5, "layers": "x", "config": [1],
                                                      "repo_digests": {"a": 1}})
    facts = read_facts(str(manifest))
    assert facts.image_id == "5"
    assert facts.layers is None and facts.config == {} and facts.repo_digests == []
    assert facts.lock is None and facts.records == {}


def test_a_set_whose_lock_is_no_lock_is_read_without_it_and_says_so(tmp_path, capsys):
    manifest = write_set(tmp_path, b"payload", lock={"target": "spark", "mode": 7})
    facts = read_facts(str(manifest))
    assert facts.lock is None
    err = capsys.readouterr().err
    assert f"{manifest}: field 'lock'" in err and "its lock is left out" in err
    assert "Traceback" not in err


def test_a_bare_tarball_has_no_manifest_to_read(tmp_path):
    bare = tmp_path / "image.tar"
    bare.write_bytes(tar_bytes([("a", b"x", 0)]))
    with pytest.raises(ConfigError, match=r"image\.tar: a bare tarball has no manifest"):
        read_facts(str(bare))


def test_an_empty_or_broken_lock_label_is_no_lock():
    assert lock_from_label(None, "label") is None
    assert lock_from_label("", "label") is None
    assert lock_from_label("{not json", "label x of img") is None
    found = lock_from_label(json.dumps(lock_data()), "label x of img")
    assert found is not None and found.mode == "prebuilt"
