"""A cluster's plan without starting it (``serve/cluster.py``, ``serve/rdma.py``): what a cluster
refuses before any engine is asked (a solo recipe, a node count, a bridge across engines, a head
without an address, a cluster name that cannot name a container), each node's env (the target's
cluster env filled or left out, TCP without RDMA, Ray's unified-memory env under the recipe's,
VLLM_HOST_IP for an IP only), labels and ports, ``ray status`` counted, and the RDMA probe's
constant script run for real with ``sh`` on this machine, its lines read as the findings."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from edgevllm.common.errors import ClusterError
from edgevllm.containers.docker import DockerEngine
from edgevllm.serve.cluster import (
    LABEL_CLUSTER,
    LABEL_NETWORK,
    LABEL_NODE,
    LABEL_ROLE,
    Cluster,
    ClusterOptions,
    Node,
    cluster_env,
    count_ray_nodes,
)
from edgevllm.serve.rdma import _PROBE, error_line, findings_from, missing_device, transport
from edgevllm.serve.recipe.load import parse_recipe, render


def rendered(mode: str = "torch", nodes: int = 2, env: dict | None = None):
    data = {"name": "cluster-plan", "description": "d", "targets": ["spark"],
            "status": {"spark": "untested"}, "image": "edgevllm-test/absent:1", "model": "org/m",
            "serve": {"args": ["{{ model }}"]}, "container": {"gpus": "all"},
            "topology": {"mode": mode, "nodes": nodes}, "env": env or {}}
    return render(parse_recipe(data, "t"), {"target": "spark", "hf_cache": "/srv/hf"})


def remote(n: int, address: str | None = None) -> Node:
    return Node(f"node{n}", DockerEngine.named(f"ssh://me@spark{n}"), address=address)


def local(n: int, address: str | None = None) -> Node:
    return Node(f"node{n}", DockerEngine(), address=address)


def cluster(nodes, mode="torch", **options) -> Cluster:
    return Cluster(rendered(mode, len(nodes)), nodes, ClusterOptions(name="c1", **options))


# -- refused before any engine is asked ------------------------------------------------------------
def test_a_solo_recipe_is_no_cluster():
    with pytest.raises(ClusterError, match="is solo: use inv serve without --nodes"):
        Cluster(rendered("solo", 1), [local(0)], ClusterOptions(name="c1"))


def test_the_node_count_is_the_recipes():
    with pytest.raises(ClusterError, match=r"needs 2 nodes, --nodes gives 3 \(or --set nodes=3\)"):
        Cluster(rendered("torch", 2), [local(0), local(1), local(2)], ClusterOptions(name="c1"))


def test_node_names_are_unique():
    with pytest.raises(ClusterError, match="node names must be unique"):
        Cluster(rendered(), [local(0), local(0)], ClusterOptions(name="c1"))


def test_a_bridge_spans_one_engine_only():
    with pytest.raises(ClusterError, match="a bridge network spans one engine only"):
        cluster([remote(0, "10.0.0.1"), remote(1, "10.0.0.2")], network="bridge")


def test_host_network_needs_the_heads_address():
    with pytest.raises(ClusterError, match=r"node node0 \(head\) needs an address"):
        cluster([remote(0), remote(1)])


@pytest.mark.parametrize("name", ["My Cluster", "a/b", "x;rm -rf", "-lead", "", "A" * 2])
def test_a_cluster_name_that_cannot_name_a_container_is_one_line(name):
    # it was accepted, and became container and network names docker refuses halfway through
    with pytest.raises(ClusterError) as caught:
        Cluster(rendered(), [local(0), local(1)], ClusterOptions(name=name))
    assert str(caught.value).startswith("--cluster: ") and "\n" not in str(caught.value)


# -- one engine: a bridge, names through docker's DNS ----------------------------------------------
def test_one_engine_gets_its_own_bridge_and_container_names_as_addresses():
    plan = cluster([local(0), local(1)])
    assert plan.network == "bridge" and plan.network_name == "edgevllm-c1"
    assert plan.address(plan.nodes[1]) == "edgevllm-c1-node1"
    assert plan.labels(plan.nodes[0]) == {LABEL_CLUSTER: "c1", LABEL_ROLE: "head",
                                          LABEL_NODE: "node0", LABEL_NETWORK: "edgevllm-c1"}
    assert plan.labels(plan.nodes[1])[LABEL_ROLE] == "worker"


def test_only_the_head_publishes_the_port_and_carries_the_health_check():
    plan = cluster([remote(0, "10.0.0.1"), remote(1, "10.0.0.2")])
    head, worker = (plan.run_options(n, ["vllm", "serve"]) for n in plan.nodes)
    assert head.network == "host" and head.ports == []  # host network: no -p at all
    assert "--health-cmd" in head.extra and "--health-cmd" not in worker.extra
    assert head.restart == worker.restart == "no"
    assert head.labels[LABEL_CLUSTER] == "c1" and LABEL_NETWORK not in head.labels
    bridge = cluster([local(0), local(1)])
    assert bridge.run_options(bridge.nodes[0], ["x"]).ports == ["8000:8000"]
    assert bridge.run_options(bridge.nodes[1], ["x"]).ports == []


# -- each node's env -------------------------------------------------------------------------------
def test_the_targets_cluster_env_is_filled_or_left_out():
    template = {"NCCL_IB_HCA": "{ib_hca}", "UCX_NET_DEVICES": "{iface}", "X": "{iface}-{ib_hca}",
                "PLAIN": "1"}
    assert cluster_env(template, {"iface": "enp1", "ib_hca": None}) == {
        "UCX_NET_DEVICES": "enp1", "PLAIN": "1"}
    assert cluster_env(template, {"iface": "enp1", "ib_hca": "mlx5_0"})["X"] == "enp1-mlx5_0"


def test_without_rdma_nccl_gets_the_tcp_env_and_no_hca():
    nodes = [remote(0, "10.0.0.1"), remote(1, "10.0.0.2")]
    with_rdma = cluster(nodes, ib_hca="mlx5_0")
    assert with_rdma.node_env(nodes[0])["NCCL_IB_HCA"] == "mlx5_0"
    assert "--device=/dev/infiniband" in with_rdma.run_options(nodes[0], ["x"]).extra
    tcp = cluster(nodes, ib_hca="mlx5_0", rdma=False)
    env = tcp.node_env(nodes[0])
    assert "NCCL_IB_HCA" not in env and env["NCCL_IB_DISABLE"] == "1"
    assert not any(a.startswith("--device") for a in tcp.run_options(nodes[0], ["x"]).extra)


def test_ray_gets_the_unified_memory_env_unless_the_recipe_sets_it():
    nodes = [remote(0, "10.0.0.1"), remote(1, "10.0.0.2")]
    plan = Cluster(rendered("ray", 2, env={"RAY_memory_monitor_refresh_ms": "250"}), nodes,
                   ClusterOptions(name="c1"))
    env = plan.node_env(nodes[1])
    assert env["RAY_object_store_memory"] == "1073741824"
    assert "RAY_memory_monitor_refresh_ms" not in env  # the recipe's own value stands
    options = plan.run_options(nodes[1], ["x"])
    assert options.env["RAY_memory_monitor_refresh_ms"] == "250"
    torch = cluster(nodes)
    assert "RAY_object_store_memory" not in torch.node_env(nodes[1])


def test_vllm_host_ip_is_set_for_an_ip_only_and_the_nodes_env_wins():
    nodes = [remote(0, "10.0.0.1"), remote(1, "spark1.lan")]
    nodes[1].env = {"NCCL_IB_DISABLE": "1"}
    plan = cluster(nodes)
    assert plan.node_env(nodes[0])["VLLM_HOST_IP"] == "10.0.0.1"
    assert "VLLM_HOST_IP" not in plan.node_env(nodes[1])
    assert plan.node_env(nodes[1])["NCCL_IB_DISABLE"] == "1"


# -- ray status ------------------------------------------------------------------------------------
RAY_STATUS = """======== Autoscaler status: 2026-11-29 14:00:00 ========
Node status
---------------------------------------------------------------
Active:
 1 node_0a1b2c3d4e5f
 1 node_9f8e7d6c5b4a
