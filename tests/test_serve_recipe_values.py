"""The values a recipe's templates see (``serve/recipe/values.py``): ``--set`` read as the user
typed it (a decimal number, true/false and null are read; ``012``, ``1:30``, ``yes``, ``0x10`` and
dates stay text, where PyYAML's YAML 1.1 made them 10, 90, True, 16 and a date), keys refused
with the settable ones named, the target chosen, required placeholders, the clustered form's
topology and the host's HF_HOME; through the real ``inv compose`` too (no engine needed)."""

from __future__ import annotations

import pytest
import yaml

from edgevllm.common.errors import RecipeError
from edgevllm.serve.recipe.load import parse_recipe, render
from edgevllm.serve.recipe.values import parse_sets, template_values
from support.inprocess import one_error, own_user_folders, run_cli


def recipe_data(**changes) -> dict:
    data = {"name": "values-test", "description": "d", "targets": ["spark", "thor"],
            "status": {"spark": "untested", "thor": "untested"},
            "image": "edgevllm-test/absent:1", "model": "org/m",
            "defaults": {"util": 0.7, "served": "m"},
            "serve": {"args": ["{{ model }}", "--gpu-memory-utilization={{ util }}",
                               "--served-model-name={{ served }}"]}}
    data.update(changes)
    return data


def recipe(**changes):
    return parse_recipe(recipe_data(**changes), "t")


# -- --set values ----------------------------------------------------------------------------------
@pytest.mark.parametrize("raw, value", [
    ("0.85", 0.85), ("9000", 9000), ("-3", -3), ("0", 0), (".5", 0.5), ("1.5e-3", 0.0015),
    ("true", True), ("False", False), ("null", None), ("~", None), ("", ""),
    ("8 ", 8),
])
def test_numbers_bools_and_null_are_read(raw, value):
    assert parse_sets([f"k={raw}"]) == {"k": value}


@pytest.mark.parametrize("raw", [
    "012",         # YAML 1.1 octal: was 10
    "1:30",        # sexagesimal: was 90
    "1_000",       # was 1000
    "0x10",        # was 16
    "yes", "on", "NO", "off",  # were True / False
    "2024-01-01",  # was a date
    ".inf", "0o17", "1e3", "v1.2",
])
def test_what_yaml_11_would_change_stays_the_text_typed(raw):
    assert parse_sets([f"k={raw}"]) == {"k": raw}


def test_a_leading_zero_value_reaches_the_command_as_typed():
    rendered = render(recipe(), parse_sets(["served=007", "util=0.9"]))
    assert rendered.command[-2:] == ["--gpu-memory-utilization=0.9", "--served-model-name=007"]


def test_json_and_equals_stay_strings_and_the_last_set_wins():
    sets = parse_sets(['spec={"method": "mtp", "n": 2}', "a=b=c", "served=x", "served=y"])
    assert sets == {"spec": '{"method": "mtp", "n": 2}', "a": "b=c", "served": "y"}


@pytest.mark.parametrize("item", ["noequals", "=1"])
def test_a_set_without_a_key_is_one_line(item):
    with pytest.raises(RecipeError) as caught:
        parse_sets([item])
    assert str(caught.value).startswith(f"--set '{item}': expected key=value")


# -- the values ------------------------------------------------------------------------------------
def test_defaults_topology_and_model_are_the_values():
    values = template_values(recipe(), {}, "t")
    assert values["util"] == 0.7 and values["model"] == "org/m"
    assert (values["tensor_parallel"], values["pipeline_parallel"], values["nodes"]) == (1, 1, 1)
    assert values["port"] == 8000 and values["target"] == "spark"  # the first, off a device


def test_an_unknown_key_names_the_settable_ones():
    with pytest.raises(RecipeError) as caught:
        template_values(recipe(), {"utl": 0.5}, "recipes/x.yaml")
    text = str(caught.value)
    assert text.startswith("--set utl: recipes/x.yaml has no such key; settable keys: ")
    assert "util" in text and "port" in text and "served" in text


