"""Property-based tests (Hypothesis) of the spec-layer parsers of outside data: locks (JSON, as
they travel in images and published manifests), build specs and target files (YAML). Seeds are
real: the test lock of tests/test_specs_lock.py, the repository's targets/*.yaml and a spec
using most fields. Each mutated input parses or raises one of edgevllm's own errors, one line,
within the memory bound and Hypothesis's deadline."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from hypothesis import given
from hypothesis import strategies as st
from test_specs_lock import sample_lock

from edgevllm.common.errors import UnknownTargetError
from edgevllm.common.schema import load_model
from edgevllm.specs.buildspec import load_spec_file, spec_from_dict
from edgevllm.specs.lock import canonical_json, parse_lock
from edgevllm.specs.targets import Target
from support.properties import PROPERTY, bounded, json_values, mutated, replaced_field

REPO = Path(__file__).resolve().parent.parent
LOCK_TEXT = canonical_json(sample_lock())
SPEC = {"target": "thor", "mode": "compile", "vllm": {"ref": "v0.11.0", "prs": [123]},
        "packages": {"transformers": "==4.57.1"}, "env": {"VLLM_LOGGING_LEVEL": "INFO"},
        "build_args": {"MAX_JOBS": "4"}, "tags": ["edgevllm/vllm:thor-dev"], "max_jobs": 4,
        "add_mods": ["fastsafetensors"], "apt_packages": ["git"], "platform": "linux/arm64",
        "base_image": "nvcr.io/nvidia/pytorch:25.10-py3", "overrides": ["numpy<2.3"]}
TARGET_TEXT = (REPO / "targets" / "thor.yaml").read_bytes()


@PROPERTY
@given(mutated(LOCK_TEXT.encode()))
def test_a_lock_with_its_bytes_mutated(data):
    bounded(parse_lock, data.decode("utf-8", errors="surrogateescape"), "fuzz.lock.json")


@PROPERTY
@given(replaced_field(json.loads(LOCK_TEXT)))
def test_a_lock_with_any_field_replaced(document):
    bounded(parse_lock, json.dumps(document), "fuzz.lock.json")


@PROPERTY
@given(json_values())
def test_a_lock_of_any_json_or_yaml(document):
    text = json.dumps(document)
    bounded(parse_lock, text, "fuzz.lock.json")
    bounded(parse_lock, text, "fuzz.lock.yaml", True)


@PROPERTY
@given(replaced_field(SPEC))
def test_a_spec_with_any_field_replaced(document):
    bounded(spec_from_dict, document, "fuzz spec")


def _spec_file(folder: Path, data: bytes) -> object:
    path = folder / "fuzz-spec.yaml"
    path.write_bytes(data)
    return load_spec_file(path)


def _target_file(folder: Path, data: bytes) -> object:
    path = folder / "thor.yaml"
    path.write_bytes(data)
    return load_model(Target, path, UnknownTargetError)


@PROPERTY
@given(st.sampled_from(("spec", "target")).flatmap(lambda kind: st.tuples(st.just(kind), mutated(
    yaml.safe_dump(SPEC).encode() if kind == "spec" else TARGET_TEXT))))
def test_spec_and_target_files_with_their_bytes_mutated(tmp_path_factory, case):
    kind, data = case
    bounded(_spec_file if kind == "spec" else _target_file, tmp_path_factory.getbasetemp(), data)
