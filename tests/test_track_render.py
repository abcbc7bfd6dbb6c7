"""track/render.py: ``inv track``'s report as rows, its title, its Markdown for an issue page (a
value from upstream cannot add a cell or a line), and ``--write-spec``: the spec bumped to the new
release with what the report retires dropped, a spec the build reads, written whole or not at
all. Reports are written here in the shape track/report.py gives them; the spec is a real one."""

from __future__ import annotations

import re

import pytest
import yaml

from edgevllm.common.errors import ConfigError
from edgevllm.specs.buildspec import spec_from_dict
from edgevllm.track.render import markdown, rows, title, write_spec
from edgevllm.track.report import NO_GITHUB, Start

SEPARATOR = re.compile(r"(?<!\\)\|")


def report(**extra) -> dict:
    base = {
        "from": {"vllm": "0.33.0", "target": "spark", "origin": "spec.yaml"},
        "to": {"vllm": "0.34.0"},
        "verdict": "rebuild recommended",
        "patches": [{"name": "keep-121a", "old": "applied", "new": "not-needed", "retire": True,
                     "detail": "upstream has it"}],
        "mods": [{"name": "flashinfer-sm121", "versions": {"flashinfer-python": "0.6.9 → 0.6.12"},
                  "verdict": "retire", "detail": "out of range",
                  "applier": {"verdict": "not applicable", "detail": "range", "outcome": "x"}},
                 {"name": "earlyoom", "versions": {}, "verdict": "keep", "detail": "any"}],
        "pins": [{"pin": "torch", "old": "2.9.0", "new": "2.10.0", "changed": True,
                  "installed": "2.10.0+cu130"},
                 {"pin": "cutlass", "old": "a" * 40, "new": "a" * 40, "changed": False,
                  "installed": None}],
        "plan": {"changes": [{"what": "group", "name": "_moe_C", "old": "12.1a",
                              "new": "12.0f", "change": "arches changed"}]},
        "picks": [{"pick": "40082", "merged": "merged in 0.34.0", "retire": True}],
    }
    return {**base, **extra}


def test_every_item_of_a_report_is_one_row_in_its_order():
    found = rows(report())
    assert [r[0] for r in found] == ["patch", "mod", "mod", "pin", "pin", "plan group", "pick"]
    assert found[0] == ("patch", "keep-121a", "applied → not-needed", "retire: upstream has it")
    assert found[1][3] == ("retire: out of range; the applier: not applicable: range")
    assert found[2][2:] == ("-", "keep: any; the applier: no edit step to judge")
    assert found[3][2:] == ("2.9.0 → 2.10.0", "changed (the image installs 2.10.0+cu130)")
    assert found[4][2] == "aaaaaaaaaaaa → aaaaaaaaaaaa" and found[4][3] == "same"


def test_a_plan_without_changes_and_a_mode_change_are_said():
    found = rows(report(plan={"changes": []}, picks=[],
                        mode={"old": {"mode": "prebuilt"},
                              "new": {"mode": "compile", "why": "no release wheel"}}))
    assert ("plan", "all", "-", "no group or extension changes for the target") in found
    assert found[-1] == ("mode", "make image", "prebuilt → compile", "no release wheel")
    refused = rows(report(requirements={"new_refused": "torch==9"}))
    assert ("requirements", "new", "-", "the build refuses them: torch==9") in refused


def test_the_title_says_what_was_compared_and_the_rules_note():
    assert title(report()) == ("vLLM 0.33.0 → 0.34.0 for spark (spec.yaml): rebuild "
                               "recommended")
    by_ref = report(to={"vllm": "0.34.0rc1", "what": "branch main"},
                    rule={"note": "the bump rule is for releases"})
    assert title(by_ref).endswith("(branch main) for spark (spec.yaml): rebuild recommended "
                                  "(the bump rule is for releases)")
    assert title(report(to=None)).startswith("vLLM 0.33.0 → - for spark")


def test_markdown_keeps_its_shape_whatever_upstream_wrote():
    tame = markdown(report())
    hostile = report()
    hostile["patches"][0]["detail"] = "x | forged | cell\n| new | row |"
    wild = markdown(hostile)
    shape = [len(SEPARATOR.findall(line)) for line in tame.splitlines()]
    assert [len(SEPARATOR.findall(line)) for line in wild.splitlines()] == shape
    assert "x \\| forged \\| cell \\| new \\| row \\|" in wild
    with_figures = markdown(report(figures={"bytes_read": 10, "bytes_downloaded": 5},
                                   seconds=3))
    assert with_figures.endswith(f"3 s, 10 bytes read, 5 downloaded; cherry-picks: "
                                 f"{NO_GITHUB}\n")


def start(tmp_path, **vllm) -> Start:
    data = {"target": "spark", "vllm": {"ref": "v0.33.0", **vllm},
            "mods": ["flashinfer-sm121", "earlyoom"]}
    return Start(spec=spec_from_dict(data, str(tmp_path / "spec.yaml")), release="0.33.0",
                 origin="spec.yaml")


def test_the_written_spec_is_bumped_and_drops_what_the_report_retires(tmp_path):
    out = tmp_path / "bumped.yaml"
    dropped = write_spec(report(), start(tmp_path, cherry_picks=["40082", "40100"]), out)
    assert dropped == {"mods": ["flashinfer-sm121"], "picks": ["40082"],
                       "patches": ["keep-121a"]}
    text = out.read_text()
    assert text.startswith("# inv track: vLLM 0.33.0 → 0.34.0; dropped mods: flashinfer-sm121;"
                           " dropped picks: 40082; retired patches")
    data = yaml.safe_load(text)
    assert data["vllm"]["ref"] == "v0.34.0" and data["vllm"]["cherry_picks"] == ["40100"]
    assert data["mods"] == ["earlyoom"] and data["remove_mods"] == ["flashinfer-sm121"]
    spec_from_dict(data, str(out))  # the build reads it


def test_a_report_for_a_commit_of_a_fork_pins_that_commit_and_repo(tmp_path):
    out = tmp_path / "bumped.yaml"
    to = {"vllm": "0.34.0.dev1", "commit": "b" * 40, "repo": "https://example.org/fork/vllm"}
    write_spec(report(to=to, mods=[], picks=[], patches=[]), start(tmp_path, pr=123), out)
    vllm = yaml.safe_load(out.read_text())["vllm"]
    assert vllm["ref"] == "b" * 40 and vllm["repo"] == to["repo"] and "pr" not in vllm


def test_a_bump_the_build_would_refuse_is_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "bumped.yaml"
    bad = report(to={"vllm": "0.34.0\nRUN id"})  # a version that is no ref
    with pytest.raises(ConfigError) as info:
        write_spec(bad, start(tmp_path), out)
    assert "\n" not in str(info.value) and str(out) in str(info.value)
    assert not out.exists()
