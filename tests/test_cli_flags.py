"""cli/flags.py's reading of build flags into a partial spec (``spec_overrides``): only what was
given, each kind read its one way as Invoke hands it (whole numbers, comma lists, KEY=VALUE
pairs, repeatable lists, switches), a PR URL of a fork setting the source's repository, and a
value that cannot be what the user meant refused in one line naming the flag. ``inv build``'s
help comes from the same table."""

from __future__ import annotations

import pytest

from edgevllm.cli.flags import BUILD_FLAGS, by_name, help_for, spec_overrides
from edgevllm.common.errors import ConfigError
from support.inprocess import exit_code


def test_only_what_was_given_lands_each_under_its_field():
    data = spec_overrides({"target": "spark", "vllm_ref": "v0.33.0", "max_jobs": "12",
                           "mod": ["earlyoom, fastsafetensors"], "tag": ["a:1", "b:2"],
                           "env": ["A=1", "B=x=y"], "reproducible": True, "rerun_steps": False,
                           "image_repo": "", "extensions": None})
    assert data["vllm"]["ref"] == "v0.33.0" and data["max_jobs"] == 12
    assert data["mods"] == ["earlyoom", "fastsafetensors"] and data["tags"] == ["a:1", "b:2"]
    assert data["env"] == {"A": "1", "B": "x=y"} and data["reproducible"] is True
    assert "target" not in data and "rerun_steps" not in data and "image_repo" not in data
    assert spec_overrides({}) == spec_overrides({"max_jobs": None, "tag": []})


def test_a_pr_url_of_a_fork_builds_the_fork():
    data = spec_overrides({"vllm_pr": "https://github.com/someone/vllm/pull/123"})
    assert data["vllm"]["pr"] == 123
    assert data["vllm"]["repo"] == "https://github.com/someone/vllm.git"
    assert spec_overrides({"vllm_pr": "123"})["vllm"]["pr"] == 123


@pytest.mark.parametrize(("values", "said"), [
    ({"max_jobs": "1e3"}, "--max-jobs '1e3': expected a whole number"),
    ({"nvcc_threads": "-2"}, "--nvcc-threads '-2': expected a whole number"),
    ({"max_jobs": "0x10"}, "--max-jobs '0x10': expected a whole number"),
    ({"extensions": [","]}, "--extensions ',': names nothing"),
    ({"mod": [" , "]}, "--mod ' , ': names nothing"),
    ({"env": ["NOVALUE"]}, "--env"),
    ({"vllm_pr": "https://github.com/someone/vllm/pull/1",
      "vllm_repo": "https://github.com/other/vllm"},
     "is a PR of another repository than --vllm-repo"),
    ({"vllm_pr": "not-a-pr"}, "--vllm-pr"),
], ids=["float-jobs", "negative-threads", "hex-jobs", "empty-extensions", "blank-mods",
        "env-without-value", "pr-of-another-repo", "pr-not-a-number"])
def test_a_flag_value_that_cannot_be_meant_is_one_line_naming_it(values, said):
    with pytest.raises(ConfigError) as info:  # SpecError, or the PR parser's RefSyntaxError
        spec_overrides(values)
    line = str(info.value)
    assert said in line and "\n" not in line, line


def test_every_build_flag_has_help_and_inv_build_shows_it(capsys):
    helps = help_for(BUILD_FLAGS)
    assert set(helps) == {f.name for f in BUILD_FLAGS}
    assert all(text.strip() for text in helps.values()), helps
    assert by_name(BUILD_FLAGS)["max_jobs"].kind == "int"
    capsys.readouterr()
    assert exit_code(["--help", "build"]) == 0
    shown = capsys.readouterr().out
    for flag in BUILD_FLAGS:  # Invoke's help of the task, as a user reads it
        assert f"--{flag.name.replace('_', '-')}" in shown, flag.name
