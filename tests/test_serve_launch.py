"""Launch defaults from target data, ``inv serve -- ARGS``, ``--help``, the GiB → fraction entry
(run for real in a container; ``EDGEVLLM_DEVICE_MEMORY_BYTES`` stands in for the GPU's total
memory, the only mocked part), ``--earlyoom`` without earlyoom, and the memory budget that several
models on one box share (real labelled containers on the real engine)."""

from __future__ import annotations

import json
import os
import shlex

import pytest

from edgevllm.common.errors import RecipeError
from edgevllm.common.paths import host_hf_cache
from edgevllm.containers.docker import DockerEngine, RunOptions
from edgevllm.serve.inimage_entry import fraction, with_fraction
from edgevllm.serve.launch import (
    LABEL_MEMORY,
    check_memory_fits,
    entry_command,
    memory_budget_gib,
    serve,
)
from edgevllm.serve.recipe.load import parse_recipe, render
from edgevllm.specs.targets import load_target

GIB = 2**30


def recipe(**changes):
    data = {"name": "launch-test", "description": "d", "targets": ["spark"],
            "status": {"spark": "untested"}, "image": "edgevllm-test/absent:1", "model": "org/m",
            "serve": {"args": ["{{ model }}", "--gpu-memory-utilization=0.5"]},
            "container": {"gpus": "all"}}
    data.update(changes)
    return parse_recipe(data, "t")


def dry_argv(rendered) -> list[str]:
    return shlex.split(serve(rendered, DockerEngine(), dry_run=True))


