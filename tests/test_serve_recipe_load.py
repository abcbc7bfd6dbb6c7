"""Recipe schema, loading, placeholder rendering and the spark-vllm-docker v1 importer."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml

from edgevllm.common.errors import RecipeError
from edgevllm.serve.recipe.importer import convert
from edgevllm.serve.recipe.importfolder import import_file
from edgevllm.serve.recipe.load import all_recipes, load_recipe, parse_recipe, parse_sets, render
from edgevllm.specs.buildspec import load_spec_file
from support.checks import present

REPO = Path(__file__).resolve().parent.parent
SEED_RECIPES = {
    "nemotron-3-nano-nvfp4-thor", "nemotron-3-nano-nvfp4-spark",
    "nemotron-3-nano-w4a16-b12x-spark", "nemotron-3-super-nvfp4-mtp-thor",
    "qwen3.6-35b-a3b-nvfp4-dflash-thor", "qwen3-8b-nvfp4",
}


def minimal(**changes) -> dict:
    data = {"name": "t", "description": "d", "targets": ["thor"], "status": {"thor": "untested"},
            "image": "edgevllm/vllm:thor", "model": "org/m",
            "serve": {"args": ["{{ model }}", "--port={{ port }}"]}}
    data.update(changes)
    return data


def write(tmp_path: Path, data: dict, name: str = "r.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


# -- shipped recipes ----------------------------------------------------------------------------
def test_every_seed_recipe_ships_and_validates():
    loaded = {r.name: r for r in all_recipes()}
    assert SEED_RECIPES <= set(loaded)
    for name in SEED_RECIPES:
        recipe = loaded[name].recipe
        assert set(recipe.status) == set(recipe.targets)
        assert recipe.evidence, f"{name}: cite where the flags come from"
        assert recipe.build and recipe.build.spec, f"{name}: name the image spec it needs"


def test_image_specs_named_by_recipes_are_valid_build_specs():
    for loaded in all_recipes():
        for target in loaded.recipe.targets:
            rendered = render(loaded, {"target": target})
            assert rendered.build is not None and rendered.build.spec is not None
            spec = load_spec_file(REPO / rendered.build.spec)
            assert spec.target == target
            assert rendered.image == f"{spec.image_repo}:{spec.tags[0]}"


def test_known_good_marks_follow_the_seeds():
    loaded = {r.name: r.recipe for r in all_recipes()}
    assert loaded["nemotron-3-super-nvfp4-mtp-thor"].status == {"thor": "known-good"}
    assert loaded["qwen3.6-35b-a3b-nvfp4-dflash-thor"].status == {"thor": "known-good"}
    assert loaded["nemotron-3-nano-w4a16-b12x-spark"].status == {"spark": "known-good"}
    assert loaded["nemotron-3-nano-nvfp4-thor"].status == {"thor": "untested"}
    assert loaded["qwen3-8b-nvfp4"].status == {"thor": "known-good", "spark": "untested"}


# -- schema errors: one line naming the field ---------------------------------------------------
@pytest.mark.parametrize("changes, field", [
    ({"topology": {"mode": "ray", "nodes": 0}}, "topology.nodes"),
    ({"topology": {"mode": "solo", "nodes": 2}}, "topology"),
    ({"restart": "sometimes"}, "restart"),
    ({"image": "Not An Image!"}, "image"),
    ({"imagee": "x"}, "imagee"),
    ({"status": {"spark": "known-good"}}, "status"),
    ({"status": {"thor": "works"}}, "status.thor"),
    ({"build": {"spec": "a.yaml", "lock": "b.json"}}, "build"),
    ({"secrets": ["HF-TOKEN"]}, "secrets"),
    ({"health": {"interval": "often"}}, "health.interval"),
    ({"health": {"path": "/health; rm -rf /"}}, "health.path"),
    ({"serve": {"args": ["{{ model"]}}, "serve.args[0]"),
    ({"name": "Has Spaces"}, "name"),
])
def test_schema_error_is_one_line_naming_file_and_field(tmp_path, changes, field):
    path = write(tmp_path, minimal(**changes))
    with pytest.raises(RecipeError) as info:
        load_recipe(str(path))
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message
    assert field in message


def test_missing_required_field_is_named(tmp_path):
    data = minimal()
    del data["model"]
    with pytest.raises(RecipeError, match="field 'model'"):
        load_recipe(str(write(tmp_path, data)))


def test_cli_reports_schema_error_without_traceback(tmp_path, cli):
    path = write(tmp_path, minimal(topology={"mode": "ray", "nodes": 0}))
    code, out, err = cli("serve", "--recipe", str(path), "--dry-run")
    assert code == 11
    assert "Traceback" not in err
    assert err.strip().startswith("error: ") and len(err.strip().splitlines()) == 1
    assert "topology.nodes" in err


def test_unknown_recipe_lists_the_known_ones():
    with pytest.raises(RecipeError, match="qwen3-8b-nvfp4"):
        load_recipe("no-such-recipe")


# -- rendering ----------------------------------------------------------------------------------
def test_json_argument_needs_no_escaping():
    recipe = parse_recipe(minimal(
        defaults={"k": 3},
        serve={"args": ["--speculative-config",
                        '{"method":"mtp","num_speculative_tokens":{{ k }},"x":{"y":1}}']}), "t")
    rendered = render(recipe)
    assert rendered.command[-1] == '{"method":"mtp","num_speculative_tokens":3,"x":{"y":1}}'
    assert rendered.command[:2] == ["vllm", "serve"]


def test_set_overrides_defaults_with_yaml_scalars():
    recipe = parse_recipe(minimal(defaults={"util": 0.7, "port": 8000},
                                  serve={"args": ["--gpu-memory-utilization={{ util }}",
                                                  "--port={{ port }}"]}), "t")
    rendered = render(recipe, parse_sets(["util=0.85", "port=9000"]))
    assert rendered.command[2:] == ["--gpu-memory-utilization=0.85", "--port=9000"]
    assert rendered.ports == ["9000:9000"]
    assert rendered.health_port == 9000


def test_set_value_with_equals_and_json_stays_a_string():
    sets = parse_sets(['spec={"method": "mtp"}', "extra=a=b"])
    assert sets == {"spec": '{"method": "mtp"}', "extra": "a=b"}


def test_set_unknown_key_is_refused():
    recipe = parse_recipe(minimal(), "t")
    with pytest.raises(RecipeError, match="--set nope: .*settable keys"):
        render(recipe, {"nope": 1})


def test_set_rejects_malformed_item():
    with pytest.raises(RecipeError, match="expected key=value"):
        parse_sets(["justakey"])


def test_undefined_placeholder_names_field_and_key():
    recipe = parse_recipe(minimal(serve={"args": ["--x={{ missing }}"]}), "t")
    with pytest.raises(RecipeError, match=r"field 'serve.args\[0\]': placeholder 'missing'"):
        render(recipe)
    assert render(recipe, {"missing": "v"}).command[-1] == "--x=v"


def test_empty_rendered_argument_is_dropped():
    recipe = parse_recipe(minimal(
        defaults={"parser": None},
        serve={"args": ["{{ model }}",
                        "{% if parser %}--reasoning-parser={{ parser }}{% endif %}"]}),
        "t")
    assert render(recipe).command == ["vllm", "serve", "org/m"]
    assert render(recipe, {"parser": "nano_v3"}).command[-1] == "--reasoning-parser=nano_v3"


def test_target_selects_image_and_spec():
    loaded = load_recipe("qwen3-8b-nvfp4")
    assert render(loaded).image == "edgevllm/vllm:thor"
    spark = render(loaded, {"target": "spark"})
    assert spark.image == "edgevllm/vllm:spark"
    assert spark.build is not None
    assert spark.build.spec == "recipes/images/spark.yaml"
    with pytest.raises(RecipeError, match="target 'orin'"):
        render(loaded, {"target": "orin"})


def test_topology_values_reach_templates_and_are_validated():
    recipe = parse_recipe(minimal(topology={"mode": "ray", "nodes": 2, "tensor_parallel": 2},
                                  serve={"args": ["--tp={{ tensor_parallel }}"]}), "t")
    assert render(recipe).command[-1] == "--tp=2"
    assert render(recipe, {"nodes": 4}).topology.nodes == 4
    with pytest.raises(RecipeError, match="topology.*nodes"):
        render(recipe, {"nodes": 0})


def test_digest_image_is_accepted():
    digest = "sha256:" + "a" * 64
    recipe = parse_recipe(minimal(image=f"edgevllm/vllm@{digest}"), "t")
    assert present(render(recipe).image).endswith(digest)


# -- spark-vllm-docker v1 import ----------------------------------------------------------------
V1 = {
    "recipe_version": "1", "name": "Nemotron-3-Super-NVFP4", "description": "super",
    "model": "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4", "container": "vllm-node",
    "cluster_only": True, "mods": ["mods/fix-super"], "build_args": ["--pre-tf"],
    "env": {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": 1},
    "defaults": {"port": 8000, "host": "0.0.0.0", "tensor_parallel": 2,
                 "speculative_config": '{"method": "mtp", "num_speculative_tokens": 3}'},
    "command": ("vllm serve nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4 \\\n"
                "  --host {host} --port {port} \\\n"
                "  --speculative-config '{speculative_config}' \\\n"
                "  --hf-overrides '{{\"a\": {{\"b\": 1}}}}' \\\n"
                "  -tp {tensor_parallel} --max-num-seqs {seqs} \\\n"
                "  --distributed-executor-backend ray\n"),
    "copy_hosts": ["a"],
}


def test_import_converts_command_to_argument_list():
    result = convert(V1, "recipes/super-nvfp4.yaml")
    recipe = result.recipe
    # Named by its file (what eugr's run-recipe.sh takes); eugr's display name leads the
    # description.
    assert recipe["name"] == "super-nvfp4"
    assert recipe["description"] == "Nemotron-3-Super-NVFP4: super"
    assert recipe["serve"]["command"] == ["vllm", "serve"]
    assert recipe["serve"]["args"] == [
        "{{ model }}", "--host", "{{ host }}", "--port", "{{ port }}",
        "--speculative-config", "{{ speculative_config }}",
        "--hf-overrides", '{"a": {"b": 1}}', "-tp", "{{ tensor_parallel }}",
        "--max-num-seqs", "{{ seqs }}"]
    assert recipe["topology"] == {"mode": "torch", "nodes": 2, "tensor_parallel": 2}
    assert recipe["required"] == ["seqs"]
    rendered = render(parse_recipe(recipe, "converted"), {"seqs": 8})
    assert rendered.command[10] == '{"a": {"b": 1}}'
    assert rendered.command[8] == '{"method": "mtp", "num_speculative_tokens": 3}'


def test_import_reports_what_it_cannot_convert():
    notes = " | ".join(convert(V1, "v1.yaml").notes)
    for expected in ("mod 'mods/fix-super'", "build_args", "field 'copy_hosts'",
                     "container 'vllm-node'", "placeholder 'seqs'", "cluster_only"):
        assert expected in notes


def test_import_reads_other_versions_as_v1_and_rejects_missing_fields():
    notes = convert({**V1, "recipe_version": "2"}, "v.yaml").notes
    assert any(n.startswith("recipe_version 2: read as version 1") for n in notes)
    data = dict(V1)
    del data["command"]
    with pytest.raises(RecipeError, match="field 'command'"):
        convert(data, "v.yaml")


def test_import_file_writes_a_loadable_recipe(tmp_path, cli):
    source = tmp_path / "v1.yaml"
    source.write_text(yaml.safe_dump(V1))
    out = tmp_path / "out.yaml"
    code, _, err = cli("recipe-import", str(source), "--out", str(out))
    assert code == 0, err
    assert "note: mod 'mods/fix-super' dropped" in err
    assert "# note: mod 'mods/fix-super' dropped" in out.read_text()
    loaded = load_recipe(str(out))
    assert loaded.recipe.model == V1["model"]
    with pytest.raises(RecipeError, match="exists"):
        import_file(source, out)


def test_imported_literal_jinja_text_is_kept_literal():
    data = {**V1, "command": "vllm serve m --chat-template '{{% if x %}}'", "defaults": {}}
    args = convert(data, "v.yaml").recipe["serve"]["args"]
    recipe = parse_recipe({**convert(data, "v.yaml").recipe}, "c")
    assert render(recipe).command[-1] == "{% if x %}"
    assert shlex.join(args)