Idle:
 1 node_77aa
Pending:
 node_pending_1
Recent failures:
 node_dead_2
Resources
---------------------------------------------------------------
Usage:
 0.0/40.0 CPU
"""


def test_ray_status_counts_active_and_idle_nodes_only():
    assert count_ray_nodes(RAY_STATUS) == 3
    assert count_ray_nodes("") == 0
    assert count_ray_nodes("Active:\n (no active nodes)\nIdle:\n (no idle nodes)\n") == 0


# -- the RDMA probe, run here ----------------------------------------------------------------------
def test_the_probe_script_reports_this_machine_as_the_findings_read_it():
    proc = subprocess.run(["sh", "-c", _PROBE], capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"], "NCCL_IB_DISABLE": "1"}, check=True)
    keys = [line.partition("=")[0] for line in proc.stdout.splitlines()]
    assert keys == ["devices", "adapters", "verbs", "ib_disable"]
    findings = {f.name: f for f in findings_from("node0", proc.stdout)}
    here = sorted(os.listdir("/dev/infiniband")) if Path("/dev/infiniband").is_dir() else []
    assert (findings["rdma devices"].status == "ok") == bool(here)
    assert findings["nccl transport"].status == "warn"  # NCCL_IB_DISABLE=1 said so
    assert findings["nccl transport"].detail == "TCP sockets (NCCL_IB_DISABLE=1)"


def test_findings_of_a_node_with_everything_name_the_adapters():
    text = "devices=rdma_cm uverbs0\nadapters=rocep1s0f0 roceP2p1s0f0\nverbs=yes\nib_disable=0\n"
    findings = findings_from("node1", text)
    assert [f.status for f in findings] == ["ok", "ok", "ok", "ok"]
    assert findings[-1].detail == "IB/RoCE over rocep1s0f0, roceP2p1s0f0"


def test_an_image_without_verbs_falls_back_to_tcp_and_says_which_package():
    findings = findings_from("n", "devices=uverbs0\nadapters=mlx5_0\nverbs=no\nib_disable=0\n")
    assert findings[2].status == "fail" and "libibverbs1" in findings[2].detail
    assert transport("n", ["uverbs0"], ["mlx5_0"], False, "0").status == "fail"


def test_dockers_device_error_names_the_missing_device():
    stderr = ('docker: Error response from daemon: error gathering device information while '
              'adding custom device "/dev/infiniband": no such file or directory.\n'
              "Run 'docker run --help' for more information\n")
    assert missing_device(stderr, ["/dev/infiniband"]) == "/dev/infiniband"
    assert missing_device("docker: Error response from daemon: no such image\n",
                          ["/dev/infiniband"]) is None
    assert error_line(stderr).startswith("docker: Error response from daemon: error gathering")
    assert error_line("") == "?" and error_line("one\nlast\n") == "last"
