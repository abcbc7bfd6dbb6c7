"""``inv doctor --nodes``: can NCCL on each cluster node reach the RDMA NICs?

Per node, one container of the cluster's image starts with the flags a cluster node gets
(the target's ``launch.rdma``: verbs devices, IPC_LOCK, memlock) and reports what it sees: the
verbs devices, the RDMA adapters in sysfs, whether the image has the verbs library. From that,
the transport NCCL will pick, by NCCL's own rule: its IB/RoCE transport when the verbs library
loads, an adapter is there and ``NCCL_IB_DISABLE`` is not 1; TCP sockets otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgevllm.containers.docker import DockerEngine, RunOptions
from edgevllm.specs.targets import LaunchDefaults, RdmaLaunch

# Constant script (no value reaches the shell): one KEY=VALUE line per fact.
_PROBE = ("echo devices=$(ls /dev/infiniband 2>/dev/null); "
          "echo adapters=$(ls /sys/class/infiniband 2>/dev/null); "
          "if ldconfig -p 2>/dev/null | grep -q 'libibverbs.so.1 '; then echo verbs=yes; "
          "else echo verbs=no; fi; echo ib_disable=${NCCL_IB_DISABLE:-0}")


def missing_device(stderr: str, devices: list[str]) -> str | None:
    """The verbs device ``docker run`` could not find on the node, from its error text."""
    for line in stderr.splitlines():
        if "no such file" in line.lower():
            for device in devices:
                if f'"{device}"' in line or f" {device}:" in line:
                    return device
    return None


def error_line(stderr: str) -> str:
    """The line of docker's error text that says what went wrong (not its "Run --help")."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return next((line for line in lines if "Error response" in line or line.startswith("docker:")),
                lines[-1] if lines else "?")


@dataclass
class NodeFinding:
    node: str
    name: str
    status: str  # "ok", "warn" or "fail"
    detail: str


def run_flags(rdma: RdmaLaunch) -> list[str]:
    """What a container needs to reach the RDMA NICs, from the target's data: ``--device`` per
    verbs device, ``--cap-add``, ``--ulimit`` (never ``--privileged``). A cluster's nodes and
    the node probe run with exactly these."""
    return ([f"--device={d}" for d in rdma.devices] + [f"--cap-add={c}" for c in rdma.cap_add]
            + [a for k, v in rdma.ulimits.items() for a in ("--ulimit", f"{k}={v}")])


def probe_argv(image: str, launch: LaunchDefaults, env: dict[str, str]) -> list[str]:
    return RunOptions(image=image, command=["-c", _PROBE], remove=True, entrypoint="sh",
                      network="host", env=env, extra=run_flags(launch.rdma)).argv()


def check_node(node: str, engine: DockerEngine, image: str, launch: LaunchDefaults,
               env: dict[str, str]) -> list[NodeFinding]:
    """The findings of one node: devices, what the image sees, verbs library, NCCL transport."""
    proc = engine.run_cli(probe_argv(image, launch, env), timeout=180)
    if proc.returncode != 0:
        stderr = proc.stderr.decode(errors="replace")
        missing = missing_device(stderr, launch.rdma.devices)
        if missing:
            return [NodeFinding(node, "rdma devices", "fail",
                                f"no RDMA devices ({missing}): connect the node's RDMA NIC "
                                "(and its driver), or run the cluster with --no-rdma (TCP only)")]
        return [NodeFinding(node, "rdma probe", "fail",
                            f"{engine.describe()}: {error_line(stderr)}")]
    return findings_from(node, proc.stdout.decode(errors="replace"))


def findings_from(node: str, text: str) -> list[NodeFinding]:
    facts = dict(line.partition("=")[::2] for line in text.splitlines() if "=" in line)
    devices, adapters = facts.get("devices", "").split(), facts.get("adapters", "").split()
    verbs = facts.get("verbs") == "yes"
    out = [NodeFinding(node, "rdma devices", "ok" if devices else "fail",
                       " ".join(devices) if devices else "the container sees no verbs device "
                       "under /dev/infiniband: check the NIC's driver (mlx5_ib)"),
           NodeFinding(node, "rdma adapters", "ok" if adapters else "fail",
                       " ".join(adapters) if adapters else "none in /sys/class/infiniband"),
           NodeFinding(node, "verbs library", "ok" if verbs else "fail",
                       "libibverbs.so.1" if verbs else "the image lacks libibverbs1: build it "
                       "for the spark target (apt packages libibverbs1, ibverbs-providers)")]
    out.append(transport(node, devices, adapters, verbs, facts.get("ib_disable", "0")))
    return out


def transport(node: str, devices: list[str], adapters: list[str], verbs: bool,
              ib_disable: str) -> NodeFinding:
    if ib_disable == "1":
        return NodeFinding(node, "nccl transport", "warn", "TCP sockets (NCCL_IB_DISABLE=1)")
    if devices and adapters and verbs:
        return NodeFinding(node, "nccl transport", "ok", f"IB/RoCE over {', '.join(adapters)}")
    return NodeFinding(node, "nccl transport", "fail",
                       "TCP sockets: NCCL finds no usable RDMA adapter (see above)")