def pairs(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_target_launch_defaults_are_in_the_dry_run():
    argv = dry_argv(render(recipe()))
    spark = load_target("spark").launch
    assert pairs(argv, "--ulimit") == ["nofile=1048576:1048576"]
    env = pairs(argv, "-e")
    for key, value in spark.env.items():
        assert f"{key}={value}" in env
    assert "HF_HOME=/root/.cache/huggingface" in env
    # The engine has no such image here: the per-image folder shows as IMAGE-ID.
    volumes = pairs(argv, "-v")
    for name, path in spark.jit_caches.items():
        assert f"/var/cache/edgevllm/jit/IMAGE-ID/{name}:{path}" in volumes
    assert any(v.endswith(":/root/.cache/huggingface") for v in volumes)


def test_host_hf_home_is_the_folder_serve_mounts(tmp_path, monkeypatch):
    """inv model-fetch downloads into $HF_HOME; inv serve mounts that same folder."""
    home = os.path.expanduser("~")
    volumes = pairs(dry_argv(render(recipe())), "-v")
    assert f"{home}/.cache/huggingface:/root/.cache/huggingface" in volumes
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert host_hf_cache() == tmp_path / "hf"
    volumes = pairs(dry_argv(render(recipe())), "-v")
    assert f"{tmp_path}/hf:/root/.cache/huggingface" in volumes
    # A recipe's own default gives way to HF_HOME; --set hf_cache= wins over both.
    own = recipe(defaults={"hf_cache": "/srv/models"})
    assert f"{tmp_path}/hf:/root/.cache/huggingface" in pairs(dry_argv(render(own)), "-v")
    volumes = pairs(dry_argv(render(own, {"hf_cache": "/data/hf"})), "-v")
    assert "/data/hf:/root/.cache/huggingface" in volumes


def test_recipe_overrides_launch_defaults():
    argv = dry_argv(render(recipe(launch={
        "ulimits": {"nofile": "65536:65536"}, "env": {"NCCL_IGNORE_CPU_AFFINITY": None},
        "jit_caches": {"tilelang": None}, "jit_cache_root": "/data/jit", "hf_home": ""})))
    assert pairs(argv, "--ulimit") == ["nofile=65536:65536"]
    env = pairs(argv, "-e")
    assert not any(e.startswith(("NCCL_IGNORE_CPU_AFFINITY", "HF_HOME")) for e in env)
    volumes = pairs(argv, "-v")
    assert "/data/jit/IMAGE-ID/vllm:/root/.cache/vllm" in volumes
    assert not any("tilelang" in v for v in volumes)
    # The recipe's own env wins over a launch default.
    argv = dry_argv(render(recipe(env={"PYTORCH_CUDA_ALLOC_CONF": "garbage_collection:0.8"})))
    assert pairs(argv, "-e").count("PYTORCH_CUDA_ALLOC_CONF=garbage_collection:0.8") == 1


def test_jit_folder_is_per_image_id(engine, python_image_native):
    image_id = engine.image_id(python_image_native)
    argv = dry_argv(render(recipe(image=python_image_native)))
    folder = image_id.split(":")[1][:16]
    assert f"/var/cache/edgevllm/jit/{folder}/vllm:/root/.cache/vllm" in pairs(argv, "-v")


def test_cli_appends_words_after_double_dash_exactly(cli):
    code, out, err = cli("serve", "qwen3-8b-nvfp4", "--target", "spark", "--dry-run", "--",
                         "--speculative-config", '{"method": "mtp", "k": 2}', "--enforce-eager")
    assert code == 0, err
    argv = shlex.split(out.strip())
    assert argv[-3:] == ["--speculative-config", '{"method": "mtp", "k": 2}', "--enforce-eager"]


@pytest.mark.parametrize("args", [("serve", "--help"), ("serve", "qwen3-8b-nvfp4", "--help")])
def test_serve_help_works(cli, args):
    code, out, err = cli(*args)
    assert code == 0, err
    assert "serve [--options]" in out and "--gpu-memory-gb" in out and "error" not in err


def test_gib_to_fraction_arithmetic():
    assert fraction(40, 128 * 10**9) == 0.335  # 42.95e9 / 128e9 = 0.33554, rounded down
    assert fraction(64, 128 * GIB) == 0.5
    assert fraction(0.5, 128 * GIB) == 0.003
    with pytest.raises(ValueError, match="more than the device"):
        fraction(130, 128 * GIB)
    with pytest.raises(ValueError, match="less than 0.1%"):
        fraction(0.01, 128 * GIB)
    assert with_fraction(["vllm", "serve", "m", "--gpu-memory-utilization", "0.9", "-tp", "1",
                          "--gpu-memory-utilization=0.7"], 0.335) == [
        "vllm", "serve", "m", "-tp", "1", "--gpu-memory-utilization", "0.335"]


def run_entry(engine, image: str, config: dict, env: dict | None = None):
    rendered = render(recipe())
    command = ["python3", "-c", "import sys; print(sys.argv[1:])", "--gpu-memory-utilization",
               "0.9"]
    rendered.gpu_memory_gb = config.get("gpu_memory_gib")
    rendered.earlyoom = "earlyoom" in config
    argv = entry_command(rendered, command)
    assert json.loads(argv[3]) == config
    return engine.run(RunOptions(image=image, command=argv, remove=True, env=env or {},
                                 entrypoint=""), timeout=120)


def test_entry_turns_gib_into_fraction_inside_the_container(engine, python_image_native):
    proc = run_entry(engine, python_image_native, {"gpu_memory_gib": 40.0},
                     {"EDGEVLLM_DEVICE_MEMORY_BYTES": str(128 * 10**9)})
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode().strip() == "['--gpu-memory-utilization', '0.335']"
    assert "40.0 GiB of 119.2 GiB" in proc.stderr.decode()
    proc = run_entry(engine, python_image_native, {"gpu_memory_gib": 500.0},
                     {"EDGEVLLM_DEVICE_MEMORY_BYTES": str(128 * 10**9)})
    assert proc.returncode == 2 and "more than the device" in proc.stderr.decode()


def test_earlyoom_missing_from_the_image_is_a_clear_failure(engine, python_image_native):
    earlyoom_args = load_target("spark").launch.earlyoom_args
    proc = run_entry(engine, python_image_native, {"earlyoom": earlyoom_args})
    assert proc.returncode == 127
    assert "earlyoom is not installed in this image" in proc.stderr.decode()


def test_memory_budget_from_gib_fraction_or_vllm_default():
    assert memory_budget_gib(render(recipe())) == 59.5  # 0.5 × 119 GiB
    rendered = render(recipe(gpu_memory_gb=30))
    assert memory_budget_gib(rendered) == 30
    rendered = render(recipe(serve={"args": ["{{ model }}"]}))
    assert memory_budget_gib(rendered) == round(0.9 * 119, 1)
    argv = dry_argv(render(recipe()))
    assert f"{LABEL_MEMORY}=59.5" in pairs(argv, "--label")


def test_serve_refuses_a_recipe_that_does_not_fit_beside_running_ones(engine, python_image_native):
    names = ["edgevllm-test-budget-a", "edgevllm-test-budget-b"]
    for name in names:
        engine.remove_container(name)
    try:
        for name, gib in zip(names, ("50", "40"), strict=True):
            engine.start(RunOptions(image=python_image_native, name=name, command=["sleep", "300"],
                                    labels={"io.edgevllm.recipe": name, LABEL_MEMORY: gib}))
        check_memory_fits(render(recipe(gpu_memory_gb=29)), engine)  # 50 + 40 + 29 = 119 fits
        with pytest.raises(RecipeError) as info:
            check_memory_fits(render(recipe(gpu_memory_gb=30)), engine)
        message = str(info.value)
        assert "needs 30 GiB but only 29 of 119 GiB are free" in message
        assert f"{names[0]} (50 GiB)" in message and f"{names[1]} (40 GiB)" in message
    finally:
        for name in names:
            engine.remove_container(name)
