"""Solo serving: the dry-run command of every shipped recipe, secrets by name, and a real
container on the real engine started, checked healthy, listed, logged and stopped.

No GPU here: the real-engine test serves a small Python HTTP server (answering /health) from the
locally built Debian+Python test image in place of vLLM; everything around it (docker run argv,
labels, health check, stop/logs/status) is the code path a real recipe takes.
"""

from __future__ import annotations

import shlex

import pytest

from edgevllm.common.errors import RecipeError
from edgevllm.containers.docker import DockerEngine
from edgevllm.serve.cluster import Cluster, ClusterOptions, Node
from edgevllm.serve.launch import (
    LABEL_RECIPE,
    check_pinned_digest,
    resolve_image,
    serve,
    status,
    stop,
)
from edgevllm.serve.recipe.load import all_recipes, parse_recipe, render

SECRET = "hf_secret_value_must_not_leak"
STANDIN = (
    "import http.server as h, sys\n"
    "class H(h.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        self.send_response(200 if self.path == '/health' else 404); self.end_headers()\n"
    "print('stand-in server up', flush=True)\n"
    "h.HTTPServer(('', int(sys.argv[1])), H).serve_forever()\n"
)


def shipped(mode: str = "solo"):
    return [(loaded, target) for loaded in all_recipes() for target in loaded.recipe.targets
            if (loaded.recipe.topology.mode == "solo") == (mode == "solo")]


@pytest.mark.parametrize("loaded, target", shipped("solo"),
                         ids=lambda v: v if isinstance(v, str) else v.name)
