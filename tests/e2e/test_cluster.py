"""A real two-node Ray cluster started by the launcher on the real Docker engine.

Two "nodes" are two containers on one engine, on a bridge network the launcher creates (and
removes). The image is the Debian+Python test image plus Ray installed offline from wheels
downloaded on the host. No GPU and no vLLM here: the serve command that the launcher starts last
on the head is a small Python HTTP server answering /health, standing in for ``vllm serve``;
everything else (image check, Ray head, workers joining, ``ray status`` counting the nodes, the
server started with ``docker exec`` and logging into the head's container log, teardown) is the
real launcher path.
"""

from __future__ import annotations

import pytest

from edgevllm.common.errors import ClusterError
from edgevllm.serve.cluster import Cluster, ClusterOptions, Node, count_ray_nodes, teardown
from edgevllm.serve.recipe.load import parse_recipe, render

pytestmark = pytest.mark.e2e

PREFIX = "test-recipes-"  # containers: edgevllm-test-recipes-<cluster>-<node>
STANDIN = (
    "import http.server as h\n"
    "class H(h.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        self.send_response(200 if self.path == '/health' else 404); self.end_headers()\n"
    "print('stand-in vllm serve: up', flush=True)\n"
    "h.HTTPServer(('', 8000), H).serve_forever()\n"
)
# Ray on a small CI machine: one CPU each, a 100 MB object store, no dashboard, no OOM monitor.
RAY_ARGS = ["--num-cpus=1", "--object-store-memory=100000000"]


@pytest.fixture(scope="module")
def ray_image(engine):
    from support.ray_image import ray_image

    return ray_image(engine)


def cluster_recipe(image: str, name: str, ray_args=None, command=None):
    return parse_recipe({
        "name": name, "description": "Ray cluster with a stand-in server", "targets": ["spark"],
        "status": {"spark": "untested"}, "image": image, "model": "stand-in",
        "serve": {"command": command or ["python3", "-c", STANDIN]},
        "env": {"RAY_memory_monitor_refresh_ms": "0", "RAY_USAGE_STATS_ENABLED": "0"},
        "container": {"ports": [], "volumes": [], "shm_size": None, "ipc": None},
        "topology": {"mode": "ray", "nodes": 2, "ray_args": ray_args or RAY_ARGS,
                     "ray_head_args": ["--include-dashboard=false"]},
        # The CI engine runs in a sandbox that cannot raise nofile to the device default.
        "launch": {"ulimits": {"nofile": None}},
    }, name)


def leftovers(engine, cluster: str) -> tuple[list, bool]:
    containers = engine.containers(label=f"io.edgevllm.cluster={cluster}")
    return containers, engine.network_exists(f"edgevllm-{cluster}")


def make(engine, image, cluster, *, node_image=None, wait=60, rdma=False, **kw) -> Cluster:
    """``rdma=False`` (--no-rdma): the CI machine has no RDMA NIC, so NCCL would run on TCP."""
    rendered = render(cluster_recipe(image, cluster, **kw))
    nodes = [Node("head", engine), Node("worker1", engine, image=node_image)]
    teardown(cluster, nodes)  # a previous interrupted run
    return Cluster(rendered, nodes, ClusterOptions(name=cluster, wait_healthy_s=wait,
                                                   ready_timeout_s=120, rdma=rdma))


def test_two_node_ray_cluster_up_and_torn_down(engine, ray_image):
    name = PREFIX + "ray"
    cluster = make(engine, ray_image, name)
    try:
        head = cluster.launch()
        assert head == f"edgevllm-{name}-head"
        status = engine.exec(head, ["ray", "status"], timeout=120)
        assert status.returncode == 0, status.stderr.decode()
        assert count_ray_nodes(status.stdout.decode()) == 2
        worker = engine.container_inspect(f"edgevllm-{name}-worker1")
        assert worker["Config"]["Labels"]["io.edgevllm.role"] == "worker"
        assert worker["Config"]["Cmd"][:3] == ["ray", "start", f"--address={head}:6379"]
        # The stand-in server was started last, on the head, and logs into the head's log.
        assert "stand-in vllm serve: up" in engine.logs(head)
        probe = engine.exec(head, ["python3", "-c", "import urllib.request; urllib.request."
                                   "urlopen('http://localhost:8000/health')"])
        assert probe.returncode == 0
    finally:
        removed = cluster.teardown()
    assert sorted(removed) == [f"edgevllm-{name}-head", f"edgevllm-{name}-worker1"]
    assert leftovers(engine, name) == ([], False)


def test_node_with_a_different_image_is_refused(engine, ray_image, python_image_native):
    name = PREFIX + "digest"
    cluster = make(engine, ray_image, name, node_image=python_image_native)
    with pytest.raises(ClusterError) as info:
        cluster.launch()
    message = str(info.value)
    assert "\n" not in message
    assert "node worker1" in message and "same image digest" in message
    assert leftovers(engine, name) == ([], False)  # refused before anything started


def test_failure_after_start_tears_every_node_down(engine, ray_image):
    """The worker's `ray start` dies (a head-only flag): the launcher notices and cleans up."""
    name = PREFIX + "fail"
    cluster = make(engine, ray_image, name, ray_args=RAY_ARGS + ["--include-dashboard=false"])
    with pytest.raises(ClusterError, match="node worker1: container .* is not running"):
        cluster.launch()
    assert leftovers(engine, name) == ([], False)


def test_server_exit_is_reported_and_torn_down(engine, ray_image):
    name = PREFIX + "exit"
    cluster = make(engine, ray_image, name, command=["python3", "-c", "raise SystemExit(3)"])
    with pytest.raises(ClusterError, match="exited with code 3"):
        cluster.launch()
    assert leftovers(engine, name) == ([], False)


def test_nodes_without_rdma_devices_are_named_in_one_line_and_torn_down(engine, ray_image):
    """The real engine refuses --device=/dev/infiniband on a machine without RDMA NICs (this
    one): the launcher says so in one line, points at --no-rdma, and removes what it made."""
    import os

    assert not os.path.exists("/dev/infiniband"), "this test needs a machine without RDMA NICs"
    name = PREFIX + "rdma"
    cluster = make(engine, ray_image, name, rdma=True)
    with pytest.raises(ClusterError) as info:
        cluster.launch()
    message = str(info.value)
    assert message == ("node head has no RDMA devices (/dev/infiniband): NCCL would fall back "
                       "to TCP; connect its RDMA NIC, or pass --no-rdma to run over TCP only")
    assert leftovers(engine, name) == ([], False)
