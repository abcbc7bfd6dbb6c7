"""``inv build --recipe`` / ``inv render --recipe``: an imported eugr recipe's image has its mods
(run at build time), the packages its arguments need (InstantTensor, pinned) and its tag."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from edgevllm.cli.build import spec_from_flags
from edgevllm.common.errors import CherryPickConflictError, RecipeError
from edgevllm.serve.recipe.build import recipe_spec_fields, with_overrides
from edgevllm.serve.recipe.importfolder import convert_file, import_file
from edgevllm.serve.recipe.load import parse_recipe
from edgevllm.sources.prepare import prepare_sources
from edgevllm.sources.requests import SourceRequest
from support import web_standin
from support.gitfixtures import (  # noqa: F401
    PR_ANCESTOR,
    PR_CLEAN,
    PR_CODE_CONFLICT,
    PR_MOVABLE,
    git_cache,
    upstream,
)

RECIPES = Path(__file__).parent / "fixtures" / "eugr-recipes" / "recipes"


@pytest.fixture
def imported(user_config_home):
    result = import_file(RECIPES / "download-mod.yaml", force=True)  # offline: nothing fetched
    yield result
    assert result.path is not None
    result.path.unlink()


def test_recipe_spec_fields_carry_mods_packages_and_tag(imported):
    # The probe of the build imports InstantTensor besides the target's own imports.
    assert recipe_spec_fields("download-mod") == {
        "target": "spark", "add_mods": ["eugr-plugin-download"],
        "packages": {"instanttensor": "0.2.2"}, "tags": ["vllm-node"],
        "probe_required": ["vllm", "torch", "flashinfer", "fastsafetensors", "instanttensor"]}


def test_a_plain_recipe_still_gets_what_its_arguments_need(tmp_path):
    recipe = tmp_path / "plain.yaml"
    recipe.write_text(json.dumps({
        "name": "plain", "description": "d", "targets": ["spark", "thor"],
        "status": {"spark": "untested", "thor": "untested"}, "image": "me/plain:1",
        "model": "org/m", "serve": {"args": ["{{ model }}", "--load-format=instanttensor"]}}))
    parse_recipe(json.loads(recipe.read_text()), "plain")
    assert recipe_spec_fields(str(recipe), "thor") == {
        "target": "thor", "packages": {"instanttensor": "0.2.2"}, "tags": ["me/plain:1"],
        "probe_required": ["vllm", "torch", "flashinfer", "fastsafetensors", "instanttensor"]}


def test_render_recipe_bakes_the_mod_and_pins_instanttensor(imported, tmp_path, cli):
    # --compile: the pin is a resolver override of the compile's locked closure, as in every mode
    # (the Dockerfile installs the closure by hash and names no package)
    from edgevllm.builder.modes.closure import closure_overrides
    from edgevllm.cli.build import spec_from_flags
    from edgevllm.specs.buildspec import resolve

    eff = resolve(spec_from_flags({"recipe": "download-mod", "compile": True}))
    assert eff.mode == "compile" and "instanttensor==0.2.2" in closure_overrides(eff, [])
    code, _, err = cli("render", "--recipe", "download-mod", "--compile", "--out",
                       str(tmp_path / "r"))
    assert code == 0, err
    assert "instanttensor" not in (tmp_path / "r" / "Dockerfile").read_text()
    staged = tmp_path / "r" / "edgevllm-mods"
    # render fetches nothing: the plan names the download the build fetches and pins
    assert not (staged / "eugr-plugin-download" / "downloads").exists()
    plan = json.loads((staged / "plan.json").read_text())
    step = next(m for m in plan["mods"] if m["name"] == "eugr-plugin-download")["steps"][0]
    assert step["kind"] == "script" and step["run"] == "run.sh"
    assert step["downloads"] == [{"url": web_standin.PLUGIN_URL,
                                  "file": "downloads/plugin_parser.py"}]
    code, _, err = cli("render", "--recipe", "download-mod", "--lock", "x.lock.json", "--out",
                       str(tmp_path / "r2"))
    assert code != 0 and "error: --recipe and --lock: a lock rebuilds exactly" in err


# -- a recipe's picks (eugr's build_args) through the cherry-pick engine, on real git ------------
@pytest.fixture
def picked(user_config_home):
    result = import_file(RECIPES / "picked-prs.yaml", force=True)
    yield result
    assert result.path is not None
    result.path.unlink()


def test_picks_and_base_ref_are_carried_into_the_build_spec(picked):
    spec = yaml.safe_load(Path(picked.recipe["build"]["spec"]).read_text())
    assert spec == {"target": "spark", "vllm": {"ref": "v0.2.0", "cherry_picks": ["101", "105"]},
                    "tags": ["vllm-node-picks"]}
    assert picked.recipe["env"] == {}  # eugr's runner reads an empty `env: []` as no env
    assert "build_args: vLLM at v0.2.0 + PR(s) 101, 105 (inv build --recipe applies the picks " \
           "and pins them in the lock)" in picked.notes
    assert "build_args --tag vllm-node-picks: a build-and-copy.sh setting; edgevllm takes it " \
           "from the target (inv build --help)" in picked.notes
    assert "build_args --rebuild-vllm: a build-and-copy.sh flag with no edgevllm equivalent; " \
           "left out" in picked.notes


def test_recipe_picks_go_through_the_cherry_pick_engine(picked, git_cache, upstream):
    """The recipe's PRs, then --cherry-pick's, applied onto the recipe's ref of --vllm-repo."""
    spec = spec_from_flags({"recipe": "picked-prs", "vllm_repo": upstream.file_url,
                            "cherry_pick": [str(PR_ANCESTOR)]})
    assert spec.vllm.ref == "v0.2.0"  # a repo without a ref keeps the recipe's base
    assert spec.vllm.cherry_picks == ["101", "105", str(PR_ANCESTOR)]
    request = SourceRequest.from_cli("vllm", spec.vllm.repo, spec.vllm.ref, spec.vllm.pr,
                                     spec.vllm.cherry_picks, spec.vllm.allow_doc_conflicts)
    prepared = prepare_sources(request, None)
    assert [p.pr for p in prepared.applied] == [PR_CLEAN, PR_MOVABLE]
    assert [p.pr for p in prepared.skipped] == [PR_ANCESTOR]  # already in v0.2.0
    assert prepared.base_sha == upstream.shas["c4"]


