"""The launch facts of ``serve/launch.py`` without a Docker engine: the health command run for real
against a server on 127.0.0.1, the in-container entry run as a local process (the GPU's total
memory stood in by ``EDGEVLLM_DEVICE_MEMORY_BYTES``, the only mock: there is no GPU here), the
``docker run`` options a recipe becomes (env order, ports, labels, secrets by name), ``~`` volumes
on a remote engine, the memory budget's reading of a command line, and a pinned digest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from edgevllm.common.errors import RecipeError
from edgevllm.containers.docker import DockerEngine
from edgevllm.serve.launch import (
    LABEL_MEMORY,
    LABEL_RECIPE,
    UNKNOWN_IMAGE_ID,
    check_pinned_digest,
    container_env,
    entry_command,
    health_command,
    jit_folder,
    memory_budget_gib,
    require_image,
    run_options,
    serve,
)
from edgevllm.serve.recipe.load import parse_recipe, render
from support.localhttp import serve_pages

ECHO = ["python3", "-c", "import json, sys; print(json.dumps(sys.argv[1:]))"]
REMOTE = DockerEngine.named("ssh://edgevllm-test@192.0.2.1")  # never reached: options only


def recipe(**changes):
    data = {"name": "launch-options", "description": "d", "targets": ["spark"],
            "status": {"spark": "untested"}, "image": "edgevllm-test/absent:1", "model": "org/m",
            "serve": {"args": ["{{ model }}"]}, "container": {"gpus": "all"}}
    data.update(changes)
    return parse_recipe(data, "t")


# -- the health command, run -----------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/health", "health", "/v1/models"])
def test_health_command_passes_on_200_and_fails_on_404(path):
    with serve_pages({"/" + path.lstrip("/"): b"ok"}) as base:
        port = int(base.rsplit(":", 1)[1])
        ok = subprocess.run(health_command(port, path), capture_output=True, timeout=60)
        missing = subprocess.run(health_command(port, "/absent"), capture_output=True,
                                 timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert missing.returncode != 0 and b"404" in missing.stderr


def test_health_command_fails_when_nothing_listens():
    with serve_pages({}) as base:
        port = int(base.rsplit(":", 1)[1])
    proc = subprocess.run(health_command(port, "/health"), capture_output=True, timeout=60)
    assert proc.returncode != 0


# -- the in-container entry, as a local process ----------------------------------------------------
def run_entry(rendered, command: list[str], device_bytes: int | None = 128 * 10**9,
              path: str | None = None, **flags) -> subprocess.CompletedProcess:
    env = {"PATH": path if path is not None else os.environ["PATH"]}
    if device_bytes is not None:
        env["EDGEVLLM_DEVICE_MEMORY_BYTES"] = str(device_bytes)
    argv = entry_command(rendered, command, **flags)
    argv[0] = sys.executable  # the image's python3; here this interpreter
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)


def test_entry_replaces_every_utilization_flag_with_the_budgets():
    rendered = render(recipe(gpu_memory_gb=40))
    proc = run_entry(rendered, ECHO + ["--gpu-memory-utilization", "0.9", "x",
                                       "--gpu-memory-utilization=0.7"])
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == ["x", "--gpu-memory-utilization", "0.335"]
    assert "40.0 GiB of 119.2 GiB -> --gpu-memory-utilization 0.335" in proc.stderr


def test_entry_refuses_a_budget_over_the_device_in_one_line():
    proc = run_entry(render(recipe(gpu_memory_gb=500)), ECHO)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "edgevllm: --gpu-memory-gb: 500.0 GiB is more than the device's 119.2 GiB"]


def test_entry_without_earlyoom_on_path_is_exit_127_naming_the_mod(tmp_path):
    rendered = render(recipe())
    rendered.earlyoom = True
    proc = run_entry(rendered, ECHO, path=str(tmp_path))
    assert proc.returncode == 127
    assert "inv build --mod earlyoom" in proc.stderr and proc.stdout == ""


def test_entry_starts_earlyoom_with_the_targets_flags_then_the_server(tmp_path):
    # a stand-in earlyoom (a script on PATH) records the flags it was started with
    record = tmp_path / "earlyoom.args"
    fake = tmp_path / "earlyoom"
    fake.write_text(f'#!/bin/sh\necho "$@" > {record}\n')
    fake.chmod(0o755)
    rendered = render(recipe())
    rendered.earlyoom = True
    proc = run_entry(rendered, ECHO + ["served"], path=f"{tmp_path}:{os.environ['PATH']}")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == ["served"]
    for _ in range(200):  # earlyoom runs beside the server: wait for its line
        if record.is_file() and record.read_text():
            break
        time.sleep(0.05)
    assert record.read_text().split() == list(rendered.launch.earlyoom_args)


@pytest.mark.parametrize("server, earlyoom, keys", [
    (True, True, {"gpu_memory_gib", "earlyoom"}),
    (False, True, {"earlyoom"}),  # a ray start line: earlyoom only
    (True, False, {"gpu_memory_gib"}),  # the server exec'd beside ray: the fraction only
])
def test_entry_config_holds_what_the_process_needs(server, earlyoom, keys):
    rendered = render(recipe(gpu_memory_gb=10))
    rendered.earlyoom = True
    argv = entry_command(rendered, ECHO, server=server, earlyoom=earlyoom)
    assert set(json.loads(argv[3])) == keys and argv[4:] == ECHO


def test_no_budget_and_no_earlyoom_leave_the_command_alone():
    rendered = render(recipe())
    assert entry_command(rendered) == rendered.command
    assert entry_command(rendered, ECHO, server=False) == ECHO


# -- docker run options ----------------------------------------------------------------------------
def test_env_order_is_launch_then_recipe_then_caller(monkeypatch):
    rendered = render(recipe(env={"PYTORCH_CUDA_ALLOC_CONF": "recipe", "OWN": "1"}))
    env = container_env(rendered, {"OWN": "caller"})
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "recipe" and env["OWN"] == "caller"
    assert env["HF_HOME"] == rendered.launch.hf_home


def test_secrets_travel_by_name_only(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value_never_in_argv")
    options = run_options(render(recipe()), DockerEngine(), name="n")
    assert options.env_names == ["HF_TOKEN"] and "HF_TOKEN" not in options.env
    assert "hf_secret_value_never_in_argv" not in " ".join(options.argv())
    assert "HF_TOKEN" in options.argv()


def test_host_network_publishes_no_ports():
    host = run_options(render(recipe(container={"gpus": "all", "network": "host"}),
                              allow_host_access=True), DockerEngine(), name="n")
    assert host.network == "host" and host.ports == []
    bridge = run_options(render(recipe(), {"port": 8111}), DockerEngine(), name="n")
    assert bridge.ports == ["8111:8111"]
    assert run_options(render(recipe()), DockerEngine(), name="n", ports=False).ports == []


def test_labels_carry_the_recipe_and_its_budget_and_callers_win():
    options = run_options(render(recipe(gpu_memory_gb=12.5)), DockerEngine(), name="n",
                          labels={"extra": "1"})
    assert options.labels == {LABEL_RECIPE: "launch-options", LABEL_MEMORY: "12.5", "extra": "1"}
    no_budget = run_options(render(recipe(serve={"command": ["python3"], "args": []})),
                            DockerEngine(), name="n")
    assert LABEL_MEMORY not in no_budget.labels


def test_health_flags_only_when_asked():
    rendered = render(recipe(health={"retries": 9}))
    with_check = run_options(rendered, DockerEngine(), name="n").extra
    assert with_check[with_check.index("--health-retries") + 1] == "9"
    assert "--health-cmd" not in run_options(rendered, DockerEngine(), name="n",
                                             healthcheck=False).extra


def test_restart_and_entrypoint_given_by_the_caller_win():
    options = run_options(render(recipe(restart="always")), DockerEngine(), name="n",
                          restart="no", entrypoint="/bin/sh")
    assert (options.restart, options.entrypoint) == ("no", "/bin/sh")
    default = run_options(render(recipe(restart="always")), DockerEngine(), name="n")
    assert (default.restart, default.entrypoint) == ("always", "")


def test_jit_folder_is_per_image_or_the_placeholder():
    assert jit_folder(None) == UNKNOWN_IMAGE_ID
    assert jit_folder("sha256:" + "ab" * 32) == "ab" * 8
    options = run_options(render(recipe()), DockerEngine(), name="n",
                          image_id="sha256:" + "cd" * 32)
    assert any(f"/{'cd' * 8}/" in v for v in options.volumes)


def test_home_volume_is_expanded_for_a_local_engine(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    rendered = render(recipe(container={"gpus": "all", "volumes": ["~/models:/models:ro"]}))
    volumes = run_options(rendered, DockerEngine(), name="n").volumes
    assert f"{tmp_path}/models:/models:ro" in volumes


def test_home_volume_on_a_remote_engine_is_one_line_naming_the_volume():
    rendered = render(recipe(container={"gpus": "all", "volumes": ["~/models:/models"]}))
    with pytest.raises(RecipeError) as caught:
        run_options(rendered, REMOTE, name="n")
    text = str(caught.value)
    assert "'~/models:/models'" in text and "absolute path" in text and "\n" not in text


def test_absolute_volume_on_a_remote_engine_is_kept():
    rendered = render(recipe(container={"gpus": "all", "volumes": ["/srv/models:/models"]}))
    assert "/srv/models:/models" in run_options(rendered, REMOTE, name="n").volumes


# -- memory budget read from the command line ------------------------------------------------------
@pytest.mark.parametrize("args, budget", [
    (["m", "--gpu-memory-utilization", "0.25"], 29.8),
    (["m", "--gpu-memory-utilization=0.5"], 59.5),
    (["m"], round(0.9 * 119, 1)),  # vLLM's own default
    (["m", "--gpu-memory-utilization", "lots"], round(0.9 * 119, 1)),
    (["m", "--gpu-memory-utilization"], round(0.9 * 119, 1)),  # no value: vLLM refuses it
])
def test_budget_reads_the_fraction_vllm_would(args, budget):
    assert memory_budget_gib(render(recipe(serve={"args": args}))) == budget


def test_a_command_that_is_not_vllm_serve_has_no_budget():
    assert memory_budget_gib(render(recipe(serve={"command": ["python3", "-m", "x"],
                                                  "args": []}))) is None
    assert memory_budget_gib(render(recipe(serve={"command": ["python3", "-m", "x"], "args": []},
                                           gpu_memory_gb=8))) == 8


def test_a_target_without_device_memory_has_no_budget():
    rendered = render(recipe(targets=["elsewhere"], status={"elsewhere": "untested"}))
    assert rendered.launch.device_memory_gib is None
    assert memory_budget_gib(rendered) is None


# -- the image -------------------------------------------------------------------------------------
DIGEST = "sha256:" + "1" * 64


@pytest.mark.parametrize("inspect", [
    {"Id": DIGEST, "RepoDigests": []},
    {"Id": "sha256:" + "2" * 64, "RepoDigests": [f"example.org/vllm@{DIGEST}"]},
])
def test_pinned_digest_is_found_by_id_or_repo_digest(inspect):
    check_pinned_digest(f"example.org/vllm@{DIGEST}", inspect, "local")


def test_pinned_digest_not_carried_is_refused_in_one_line():
    with pytest.raises(RecipeError) as caught:
        check_pinned_digest(f"example.org/vllm@{DIGEST}",
                            {"Id": "sha256:" + "2" * 64,
                             "RepoDigests": ["example.org/vllm@sha256:" + "3" * 64]}, "local")
    assert DIGEST in str(caught.value) and "pull the pinned image again" in str(caught.value)


def test_a_tag_is_not_checked_for_a_digest():
    check_pinned_digest("example.org/vllm:1", {"Id": "sha256:" + "2" * 64}, "local")


def test_no_image_names_the_recipe_file_and_what_to_do():
    rendered = render(recipe())
    rendered.image = None
    with pytest.raises(RecipeError, match=r"recipe launch-options: no 'image' to run: build it"):
        require_image(rendered)


def test_dry_run_without_an_image_says_what_it_is_built_from():
    rendered = render(recipe(image=None, build={"spec": "specs/x.yaml"}))
    line = serve(rendered, DockerEngine(), dry_run=True)
    assert "'<image built from specs/x.yaml>'" in line
