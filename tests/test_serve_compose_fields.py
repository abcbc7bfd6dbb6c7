"""Each field of a recipe's Compose file (``serve/compose.py``) as the real ``docker compose
config`` reads it: ulimits (``unlimited`` included), GPU requests (a count, ``all``, device ids),
the entry wrapper's command, host networking, entrypoint, the project name, the volumes it keeps
and those it leaves to ``inv serve``; and bad input (a GPU request or a launch override Compose
or the target cannot take) as one line through the real ``inv compose``, nothing written."""

from __future__ import annotations

import hashlib
import json

import pytest
import yaml

from edgevllm.common.errors import RecipeError
from edgevllm.serve.compose import compose_document, write_compose
from edgevllm.serve.launch import entry_command
from edgevllm.serve.recipe.load import parse_recipe, render
from support.compose import compose_config
from support.inprocess import one_error, own_user_folders, run_cli


def recipe(name: str = "compose-fields", **changes):
    data = {"name": name, "description": "d", "targets": ["spark"],
            "status": {"spark": "untested"}, "image": "edgevllm-test/absent:1", "model": "org/m",
            "serve": {"args": ["{{ model }}"]}, "container": {"gpus": "all"}}
    data.update(changes)
    return parse_recipe(data, "t")


def resolved(tmp_path, rendered) -> dict:
    """The one service of ``rendered``'s Compose file, as Compose itself resolves it."""
    document = compose_config(write_compose(rendered, tmp_path / "compose.yaml"))
    (service,) = document["services"].values()
    return service


def test_unlimited_ulimits_are_what_compose_calls_unlimited(tmp_path):
    # --ulimit memlock=unlimited is docker's spelling; Compose's is -1 (int("unlimited") crashed).
    launch = {"ulimits": {"memlock": "unlimited", "nofile": "1024:unlimited", "nproc": "-1"}}
    service = resolved(tmp_path, render(recipe(launch=launch)))
    assert service["ulimits"]["memlock"] == -1
    assert service["ulimits"]["nofile"] == {"soft": 1024, "hard": -1}
    assert service["ulimits"]["nproc"] == -1


def test_soft_and_hard_limits_keep_their_order(tmp_path):
    service = resolved(tmp_path, render(recipe(launch={"ulimits": {"nofile": "1024:4096"}})))
    assert service["ulimits"]["nofile"] == {"soft": 1024, "hard": 4096}


