"""serve/recipe/schema.py through the one parser of recipes (serve/recipe/load.parse_recipe): a
shipped recipe with one field changed the way a hand-written recipe gets it wrong is one line
naming the field and what to write, the recipe's file, and no traceback; what the schema allows
still parses. The values checked here reach a container's name, docker's --health-cmd (run by
/bin/sh), argv and Compose files."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from edgevllm.common.errors import RecipeError
from edgevllm.serve.recipe.load import parse_recipe

REPO = Path(__file__).resolve().parents[1]
SHIPPED = yaml.safe_load((REPO / "recipes" / "nemotron-3-nano-nvfp4-spark.yaml").read_text())


def changed(path: str, value: object) -> dict:
    """The shipped recipe with the field at dotted ``path`` set to ``value`` (None: removed)."""
    data = copy.deepcopy(SHIPPED)
    *parents, leaf = path.split(".")
    node = data
    for key in parents:
        node = node.setdefault(key, {})
    if value is None:
        node.pop(leaf, None)
    else:
        node[leaf] = value
    return data


BAD = [
    ("name", "My Recipe", "field 'name'", "lower-case letters"),
    ("name", "-x", "field 'name'", "it names the container"),
    ("image", "UPPER:tag", "field 'image'", "must be an image tag"),
    ("restart", "sometimes", "field 'restart'", "no, always, unless-stopped or on-failure"),
    ("secrets", ["HF TOKEN"], "field 'secrets'", "'HF TOKEN' is not an environment variable"),
    ("health.path", "/health; rm -rf /", "field 'health.path'", "must be a URL path"),
    ("health.interval", "30 seconds", "field 'health.interval'", "30s, 5m or 1h"),
    ("health.retries", 0, "field 'health.retries'", "greater than or equal to 1"),
    ("topology.nodes", 2, "field 'topology'", "mode 'solo' runs on one node"),
    ("topology.mode", "mpi", "field 'topology.mode'", "'solo', 'ray' or 'torch'"),
    ("topology.ray_port", 70000, "field 'topology.ray_port'", "less than or equal to 65535"),
    ("status", {"thor": "known-good"}, "status must give known-good/untested for each target",
     "not a target: ['thor']"),
    ("files", [{"path": "../../etc/passwd", "sha256": "a" * 64}], "field 'files.0.path'",
     "relative to the recipe file"),
    ("files", [{"path": "t.jinja", "sha256": "A" * 64}], "field 'files.0.sha256'",
     "64 lower-case hex digits"),
    ("files", [{"path": "t.jinja", "sha256": "a" * 64, "mount": "rel/x"}],
     "field 'files.0.mount'", "absolute path in the container"),
    ("gpu_memory_gb", -1, "field 'gpu_memory_gb'", "greater than 0"),
    ("env", {"HF_TOKEN": "hf_x"}, "env 'HF_TOKEN' is a secret", "list it under secrets only"),
    ("build", {"spec": "a.yaml", "lock": "a.lock.json"}, "field 'build'",
     "give exactly one of 'spec'"),
    ("targets", [], "field 'targets'", "at least 1"),
    ("colour", "blue", "colour", "unknown field"),
]


@pytest.mark.parametrize(("path", "value", "where", "said"), BAD,
                         ids=[f"{p}-{i}" for i, (p, *_rest) in enumerate(BAD)])
def test_a_recipe_field_written_wrong_is_one_line_naming_it(path, value, where, said):
    with pytest.raises(RecipeError) as info:
        parse_recipe(changed(path, value), "recipes/mine.yaml")
    line = str(info.value)
    assert line.startswith("recipes/mine.yaml: ") and "\n" not in line, line
    assert where in line and said in line, line


def test_a_recipe_that_names_no_image_is_one_line():
    data = changed("image", None)
    data.pop("build", None)
    with pytest.raises(RecipeError, match="name the image: 'image' \\(tag or repo@sha256"):
        parse_recipe(data, "recipes/mine.yaml")


def test_a_value_in_env_that_looks_like_a_token_is_refused_by_its_kind():
    """A secret's value in ``env`` would land in argv and Compose files: named, not printed."""
    token = "hf_" + "a" * 34
    with pytest.raises(RecipeError) as info:
        parse_recipe(changed("env", {"MY_VAR": token}), "recipes/mine.yaml")
    assert "list its name under secrets" in str(info.value)
    assert token not in str(info.value)


@pytest.mark.parametrize(("path", "value"), [
    ("image", "edgevllm/vllm:{{ target }}"),  # templated: checked once rendered
    ("image", "registry.example:5000/team/vllm@sha256:" + "b" * 64),
    ("restart", "on-failure:3"),
    ("health.path", "/v1/models"),
    ("topology", {"mode": "ray", "nodes": 2, "tensor_parallel": 2}),
    ("files", [{"path": "templates/t.jinja", "sha256": "c" * 64, "mount": "/t.jinja"}]),
], ids=["templated-image", "digest-image", "restart-n", "health-path", "ray", "files"])
def test_what_the_schema_allows_parses(path, value):
    recipe = parse_recipe(changed(path, value), "recipes/mine.yaml")
    assert recipe.name == SHIPPED["name"]
