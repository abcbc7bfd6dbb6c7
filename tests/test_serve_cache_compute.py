"""The driver's compute cache per image: the size rule, the verify record read from the image's
label, the ``docker run`` line ``inv serve --dry-run`` prints (on the real engine, with a real
image relabelled the way a build adds its verify record), and a recipe's override."""

from __future__ import annotations

import json
import shlex
import uuid

import pytest

from edgevllm.common.labels import VERIFY
from edgevllm.containers.docker import BuildOptions, DockerEngine
from edgevllm.serve.cache.compute import (
    CEILING,
    FLOOR,
    GIB,
    MIB,
    cache_size,
    compute_cache,
    measured_ptx_bytes,
)
from edgevllm.serve.launch import serve
from edgevllm.serve.recipe.load import parse_recipe, render

SPARK_033_PTX = 716_242_914  # the stock vLLM 0.33.0 wheel on spark (tests/test_verify_firststart)


def recipe(**changes):
    data = {"name": "cc-test", "description": "d", "targets": ["spark"],
            "status": {"spark": "untested"}, "image": "edgevllm-test/absent:1", "model": "org/m",
            "serve": {"args": ["{{ model }}"]}, "container": {"gpus": "all"}}
    data.update(changes)
    return parse_recipe(data, "t")


def env_of(argv: list[str]) -> dict[str, str]:
    pairs = [argv[i + 1] for i, a in enumerate(argv) if a == "-e"]
    return dict(p.split("=", 1) for p in pairs if "=" in p)


def volumes_of(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == "-v"]


def label(ptx_bytes) -> dict[str, str]:
    return {VERIFY: json.dumps({"passed": True, "first_start": {"ptx_bytes": ptx_bytes}})}


def test_size_follows_the_measure_with_a_margin_floor_and_ceiling():
    assert cache_size(None) == CEILING == 4 * GIB  # unmeasured: the driver's maximum
    assert cache_size(0) == FLOOR == GIB
    assert cache_size(SPARK_033_PTX) == 1280 * MIB  # x1.5 = 1.07 GB, up to the next 256 MiB
    assert cache_size(10 * GIB) == CEILING


@pytest.mark.parametrize("labels,expected", [
    (label(1234), 1234), ({}, None), ({VERIFY: "not json"}, None), ({VERIFY: "[1]"}, None),
    (label(-5), None), (label("12"), None), (label(True), None),
    ({VERIFY: json.dumps({"skipped": True})}, None),
])
def test_the_measure_is_read_from_the_verify_label(labels, expected):
    assert measured_ptx_bytes(labels) == expected


def test_the_recipe_env_wins_and_no_entry_keeps_nothing():
    caches = {"compute": "/root/.nv/ComputeCache"}
    cache = compute_cache(caches, {"CUDA_CACHE_MAXSIZE": "536870912"}, label(10))
    assert cache.env == {"CUDA_CACHE_PATH": "/root/.nv/ComputeCache"}
    assert cache.size == "536870912" and "set by the recipe" in cache.describe()
    none = compute_cache({}, {}, label(10))
    assert none.env == {} and "not kept" in none.describe()


def test_dry_run_without_the_image_mounts_the_folder_and_sizes_for_the_maximum(capsys):
    argv = shlex.split(serve(render(recipe()), DockerEngine(), dry_run=True))
    assert env_of(argv)["CUDA_CACHE_PATH"] == "/root/.nv/ComputeCache"
    assert env_of(argv)["CUDA_CACHE_MAXSIZE"] == str(4 * GIB)
    assert "/var/cache/edgevllm/jit/IMAGE-ID/compute:/root/.nv/ComputeCache" in volumes_of(argv)
    assert "no verify record on the image" in capsys.readouterr().err


@pytest.fixture(scope="module")
def measured_image(engine, python_image_native, tmp_path_factory):
    """The test Python image with the verify label a build would add (the build's own relabel
    step: a config-only change)."""
    from edgevllm.builder.render import relabel_dockerfile

    tag = f"edgevllm-test/computecache:{uuid.uuid4().hex[:8]}"
    work = tmp_path_factory.mktemp("relabel")
    lines: list[str] = []
    code = engine.build(BuildOptions(context=work, dockerfile=relabel_dockerfile(), tags=[tag],
                                     labels=label(SPARK_033_PTX),
                                     build_args={"IMAGE": python_image_native}), lines.append)
    assert code == 0, "\n".join(lines[-20:])
    yield tag
    engine.remove_image(tag, force=True)


def test_dry_run_sizes_the_cache_from_the_image_label(engine, measured_image, capsys):
    rendered = render(recipe(image=measured_image))
    argv = shlex.split(serve(rendered, engine, dry_run=True))
    env = env_of(argv)
    assert env["CUDA_CACHE_MAXSIZE"] == str(1280 * MIB)
    folder = engine.image_id(measured_image).split(":")[1][:16]
    assert f"/var/cache/edgevllm/jit/{folder}/compute:/root/.nv/ComputeCache" in volumes_of(argv)
    assert f"{SPARK_033_PTX} bytes of PTX-only code measured by verify" in capsys.readouterr().err
    # A recipe overrides the size (its env) or drops the folder (launch.jit_caches: null).
    argv = shlex.split(serve(render(recipe(image=measured_image,
                                           env={"CUDA_CACHE_MAXSIZE": "3000000000"})),
                             engine, dry_run=True))
    assert [e for e in argv if e.startswith("CUDA_CACHE_MAXSIZE=")] == [
        "CUDA_CACHE_MAXSIZE=3000000000"]
    argv = shlex.split(serve(render(recipe(image=measured_image,
                                           launch={"jit_caches": {"compute": None}})),
                             engine, dry_run=True))
    assert not any(e.startswith("CUDA_CACHE_") for e in argv)
    assert not any(v.endswith(":/root/.nv/ComputeCache") for v in volumes_of(argv))


def test_a_cluster_sizes_every_node_from_the_head_image(engine, measured_image):
    from edgevllm.serve.cluster import Cluster, ClusterOptions, Node

    rendered = render(parse_recipe({
        "name": "cc-cluster", "description": "d", "targets": ["spark"],
        "status": {"spark": "untested"}, "image": measured_image, "model": "org/m",
        "serve": {"args": ["{{ model }}"]}, "container": {"network": "host", "gpus": "all"},
        "topology": {"mode": "torch", "nodes": 2, "tensor_parallel": 1, "pipeline_parallel": 2}},
        "t"))
    nodes = [Node(f"n{i}", engine, f"10.0.0.{i + 1}") for i in range(2)]
    lines = Cluster(rendered, nodes, ClusterOptions(name="cc", network="host")).dry_run()
    runs = [shlex.split(line) for line in lines if " run -d " in line]
    assert len(runs) == 2
    for argv in runs:
        assert env_of(argv)["CUDA_CACHE_MAXSIZE"] == str(1280 * MIB)