def test_dry_run_of_every_shipped_recipe(loaded, target, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", SECRET)
    rendered = render(loaded, {"target": target})
    line = serve(rendered, DockerEngine(), dry_run=True)
    argv = shlex.split(line)
    assert argv[:5] == ["docker", "run", "-d", "--name", f"edgevllm-{loaded.name}"]
    assert rendered.image is not None
    image_at = argv.index(rendered.image)
    # Everything after the image is the serve command, one argv element per argument.
    assert argv[image_at + 1:] == rendered.command
    assert argv[image_at + 1:image_at + 4] == ["vllm", "serve", rendered.model]
    assert "--entrypoint" in argv and argv[argv.index("--entrypoint") + 1] == ""
    assert f"{LABEL_RECIPE}={loaded.name}" in argv
    assert ["-e", "HF_TOKEN"] == argv[argv.index("HF_TOKEN") - 1:argv.index("HF_TOKEN") + 1]
    assert SECRET not in line and "HF_TOKEN=" not in line
    assert "--restart" in argv and "--health-cmd" in argv
    runtime = argv[argv.index("--runtime") + 1] if "--runtime" in argv else None
    gpus = argv[argv.index("--gpus") + 1] if "--gpus" in argv else None
    assert runtime == "nvidia" or gpus == "all"
    for key, value in rendered.env.items():
        assert f"{key}={value}" in argv


@pytest.mark.parametrize("loaded, target", shipped("cluster"),
                         ids=lambda v: v if isinstance(v, str) else v.name)
def test_dry_run_of_every_shipped_cluster_recipe(loaded, target, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", SECRET)
    rendered = render(loaded, {"target": target})
    count = rendered.topology.nodes
    nodes = [Node(f"n{i}", DockerEngine(host=f"ssh://me@node{i}"), f"10.1.0.{i + 1}")
             for i in range(count)]
    lines = Cluster(rendered, nodes, ClusterOptions(name=loaded.name)).dry_run()
    text = "\n".join(lines)
    assert SECRET not in text and "HF_TOKEN=" not in text
    runs = [shlex.split(line) for line in lines if " run -d " in line]
    assert len(runs) == count
    for argv in runs:
        assert rendered.image in argv and "--restart" in argv
        assert argv[argv.index("--restart") + 1] == "no"
    tail = shlex.split(lines[-1])
    assert tail[tail.index(rendered.model) - 2:tail.index(rendered.model)] == ["vllm", "serve"]
    if rendered.topology.mode == "ray":
        assert tail[-2:] == ["--distributed-executor-backend", "ray"]
        assert f"--tensor-parallel-size={rendered.topology.tensor_parallel}" in tail


def test_dry_run_keeps_json_argument_whole():
    loaded = next(r for r in all_recipes() if r.name == "nemotron-3-super-nvfp4-mtp-thor")
    argv = shlex.split(serve(render(loaded, {"mtp_tokens": 3}), DockerEngine(), dry_run=True))
    spec = argv[argv.index("--speculative-config") + 1]
    assert spec == '{"method":"mtp","num_speculative_tokens":3,"moe_backend":"triton"}'


def test_cli_dry_run_prints_the_command(cli):
    code, out, err = cli("serve", "--recipe", "qwen3-8b-nvfp4", "--target", "spark",
                         "--set", "port=9000", "--dry-run")
    assert code == 0, err
    argv = shlex.split(out.strip())
    assert "edgevllm/vllm:spark" in argv and "9000:9000" in argv and "--port=9000" in argv


def test_cluster_recipe_without_nodes_is_refused():
    recipe = parse_recipe({"name": "c", "description": "d", "targets": ["spark"],
                           "status": {"spark": "untested"}, "image": "x/y:z", "model": "m",
                           "topology": {"mode": "ray", "nodes": 2}}, "t")
    with pytest.raises(RecipeError, match="--nodes"):
        serve(render(recipe), DockerEngine(), dry_run=True)


def test_torch_cluster_dry_run_starts_workers_first_and_rank0_last():
    recipe = parse_recipe({
        "name": "tc", "description": "d", "targets": ["spark"], "status": {"spark": "untested"},
        "image": "edgevllm/vllm:spark", "model": "org/m",
        "serve": {"args": ["{{ model }}", "--tensor-parallel-size={{ tensor_parallel }}"]},
        "container": {"network": "host", "gpus": "all"},
        "topology": {"mode": "torch", "nodes": 3, "tensor_parallel": 1, "pipeline_parallel": 3}},
        "t")
    nodes = [Node(f"n{i}", DockerEngine(host=f"ssh://u@spark{i}"), f"10.0.0.{i + 1}",
                  {"NCCL_SOCKET_IFNAME": "enp1s0f0np0"}) for i in range(3)]
    rendered = render(recipe, {"hf_cache": "/data/hf"})
    lines = Cluster(rendered, nodes, ClusterOptions(name="tc")).dry_run()
    assert [shlex.split(line)[2] for line in lines] == ["ssh://u@spark1", "ssh://u@spark2",
                                                   "ssh://u@spark0"]
    for line, rank in zip(lines, (1, 2, 0), strict=True):
        argv = shlex.split(line)
        tail = argv[argv.index("edgevllm/vllm:spark") + 1:]
        assert tail[tail.index("--node-rank") + 1] == str(rank)
        assert tail[tail.index("--master-addr") + 1] == "10.0.0.1"
        assert ("--headless" in tail) == (rank != 0)
        assert f"VLLM_HOST_IP=10.0.0.{(rank % 3) + 1}" in argv
        assert "NCCL_SOCKET_IFNAME=enp1s0f0np0" in argv and "--network" in argv


def test_ray_cluster_dry_run_starts_server_on_head_last():
    recipe = parse_recipe({
        "name": "rc", "description": "d", "targets": ["spark"], "status": {"spark": "untested"},
        "image": "edgevllm/vllm:spark", "model": "org/m",
        "serve": {"args": ["{{ model }}", "--tensor-parallel-size={{ tensor_parallel }}"]},
        "topology": {"mode": "ray", "nodes": 2, "tensor_parallel": 2}}, "t")
    engine = DockerEngine()
    lines = Cluster(render(recipe), [Node("a", engine), Node("b", engine)],
                    ClusterOptions(name="rc")).dry_run()
    assert "network create" in lines[0]
    assert "ray start --head" in lines[1]
    worker = next(line for line in lines if "edgevllm-rc-b " in line)
    assert "--address=edgevllm-rc-a:6379" in worker
    last = shlex.split(lines[-1])
    assert last[1] == "exec" and last[-2:] == ["--distributed-executor-backend", "ray"]
    assert last[last.index("edgevllm-serve") + 1:last.index("edgevllm-serve") + 3] == ["vllm",
                                                                                         "serve"]


def pairs(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def two_node_plan(mode: str, **options) -> list[list[str]]:
    recipe = parse_recipe({
        "name": "rd", "description": "d", "targets": ["spark"], "status": {"spark": "untested"},
        "image": "edgevllm/vllm:spark", "model": "org/m", "serve": {"args": ["{{ model }}"]},
        "container": {"network": "host", "gpus": "all"},
        "topology": {"mode": mode, "nodes": 2, "tensor_parallel": 2}}, "t")
    nodes = [Node(f"n{i}", DockerEngine(host=f"ssh://u@spark{i}"), f"10.0.0.{i + 1}")
             for i in range(2)]
    plan = Cluster(render(recipe, {"hf_cache": "/data/hf"}), nodes,
                   ClusterOptions(name="rd", iface="enp1s0f1np1", **options))
    return [shlex.split(line) for line in plan.dry_run() if " run " in line]


def test_cluster_nodes_reach_the_rdma_nics_unless_no_rdma():
    for argv in two_node_plan("torch", ib_hca="rocep1s0f1"):
        for flag in ("--device=/dev/infiniband", "--cap-add=IPC_LOCK"):
            assert flag in argv
        assert "memlock=-1" in pairs(argv, "--ulimit") and "--privileged" not in argv
        assert {"NCCL_IB_DISABLE=0", "NCCL_IB_HCA=rocep1s0f1"} <= set(pairs(argv, "-e"))
    for argv in two_node_plan("torch", ib_hca="rocep1s0f1", rdma=False):  # --no-rdma
        assert not any(a.startswith(("--device", "--cap-add")) for a in argv)
        assert "memlock=-1" not in pairs(argv, "--ulimit")
        env = pairs(argv, "-e")
        assert "NCCL_IB_DISABLE=1" in env and not any(e.startswith("NCCL_IB_HCA") for e in env)


def test_ray_nodes_get_the_unified_memory_settings():
    for argv in two_node_plan("ray"):
        env = pairs(argv, "-e")
        assert {"RAY_memory_monitor_refresh_ms=0", "RAY_object_store_memory=1073741824"} <= \
            set(env)
        ray = argv[argv.index("ray"):]
        assert ray[:2] == ["ray", "start"] and "--object-store-memory=1073741824" in ray
    for argv in two_node_plan("torch"):
        assert not any(e.startswith("RAY_") for e in pairs(argv, "-e"))


def test_cli_no_rdma_dry_run(cli):
    code, out, err = cli("serve", "nemotron-3-super-nvfp4-2x-spark", "--nodes",
                         "ssh://u@a,ssh://u@b", "--node-ips", "10.0.0.1,10.0.0.2", "--network",
                         "host", "--no-rdma", "--dry-run")
    assert code == 0, err
    assert "--device" not in out and "NCCL_IB_DISABLE=1" in out
    code, out, err = cli("serve", "nemotron-3-super-nvfp4-2x-spark", "--nodes",
                         "ssh://u@a,ssh://u@b", "--node-ips", "10.0.0.1,10.0.0.2", "--network",
                         "host", "--dry-run")
    assert code == 0, err
    assert out.count("--device=/dev/infiniband") == 2 and "--privileged" not in out


def standin_recipe(image: str, name: str):
    return parse_recipe({
        "name": name, "description": "stand-in for vLLM (no GPU in CI)", "targets": ["thor"],
        "status": {"thor": "untested"}, "image": image, "model": "stand-in",
        "defaults": {"port": 18123},
        "serve": {"command": ["python3", "-c", STANDIN, "{{ port }}"]},
        "env": {"JSON_LIKE": '{"method":"mtp"}'},
        "container": {"ports": [], "volumes": [], "shm_size": None, "ipc": None},
        "restart": "on-failure:2",
        "health": {"interval": "1s", "timeout": "5s", "retries": 30, "start_period": "1s"},
        # The CI engine runs in a sandbox that cannot raise nofile to the device default.
        "launch": {"ulimits": {"nofile": None}},
    }, "standin")


def test_real_solo_serve_status_logs_stop(engine, python_image_native, cli, monkeypatch):
    """Start a recipe container for real; health, status, logs, stop; the secret stays out."""
    name = "edgevllm-test-recipes-solo"
    monkeypatch.setenv("HF_TOKEN", SECRET)
    rendered = render(standin_recipe(python_image_native, name))
    stop_quietly(engine, name)
    try:
        container = serve(rendered, engine, wait_s=120)
        assert container == f"edgevllm-{name}"
        info = engine.container_inspect(container)
        assert info["State"]["Health"]["Status"] == "healthy"
        assert info["HostConfig"]["RestartPolicy"] == {"Name": "on-failure", "MaximumRetryCount": 2}
        assert f"HF_TOKEN={SECRET}" in info["Config"]["Env"]  # passed by name from our env...
        assert SECRET not in " ".join(info["Args"]) + str(info["Config"]["Labels"])  # ...only
        rows = [r for r in status(engine) if r["recipe"] == name]
        assert rows and rows[0]["health"] == "healthy" and rows[0]["state"] == "running"
        with pytest.raises(RecipeError, match="already exists"):
            serve(rendered, engine)
        code, out, err = cli("logs", "--recipe", name)
        assert code == 0 and "stand-in server up" in out, err
        code, out, err = cli("status", "--as-json")
        assert code == 0 and name in out
    finally:
        stop_quietly(engine, name)
    assert engine.container_inspect(f"edgevllm-{name}") is None


def test_stop_without_containers_is_an_error(engine):
    with pytest.raises(RecipeError, match="no edgevllm container"):
        stop(engine, "edgevllm-test-recipes-none")


def test_missing_image_names_recipe_and_engine(engine):
    rendered = render(standin_recipe("edgevllm-test-recipes/absent:1", "edgevllm-test-recipes-x"))
    with pytest.raises(RecipeError, match="not on engine default"):
        serve(rendered, engine)


def stop_quietly(engine, recipe):
    try:
        stop(engine, recipe, timeout=0)
    except RecipeError:
        pass


def test_pinned_digest_must_match_the_engines_image():
    digest = "sha256:" + "b" * 64
    other = "sha256:" + "c" * 64
    ok = {"Id": "sha256:" + "1" * 64, "RepoDigests": [f"edgevllm/vllm@{digest}"]}
    check_pinned_digest(f"edgevllm/vllm@{digest}", ok, "default")
    check_pinned_digest(f"edgevllm/vllm@{digest}", {"Id": digest, "RepoDigests": []}, "default")
    check_pinned_digest("edgevllm/vllm:thor", {"Id": other}, "default")  # a tag pins no digest
    with pytest.raises(RecipeError, match=f"does not carry digest {digest}"):
        check_pinned_digest(f"edgevllm/vllm@{digest}", {"Id": other, "RepoDigests": []}, "e")


def test_resolve_image_by_tag_on_the_real_engine(engine, python_image_native):
    rendered = render(standin_recipe(python_image_native, "edgevllm-test-recipes-tag"))
    assert resolve_image(rendered, engine) == python_image_native


def test_parse_nodes_engines_addresses_and_per_node_env():
    from edgevllm.common.errors import ClusterError
    from edgevllm.serve.cluster import parse_nodes

    nodes = parse_nodes(["local", "ssh://me@spark2", "ctx3"], ["10.0.0.1", "10.0.0.2", "10.0.0.3"],
                        "enp1s0f0np0", ["node1:NCCL_IB_HCA=mlx5_1", "2:A=b=c"])
    assert [n.engine.describe() for n in nodes] == ["default", "ssh://me@spark2", "ctx3"]
    assert nodes[1].env == {"NCCL_SOCKET_IFNAME": "enp1s0f0np0",
                            "GLOO_SOCKET_IFNAME": "enp1s0f0np0", "NCCL_IB_HCA": "mlx5_1"}
    assert nodes[2].env["A"] == "b=c" and "NCCL_IB_HCA" not in nodes[0].env
    with pytest.raises(ClusterError, match="--node-ips gives 1 addresses for 3 nodes"):
        parse_nodes(["a", "b", "c"], ["10.0.0.1"])
    with pytest.raises(ClusterError, match="--node-env 'node9:X=1'"):
        parse_nodes(["a"], None, None, ["node9:X=1"])


def test_build_on_demand_reaches_the_build_module(engine):
    """--build with a missing image loads the recipe's build spec through edgevllm.builder's inputs
    (a missing spec file stops it there, before any build starts)."""
    from edgevllm.common.errors import MissingInputError

    recipe = parse_recipe({"name": "edgevllm-test-recipes-build", "description": "d",
                           "targets": ["thor"], "status": {"thor": "untested"},
                           "image": "edgevllm-test-recipes/absent:1", "model": "m",
                           "build": {"spec": "recipes/images/no-such-spec.yaml"}}, "t")
    with pytest.raises(MissingInputError, match="no-such-spec.yaml"):
        resolve_image(render(recipe), engine, build=True)
    with pytest.raises(RecipeError, match="pass --build to build it"):
        resolve_image(render(recipe), engine)
