"""probe/result.py and probe/target.py: a probe's checks and verdict (a warning or an absent
optional component does not fail it, no checks at all does), the one-line summary an image label
carries, the printout a person reads, the JSON written whole; and what the probe reads of a
target, from targets/*.yaml, a mapping, or nothing usable (one line)."""

from __future__ import annotations

import json

import pytest

from edgevllm.common.errors import UnknownTargetError
from edgevllm.probe.result import ABSENT, FAIL, PASS, WARN, ProbeResult
from edgevllm.probe.target import DEFAULT_COMPONENTS, ProbeTarget, probe_target
from edgevllm.specs.targets import load_target


def result(*statuses: str) -> ProbeResult:
    probe = ProbeResult(image="img:1", target="spark", level=1)
    for index, status in enumerate(statuses):
        probe.add(f"check{index}", status, f"message {index}", remedy=f"fix {index}")
    return probe


def test_warnings_and_absent_components_pass_a_failure_does_not():
    assert result(PASS, WARN, ABSENT).passed
    assert result(PASS, WARN, ABSENT).summary() == "level1 pass (1 ok, 1 warn)"
    assert not result(PASS, FAIL).passed
    assert result(PASS, FAIL).summary() == "level1 fail: check1"


def test_a_probe_with_no_checks_fails_and_says_so():
    assert not result().passed and result().summary() == "level1 fail: no checks ran"


def test_the_summary_stays_short_with_many_failures():
    summary = result(*[FAIL] * 7).summary()
    assert summary == "level1 fail: check0, check1, check2, check3 +3 more"


def test_an_unknown_status_is_refused_when_the_check_is_made():
    with pytest.raises(ValueError, match="status 'maybe' not in"):
        result("maybe")


def test_the_printout_shows_remedies_for_problems_and_the_log_tail_of_a_failure():
    probe = result(PASS, WARN, FAIL)
    probe.checks[2].detail.update(line="Traceback: boom", line_no=12)
    probe.log_tail = [f"log {i}" for i in range(20)]
    text = probe.render()
    assert text.splitlines()[0] == "probe level 1: img:1 for target spark"
    assert "  [ok  ] check0: message 0" in text and "fix 0" not in text
    assert "         remedy: fix 1" in text and "         remedy: fix 2" in text
    assert "         seen (line 12): Traceback: boom" in text
    assert "    | log 5" in text and "    | log 4" not in text  # the last 15 lines
    assert text.splitlines()[-1] == "FAILED: level1 fail: check2"
    assert "log tail" not in result(PASS).render()


def test_the_json_is_written_whole_and_reads_back(tmp_path):
    probe = result(PASS, WARN)
    probe.facts["vllm"] = "0.33.0"
    path = probe.write_json(tmp_path / "out" / "probe.json")
    data = json.loads(path.read_text())
    assert data["passed"] is True and data["summary"] == "level1 pass (1 ok, 1 warn)"
    assert [c["status"] for c in data["checks"]] == [PASS, WARN]
    assert data["facts"] == {"vllm": "0.33.0"} and probe.get("check1") is probe.checks[1]
    assert [p.name for p in path.parent.iterdir()] == ["probe.json"]


@pytest.mark.parametrize("name", ["spark", "thor"])
def test_a_targets_probe_facts_come_from_its_file(name):
    target = load_target(name)
    found = probe_target(name)
    assert found.name == name and found.cuda_arch == str(target.cuda_arch)
    assert found.device_name == target.device_name
    assert probe_target(found) is found


def test_a_mapping_target_takes_the_defaults_it_does_not_name():
    found = probe_target({"name": "t", "cuda_arch": "12.1a", "runtime_env": {"A": 1},
                          "probe": {"serve_args": ["--x", 2]}})
    assert found == ProbeTarget(name="t", cuda_arch="12.1a", runtime_env={"A": "1"},
                                required_imports=list(DEFAULT_COMPONENTS),
                                serve_args=["--x", "2"])


@pytest.mark.parametrize("target", [{"name": "t"}, {"name": "t", "cuda_arch": ""}],
                         ids=["absent", "empty"])
def test_a_target_without_an_arch_is_one_line(target):
    with pytest.raises(UnknownTargetError) as info:
        probe_target(target)
    assert str(info.value) == "target 't' has no cuda_arch; set it in its YAML file"


def test_an_unknown_target_name_is_one_line():
    with pytest.raises(UnknownTargetError, match="unknown target 'nope'"):
        probe_target("nope")