@pytest.mark.parametrize("gpus, request_", [
    ("all", {"count": -1}),  # Compose resolves "all" to -1
    ("2", {"count": 2}),
    ("device=0,1", {"device_ids": ["0", "1"]}),
    ("device=GPU-3a2b", {"device_ids": ["GPU-3a2b"]}),
    ('"device=2,3"', {"device_ids": ["2", "3"]}),  # quoted, as docker's docs write a list
])
def test_gpu_request_is_one_compose_accepts(tmp_path, gpus, request_):
    # docker run --gpus device=0,1 was written as count: "device=0,1", which Compose refuses.
    service = resolved(tmp_path, render(recipe(container={"gpus": gpus})))
    (device,) = service["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    assert {key: device[key] for key in request_} == request_


@pytest.mark.parametrize("gpus", ["capabilities=compute", "device=", "device=0,,1"])
def test_gpu_request_without_a_compose_form_is_one_line(gpus):
    with pytest.raises(RecipeError) as caught:
        compose_document(render(recipe(container={"gpus": gpus})))
    text = str(caught.value)
    assert "container.gpus" in text and gpus in text and "\n" not in text


def test_no_gpus_means_no_device_request(tmp_path):
    service = resolved(tmp_path, render(recipe(container={"gpus": None})))
    assert "deploy" not in service


def test_entry_wrapper_survives_compose_interpolation(tmp_path):
    # --gpu-memory-gb wraps the command in python3 -c <inimage_entry.py> <config>: every byte of
    # that source must reach the container as inv serve passes it.
    rendered = render(recipe(gpu_memory_gb=24))
    service = resolved(tmp_path, rendered)
    assert service["command"] == entry_command(rendered)
    assert service["command"][:2] == ["python3", "-c"]
    assert json.loads(service["command"][3]) == {"gpu_memory_gib": 24}


def test_host_network_drops_ports_and_bridge_keeps_them(tmp_path):
    host = resolved(tmp_path, render(recipe(container={"gpus": "all", "network": "host"}),
                                     allow_host_access=True))
    assert host["network_mode"] == "host" and "ports" not in host
    bridge = resolved(tmp_path, render(recipe(), {"port": 8123}))
    assert [(p["published"], p["target"]) for p in bridge["ports"]] == [("8123", 8123)]


@pytest.mark.parametrize("entrypoint, expected", [("", []), ("/bin/sh", ["/bin/sh"])])
def test_entrypoint_is_cleared_or_kept(tmp_path, entrypoint, expected):
    service = resolved(tmp_path, render(recipe(container={"gpus": "all",
                                                          "entrypoint": entrypoint})))
    assert service.get("entrypoint", []) == expected


def test_no_entrypoint_keeps_the_images(tmp_path):
    document = compose_document(render(recipe(container={"gpus": "all", "entrypoint": None})))
    (service,) = document["services"].values()
    assert "entrypoint" not in service


def test_project_and_service_names_are_names_compose_takes(tmp_path):
    rendered = render(recipe(name="qwen3.5_fp8"))
    document = compose_config(write_compose(rendered, tmp_path / "compose.yaml"))
    assert document["name"] == "edgevllm-qwen3-5-fp8"
    assert list(document["services"]) == ["qwen3-5_fp8"]
    assert document["services"]["qwen3-5_fp8"]["container_name"] == "edgevllm-qwen3.5_fp8"


def test_jit_cache_folders_are_left_to_serve_and_files_are_read_only(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a recipe given as data carries files beside the working folder
    carried = tmp_path / "template.jinja"
    carried.write_text("{{ messages }}")
    digest = hashlib.sha256(carried.read_bytes()).hexdigest()
    rendered = render(recipe(files=[{"path": "template.jinja", "sha256": digest}]))
    root = rendered.launch.jit_cache_root.rstrip("/")
    assert rendered.launch.jit_caches, "spark has JIT cache folders: the test needs one"
    text = (write_compose(rendered, tmp_path / "c.yaml")).read_text()
    assert root + "/" not in text
    service = resolved(tmp_path, rendered)
    mounts = {v["target"]: v for v in service["volumes"]}
    assert mounts["/edgevllm/files/template.jinja"]["read_only"] is True
    assert mounts["/edgevllm/files/template.jinja"]["source"] == str(carried)


def test_extra_docker_flags_are_named_and_left_out(tmp_path, capsys):
    rendered = render(recipe(container={"gpus": "all", "extra": ["--init"]}))
    document = compose_document(rendered)
    assert "--init" not in json.dumps(document)
    assert "--init" in capsys.readouterr().err


def test_health_check_and_restart_policy_are_the_recipes(tmp_path):
    health = {"path": "/v1/models", "interval": "5s", "timeout": "2s", "retries": 7,
              "start_period": "1m"}
    service = resolved(tmp_path, render(recipe(health=health, restart="on-failure:3"),
                                        {"port": 8200}))
    check = service["healthcheck"]
    assert check["test"][0] == "CMD" and "http://localhost:8200/v1/models" in check["test"][-1]
    assert (check["interval"], check["timeout"], check["retries"]) == ("5s", "2s", 7)
    assert check["start_period"] == "1m0s"
    assert service["restart"] == "on-failure:3"


def write_recipe(tmp_path, **changes) -> str:
    data = {"name": "compose-cli", "description": "d", "targets": ["spark"],
            "status": {"spark": "untested"}, "image": "edgevllm-test/absent:1", "model": "org/m",
            "container": {"gpus": "all"}}
    data.update(changes)
    path = tmp_path / "compose-cli.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize("changes, names", [
    ({"launch": {"ulimits": {"nofile": "lots"}}}, "ulimits.nofile"),
    ({"launch": {"env": {"BAD NAME": "1"}}}, "BAD NAME"),
    ({"container": {"gpus": "capabilities=utility"}}, "container.gpus"),
])
def test_cli_refuses_what_compose_or_the_target_cannot_take(tmp_path, capsys, monkeypatch,
                                                             changes, names):
    # A launch override outside the target's grammar was a pydantic traceback.
    own_user_folders(tmp_path, monkeypatch)
    path = write_recipe(tmp_path, **changes)
    out = tmp_path / "compose.yaml"
    code, err = run_cli(capsys, monkeypatch, "compose", "--recipe", path, "--out", str(out))
    line = one_error(err)
    assert code == RecipeError.exit_code, err
    assert names in line and "compose-cli.yaml" in line
    assert not out.exists()


def test_cli_writes_a_file_compose_accepts(tmp_path, capsys, monkeypatch):
    own_user_folders(tmp_path, monkeypatch)
    path = write_recipe(tmp_path, launch={"ulimits": {"memlock": "unlimited"}})
    out = tmp_path / "compose.yaml"
    code, err = run_cli(capsys, monkeypatch, "compose", "--recipe", path, "--out", str(out))
    assert code == 0, err
    assert compose_config(out)["services"]["compose-cli"]["ulimits"]["memlock"] == -1
