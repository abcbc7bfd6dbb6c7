"""``inv sources`` reads its flags from the build's flag table: the same values give the same
source requests as ``inv build`` would prepare."""

from __future__ import annotations

import pytest

from edgevllm.cli.flags import SOURCE_FLAGS, spec_overrides
from edgevllm.cli.sources import TASK_FLAGS, build_requests
from edgevllm.common.errors import SpecError
from edgevllm.sources.requests import source_request
from edgevllm.specs.buildspec import load_spec, resolve

CASES = [
    {},
    {"vllm_pr": "https://github.com/someone/vllm/pull/12", "cherry_pick": ["5,6", "7"]},
    {"vllm_repo": "someone/vllm"},
    {"vllm_ref": "v0.33.0", "flashinfer_pr": "3", "flashinfer_cherry_pick": ["4"]},
    {"vllm_ref": "v0.33.0", "allow_doc_conflicts": True, "flashinfer_repo": "me/flashinfer"},
]


@pytest.mark.parametrize("values", CASES)
def test_sources_and_build_prepare_the_same_requests(values):
    eff = resolve(load_spec("spark", overrides=spec_overrides(values)))
    expected = [source_request(eff, "vllm")]
    if eff.spec.flashinfer.source is not None:
        expected.append(source_request(eff, "flashinfer"))
    assert build_requests(values) == expected


def test_the_task_flags_are_the_tables():
    assert {f.name for f in TASK_FLAGS} == {f.name for f in SOURCE_FLAGS} - {"flashinfer_version"}


def test_a_fork_pr_and_another_repo_are_refused_as_in_build():
    values = {"vllm_pr": "https://github.com/foo/vllm/pull/12", "vllm_repo": "other/vllm"}
    with pytest.raises(SpecError, match="another repository than --vllm-repo"):
        build_requests(values)
