"""Compose output: every shipped recipe's file is accepted by the real ``docker compose config``,
keeps its restart policy and health check, references secrets without their values and keeps
literal ``$`` and JSON intact."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from edgevllm.common.errors import RecipeError
from edgevllm.serve.compose import write_compose
from edgevllm.serve.recipe.load import all_recipes, parse_recipe, render
from support.compose import compose_config

SECRET = "hf_compose_secret_value"


def unescape(value: str) -> str:
    return value.replace("$$", "$")


def shipped():
    return [(loaded, target) for loaded in all_recipes() for target in loaded.recipe.targets
            if loaded.recipe.topology.mode == "solo"]


@pytest.mark.parametrize("loaded, target", shipped(),
                         ids=lambda v: v if isinstance(v, str) else v.name)
def test_compose_file_of_every_shipped_recipe_is_accepted(tmp_path, loaded, target, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", SECRET)
    rendered = render(loaded, {"target": target})
    path = write_compose(rendered, tmp_path / "compose.yaml")
    text = path.read_text()
    assert SECRET not in text and "${HF_TOKEN:-}" in text
    resolved = compose_config(path)
    service = resolved["services"][loaded.name.replace(".", "-")]
    assert service["image"] == rendered.image
    assert service["command"] == rendered.command
    assert service["restart"] == rendered.restart
    assert service["healthcheck"]["test"][:2] == ["CMD", "python3"]
    assert f"localhost:{rendered.health_port}/health" in service["healthcheck"]["test"][-1]
    assert service["container_name"] == f"edgevllm-{loaded.name}"
    assert service["entrypoint"] in ([], None, "")  # the image's ENTRYPOINT is cleared
    for key, value in rendered.env.items():
        assert service["environment"][key] == value
    assert service["environment"]["HF_TOKEN"] == ""  # unset here; never written to the file
    gpu = service.get("runtime") == "nvidia" or service.get("deploy", {}).get("resources")
    assert gpu
    assert service["volumes"], "the HF cache volume is mounted"


def test_secret_comes_from_the_environment_of_compose(tmp_path):
    loaded = next(r for r in all_recipes() if r.name == "qwen3-8b-nvfp4")
    path = write_compose(render(loaded), tmp_path / "c.yaml")
    service = compose_config(path, {"HF_TOKEN": SECRET})["services"]["qwen3-8b-nvfp4"]
    assert service["environment"]["HF_TOKEN"] == SECRET
    assert SECRET not in path.read_text()


def test_dollar_and_json_survive_interpolation(tmp_path):
    recipe = parse_recipe({
        "name": "dollar", "description": "d", "targets": ["thor"], "status": {"thor": "untested"},
        "image": "edgevllm/vllm:thor", "model": "m", "restart": "always",
        "serve": {"args": ["--chat-template-kwargs", '{"price":"$5","x":{"y":1}}']},
        "env": {"LITERAL": "$HOME/x"},
        "container": {"gpus": "all", "network": "host"},
    }, "t")
    path = write_compose(render(recipe, allow_host_access=True), tmp_path / "c.yaml")
    service = compose_config(path)["services"]["dollar"]
    # `config` prints a Compose file again, so a literal $ is shown escaped as $$: not expanded.
    assert unescape(service["command"][-1]) == '{"price":"$5","x":{"y":1}}'
    assert unescape(service["environment"]["LITERAL"]) == "$HOME/x"
    assert service["network_mode"] == "host" and "ports" not in service
    devices = service["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"]
    assert service["restart"] == "always"


def test_cli_compose_writes_file(tmp_path, cli):
    out = tmp_path / "compose.yaml"
    code, _, err = cli("compose", "--recipe", "nemotron-3-nano-nvfp4-thor", "--out", str(out),
                       "--set", "port=8100")
    assert code == 0, err
    service = compose_config(out)["services"]["nemotron-3-nano-nvfp4-thor"]
    assert service["ports"][0]["published"] in ("8100", 8100)


def test_shipped_cluster_recipe_has_no_compose_form(tmp_path):
    loaded = next(r for r in all_recipes() if r.recipe.topology.mode != "solo")
    with pytest.raises(RecipeError, match="inv serve --nodes"):
        write_compose(render(loaded), tmp_path / "c.yaml")
    assert not (tmp_path / "c.yaml").exists()


def test_cluster_recipe_has_no_compose_form():
    recipe = parse_recipe({"name": "c", "description": "d", "targets": ["spark"],
                           "status": {"spark": "untested"}, "image": "x/y:z", "model": "m",
                           "topology": {"mode": "ray", "nodes": 2}}, "t")
    with pytest.raises(RecipeError, match="cluster"):
        write_compose(render(recipe), Path("/nonexistent/never-written.yaml"))
