"""``inv doctor --nodes``: RDMA on each cluster node. The real engine runs the probe; this machine
has no RDMA NIC, so the node with RDMA is a stand-in text (what the probe prints on a Spark with
its ConnectX-7 ports), said so where it is used."""

from __future__ import annotations

import os

from edgevllm.serve.rdma import findings_from, probe_argv
from edgevllm.specs.targets import load_target

# Stand-in for a Spark node (no RDMA NIC here): the probe's output there.
SPARK_NODE = ("devices=rdma_cm uverbs0 uverbs1\nadapters=rocep1s0f1 roceP2p1s0f1\nverbs=yes\n"
              "ib_disable=0\n")


def test_probe_runs_with_the_cluster_flags_never_privileged():
    argv = probe_argv("img:1", load_target("spark").launch, {"NCCL_IB_DISABLE": "0"})
    assert {"--device=/dev/infiniband", "--cap-add=IPC_LOCK", "memlock=-1"} <= set(argv)
    assert "--privileged" not in argv and argv[:2] == ["run", "--rm"]


def test_transport_is_roce_when_devices_adapters_and_verbs_are_there():
    found = {f.name: f for f in findings_from("node0", SPARK_NODE)}
    assert found["nccl transport"].status == "ok"
    assert found["nccl transport"].detail == "IB/RoCE over rocep1s0f1, roceP2p1s0f1"
    tcp = {f.name: f for f in findings_from("node0", SPARK_NODE.replace("ib_disable=0",
                                                                        "ib_disable=1"))}
    assert tcp["nccl transport"].detail == "TCP sockets (NCCL_IB_DISABLE=1)"


def test_image_without_verbs_library_means_tcp(engine, python_image_native):
    """The real probe script in the real test image (no verbs library, no devices passed)."""
    proc = engine.run_cli(["run", "--rm", "--entrypoint", "sh", python_image_native, "-c",
                           probe_argv("x", load_target("spark").launch, {})[-1]])
    assert proc.returncode == 0, proc.stderr.decode()
    found = {f.name: f for f in findings_from("node0", proc.stdout.decode())}
    assert found["verbs library"].status == "fail"
    assert "the image lacks libibverbs1" in found["verbs library"].detail
    assert found["nccl transport"].detail.startswith("TCP sockets")


def test_doctor_nodes_on_a_machine_without_rdma_says_so_in_one_line(engine, python_image_native,
                                                                    cli):
    assert not os.path.exists("/dev/infiniband"), "this test needs a machine without RDMA NICs"
    code, out, err = cli("doctor", "--nodes", "local", "--image", python_image_native)
    assert code == 11, err  # ClusterError is a recipes error
    assert out.splitlines() == [
        "FAIL  node0    rdma devices     no RDMA devices (/dev/infiniband): connect the node's "
        "RDMA NIC (and its driver), or run the cluster with --no-rdma (TCP only)"]
    assert err.startswith("error: RDMA not usable on node0 (see above)") and "Traceback" not in err
