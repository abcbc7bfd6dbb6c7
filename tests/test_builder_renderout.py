"""builder/renderout.py, ``inv render``: it says on stderr, in one line and in the build's
preflight words, the mode it chose and (where the mode compiles) the toolchain, both as
``build-plan.json`` holds them; before, only the plan file said either."""

from __future__ import annotations

import json

from edgevllm.builder.renderout import render_to
from edgevllm.specs.buildspec import load_spec


def said(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if "mode: " in line]


def test_render_says_the_mode_and_the_toolchain_it_chose(tmp_path, capsys):
    render_to(load_spec("spark", overrides={"mode": "compile"}), tmp_path / "compile")
    plan = json.loads((tmp_path / "compile" / "build-plan.json").read_text())
    assert plan["toolchain"], plan  # a compile names its toolchain (native, cross, emulated)
    assert said(capsys) == [f"==> mode: compile (mode compile asked for); toolchain: "
                            f"{plan['toolchain']}"]


def test_a_mode_that_compiles_nothing_says_no_toolchain(tmp_path, capsys):
    render_to(load_spec("spark", overrides={"vllm_wheel": "0.33.0"}), tmp_path / "prebuilt")
    plan = json.loads((tmp_path / "prebuilt" / "build-plan.json").read_text())
    assert plan["toolchain"] == "" and plan["mode"] == "prebuilt"
    assert said(capsys) == [f"==> mode: prebuilt ({plan['mode_reason']})"]
    assert "toolchain" not in plan["mode_reason"]