def test_command_line_adds_to_the_recipes_lists_and_replaces_the_rest():
    recipe = {"target": "spark", "add_mods": ["eugr-a"], "tags": ["vllm-node"],
              "packages": {"instanttensor": "0.2.2"},
              "vllm": {"ref": "v0.2.0", "cherry_picks": ["101"]}}
    merged = with_overrides(recipe, {
        "add_mods": ["fastsafetensors", "eugr-a"], "tags": ["mine"], "mods": [],
        "packages": {"six": "1.17.0"},
        "vllm": {"repo": "/src/vllm", "ref": None, "cherry_picks": ["106"]}})
    assert merged == {"target": "spark", "add_mods": ["eugr-a", "fastsafetensors"],
                      "tags": ["vllm-node", "mine"], "mods": [],
                      "packages": {"instanttensor": "0.2.2", "six": "1.17.0"},
                      "vllm": {"ref": "v0.2.0", "cherry_picks": ["101", "106"],
                               "repo": "/src/vllm"}}
    assert with_overrides(recipe, {"vllm": {"ref": "v0.3.0"}})["vllm"]["ref"] == "v0.3.0"
    assert with_overrides(recipe, {"vllm": {"pr": 7, "ref": None}})["vllm"]["ref"] is None


def test_render_recipe_names_the_picks_it_will_apply(picked, cli, tmp_path):
    code, _, err = cli("render", "--recipe", "picked-prs", "--out", str(tmp_path / "r"))
    assert code == 0, err
    plan = json.loads((tmp_path / "r" / "build-plan.json").read_text())
    assert plan["contexts"]["vllm-src"] == ("<prepared vLLM tree: vllm: vllm-project/vllm at ref "
                                            "v0.2.0; vllm: pick 1: PR #101; vllm: pick 2: PR "
                                            "#105>")


def test_a_conflicting_recipe_pick_fails_naming_it(git_cache, upstream, tmp_path):
    recipe = tmp_path / "conflict.yaml"
    text = (RECIPES / "picked-prs.yaml").read_text().replace('"101"', str(PR_CODE_CONFLICT))
    recipe.write_text(text)
    result = import_file(recipe, tmp_path / "out" / "conflict.yaml")
    spec = spec_from_flags({"recipe": str(result.path), "vllm_repo": upstream.file_url})
    request = SourceRequest.from_cli("vllm", spec.vllm.repo, spec.vllm.ref, None,
                                     spec.vllm.cherry_picks, False)
    with pytest.raises(CherryPickConflictError, match=f"PR #{PR_CODE_CONFLICT}"):
        prepare_sources(request, None)


@pytest.mark.parametrize("args, problem", [
    (["--apply-vllm-pr", "; rm -rf /"], "is not a PR number or PR URL"),
    (["--vllm-ref", "main; id"], "is not a git ref"),
    ("--vllm-ref v1", "expected a list of flags"),
])
def test_bad_build_args_are_one_error_naming_the_field(tmp_path, args, problem):
    recipe = tmp_path / "bad.yaml"
    data = yaml.safe_load((RECIPES / "picked-prs.yaml").read_text())
    data["build_args"] = args
    recipe.write_text(yaml.safe_dump(data))
    with pytest.raises(RecipeError, match=f"field 'build_args'.*{re.escape(problem)}"):
        convert_file(recipe)
