"""``inv build --recipe`` / ``inv render --recipe``: an imported eugr recipe's image has its mods
(run at build time), the packages its arguments need (InstantTensor, pinned) and its tag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgevllm.serve.recipe_build import recipe_spec_fields
from edgevllm.serve.recipe_folder import import_file
from edgevllm.serve.recipes import parse_recipe
from support import web_standin

RECIPES = Path(__file__).parent / "fixtures" / "eugr-recipes" / "recipes"


@pytest.fixture
def imported(monkeypatch, user_config_home):
    with web_standin.proxy() as env:
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        result = import_file(RECIPES / "download-mod.yaml", force=True)
    yield result
    result.path.unlink()


def test_recipe_spec_fields_carry_mods_packages_and_tag(imported):
    assert recipe_spec_fields("download-mod") == {
        "target": "spark", "add_mods": ["eugr-plugin-download"],
        "packages": {"instanttensor": "0.2.2"}, "tags": ["vllm-node"]}


def test_a_plain_recipe_still_gets_what_its_arguments_need(tmp_path):
    recipe = tmp_path / "plain.yaml"
    recipe.write_text(json.dumps({
        "name": "plain", "description": "d", "targets": ["spark", "thor"],
        "status": {"spark": "untested", "thor": "untested"}, "image": "me/plain:1",
        "model": "org/m", "serve": {"args": ["{{ model }}", "--load-format=instanttensor"]}}))
    parse_recipe(json.loads(recipe.read_text()), "plain")
    assert recipe_spec_fields(str(recipe), "thor") == {
        "target": "thor", "packages": {"instanttensor": "0.2.2"}, "tags": ["me/plain:1"]}


def test_render_recipe_bakes_the_mod_and_pins_instanttensor(imported, tmp_path, cli):
    # --compile: the compile's Dockerfile names the pin (prebuilt's closure resolves it at build)
    code, _, err = cli("render", "--recipe", "download-mod", "--compile", "--out",
                       str(tmp_path / "r"))
    assert code == 0, err
    assert '"instanttensor==0.2.2"' in (tmp_path / "r" / "Dockerfile").read_text()
    staged = tmp_path / "r" / "edgevllm-mods"
    assert (staged / "eugr-plugin-download" / "downloads" / "plugin_parser.py").read_bytes() \
        == web_standin.PLUGIN
    plan = json.loads((staged / "plan.json").read_text())
    step = next(m for m in plan["mods"] if m["name"] == "eugr-plugin-download")["steps"][0]
    assert step["kind"] == "script" and step["run"] == "run.sh"
    code, _, err = cli("render", "--recipe", "download-mod", "--spec", "x.yaml", "--out",
                       str(tmp_path / "r2"))
    assert code != 0 and "error: --recipe and --spec/--lock: give one of them" in err
