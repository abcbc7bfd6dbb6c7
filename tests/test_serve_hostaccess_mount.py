"""A recipe's ``--mount`` in ``container.extra`` read as docker's CLI reads it
(``cli/opts/mount.go``: the value is one CSV record, keys are lower-cased, a later
``source``/``src`` replaces an earlier one, and the local volume driver's options bind any host
folder). Each way around the allow-list of ``serve/recipe/hostaccess.py`` that the old
comma-split let through, refused in one line naming the field, at render time and through the real
``inv compose``; ordinary mounts still pass."""

from __future__ import annotations

import pytest
import yaml

from edgevllm.common.errors import RecipeError
from edgevllm.serve.recipe.hostaccess import host_requests
from edgevllm.serve.recipe.load import parse_recipe, render
from support.inprocess import one_error, own_user_folders, run_cli


def recipe_data(extra: list[str]) -> dict:
    return {"name": "mounts", "description": "d", "targets": ["spark"],
            "status": {"spark": "untested"}, "image": "edgevllm-test/absent:1", "model": "org/m",
            "container": {"gpus": "all", "extra": extra}}


def asks(*extra: str) -> list[str]:
    rendered = render(parse_recipe(recipe_data(list(extra)), "t"), allow_host_access=None)
    return [what for _, what in host_requests(rendered)]


@pytest.mark.parametrize("spec", [
    '"type=bind","source=/",target=/host',           # quoted CSV fields: docker unquotes them
    'type=bind,"source=/etc",target=/e',
    "Type=bind,Source=/,Target=/host",               # docker lower-cases the keys
    "type=bind,SRC=/root,dst=/r",
    "type=bind,source=/srv/models,src=/,target=/h",  # the last of source/src is the one used
    "type=bind,src=/srv/models,source=/var/run/docker.sock,target=/s",
])
def test_a_bind_of_the_host_spelt_another_way_is_refused(spec):
    found = asks("--mount", spec)
    assert len(found) == 1 and found[0].startswith("a mount of '/")


@pytest.mark.parametrize("spec", [
    "type=volume,dst=/h,volume-opt=type=none,volume-opt=o=bind,volume-opt=device=/",
    "dst=/h,volume-driver=local,volume-opt=device=/etc,volume-opt=o=bind",  # type defaults
    "type=volume,src=cache,dst=/c,volume-driver=some-plugin",
    "TYPE=volume,dst=/h,Volume-Opt=device=/,volume-opt=o=bind",
])
def test_a_volume_with_driver_options_is_refused(spec):
    assert asks("--mount", spec) == [
        f"'--mount {spec}' (a volume with driver options: it can bind any host folder)"]


@pytest.mark.parametrize("spec", [
    "type=bind,source=/srv/models,target=/models,readonly",
    '"type=bind","source=/srv/models","target=/models"',
    "type=volume,source=hf-cache,target=/root/.cache/huggingface",
    "type=tmpfs,target=/scratch,tmpfs-size=1g",
    "target=/anonymous",
])
def test_ordinary_mounts_still_pass(spec):
    assert asks("--mount", spec) == []
    assert asks(f"--mount={spec}") == []


@pytest.mark.parametrize("spec", ["type=image,source=alpine,target=/i", "type=npipe,src=x,dst=y"])
def test_another_mount_type_is_named(spec):
    assert asks("--mount", spec) == [f"'--mount {spec}' (type {spec[5:10]})"]


def test_the_refusal_is_one_line_naming_the_field_and_the_way_out():
    with pytest.raises(RecipeError) as caught:
        render(parse_recipe(recipe_data(["--mount", "Type=bind,Source=/,Target=/h"]), "t"))
    text = str(caught.value)
    assert text.startswith("recipe mounts: field 'container.extra': a mount of '/'")
    assert "--allow-host-access" in text and "\n" not in text


def test_allow_host_access_grants_it_and_names_it(capsys):
    spec = "type=volume,dst=/h,volume-opt=o=bind,volume-opt=device=/"
    render(parse_recipe(recipe_data(["--mount", spec]), "t"), allow_host_access=True)
    assert "a volume with driver options" in capsys.readouterr().err


def test_cli_refuses_the_quoted_bind_in_one_line(tmp_path, capsys, monkeypatch):
    own_user_folders(tmp_path, monkeypatch)
    path = tmp_path / "mounts.yaml"
    path.write_text(yaml.safe_dump(recipe_data(["--mount", '"type=bind","source=/",target=/h'])))
    out = tmp_path / "compose.yaml"
    code, err = run_cli(capsys, monkeypatch, "compose", "--recipe", str(path), "--out", str(out))
    assert code == RecipeError.exit_code
    line = one_error(err)
    assert "mounts.yaml: field 'container.extra': a mount of '/'" in line
    assert not out.exists()