def test_a_target_the_recipe_does_not_run_on_is_refused():
    with pytest.raises(RecipeError, match=r"target 'orin' is not one of this recipe's targets "
                                          r"\(spark, thor\)"):
        template_values(recipe(), {"target": "orin"}, "t")
    assert template_values(recipe(), {"target": "thor"}, "t")["target"] == "thor"


def test_a_required_placeholder_takes_defaults_or_set_only():
    needs = recipe(defaults={"tp_size": 2}, required=["tp"],
                   serve={"args": ["-tp={{ tp }}", "{{ tp_size }}"]})
    with pytest.raises(RecipeError) as caught:
        template_values(needs, {}, "t")
    text = str(caught.value)
    assert "placeholder 'tp' has no value" in text and "--set tp=VALUE" in text
    assert template_values(needs, {"tp": 4}, "t")["tp"] == 4


def test_a_misspelt_default_is_pointed_at():
    needs = recipe(defaults={"max_model_len": 8192}, required=["max_model_lenn"],
                   serve={"args": ["{{ max_model_lenn }}", "{{ max_model_len }}"]})
    with pytest.raises(RecipeError, match=r"defaults has 'max_model_len': a misspelling\?"):
        template_values(needs, {}, "t")


def test_a_required_name_is_never_filled_from_topology():
    needs = recipe(required=["pipeline_parallel"], serve={"args": ["-pp={{ pipeline_parallel }}"]})
    with pytest.raises(RecipeError, match="placeholder 'pipeline_parallel' has no value"):
        template_values(needs, {}, "t")


def test_the_clustered_form_brings_its_own_topology():
    dual = recipe(topology={"cluster": {"mode": "ray", "nodes": 2, "tensor_parallel": 2}})
    assert template_values(dual, {}, "t")["nodes"] == 1
    clustered = template_values(dual, {}, "t", clustered=True)
    assert (clustered["nodes"], clustered["tensor_parallel"]) == (2, 2)


def test_hf_home_is_the_cache_mounted_and_set_still_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert template_values(recipe(), {}, "t")["hf_cache"] == str(tmp_path / "hf")
    assert template_values(recipe(), {"hf_cache": "/data"}, "t")["hf_cache"] == "/data"
    monkeypatch.delenv("HF_HOME")
    assert template_values(recipe(), {}, "t")["hf_cache"] == "~/.cache/huggingface"


# -- through the CLI -------------------------------------------------------------------------------
def write(tmp_path, **changes) -> str:
    path = tmp_path / "values-test.yaml"
    path.write_text(yaml.safe_dump(recipe_data(**changes)))
    return str(path)


def test_cli_keeps_the_typed_text_in_the_compose_command(tmp_path, capsys, monkeypatch):
    own_user_folders(tmp_path, monkeypatch)
    out = tmp_path / "compose.yaml"
    code, err = run_cli(capsys, monkeypatch, "compose", "--recipe", write(tmp_path), "--out",
                        str(out), "--set", "served=0012", "--set", "util=0.5")
    assert code == 0, err
    (service,) = yaml.safe_load(out.read_text())["services"].values()
    assert service["command"][-2:] == ["--gpu-memory-utilization=0.5",
                                       "--served-model-name=0012"]


@pytest.mark.parametrize("argv, said", [
    (["--set", "nope=1"], "--set nope: "),
    (["--set", "justakey"], "--set 'justakey': expected key=value"),
    (["--target", "orin"], "target 'orin' is not one of this recipe's targets"),
])
def test_cli_bad_values_are_one_line_and_nothing_written(tmp_path, capsys, monkeypatch, argv,
                                                         said):
    own_user_folders(tmp_path, monkeypatch)
    out = tmp_path / "compose.yaml"
    code, err = run_cli(capsys, monkeypatch, "compose", "--recipe", write(tmp_path), "--out",
                        str(out), *argv)
    assert code == RecipeError.exit_code
    assert said in one_error(err)
    assert not out.exists()
