"""Serve a recipe across N nodes: one container per node, Ray or torch distributed.

A node is a Docker engine (the local daemon, a docker context or an ``ssh://`` host) plus a name,
the address the other nodes reach it at, and its own env (``NCCL_SOCKET_IFNAME``...).

Order of start (the "workers first, head last" rule, made concrete):

* ``ray``: Ray workers can only join a running head, so the head container starts first but
  runs only ``ray start --head --block``; the workers then join with ``ray start --address``; the
  launcher waits until ``ray status`` on the head counts every node; the vLLM server process
  starts last, on the head, with ``--distributed-executor-backend ray``.
* ``torch``: every rank > 0 starts first (``vllm serve --headless --node-rank R``), rank 0 (the
  API server, ``--master-addr`` = head) last.

Before anything starts, every node must hold the same image (same image id, and the pinned
digest when the recipe gives one). On any failure, Ctrl-C included, every container labelled
``io.edgevllm.cluster=<name>`` on every node and the launcher's network are removed.

Its length: the checks before a start (one image on every node, the name free), the two start
orders (Ray's, torch's), the waits and the teardown are one ``Cluster`` run's steps, all read from
its nodes' names, labels and network and from what it started; one node's container (its run
options, entry and health command) is already serve/launch.py's.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from edgevllm.common import console, labels
from edgevllm.common.errors import ClusterError, EdgeVllmError, ImageNotFoundError
from edgevllm.common.grammar import Name, check
from edgevllm.common.kv import pair_error, split_pair
from edgevllm.common.poll import poll
from edgevllm.containers.docker import DockerEngine, RunOptions
from edgevllm.serve.launch import (
    LABEL_CLUSTER,
    LABEL_ROLE,
    check_pinned_digest,
    entry_command,
    health_command,
    run_options,
)
from edgevllm.serve.rdma import error_line, missing_device, run_flags
from edgevllm.serve.recipe.load import Rendered

LABEL_NODE = labels.NODE
LABEL_NETWORK = labels.NETWORK
SERVE_EXIT_FILE = "/tmp/edgevllm-serve.exit"
# Runs the server detached from `docker exec`, its output into the container log (PID 1's stdout),
# its exit code into a file the launcher polls. The script is constant: the serve argv reaches it
# as positional parameters ("$@"), so no value is ever parsed by the shell.
_BACKGROUND = (f'("$@" </dev/null >>/proc/1/fd/1 2>>/proc/1/fd/2; echo $? >{SERVE_EXIT_FILE}) '
               "</dev/null >/dev/null 2>&1 &")


@dataclass
class Node:
    name: str
    engine: DockerEngine = field(default_factory=DockerEngine)
    address: str | None = None  # IP/host the other nodes reach it at (VLLM_HOST_IP, master addr)
    env: dict[str, str] = field(default_factory=dict)  # per-node env (NCCL/GLOO interfaces...)
    image: str | None = None  # this node's name for the image, when it differs from the recipe's


@dataclass
class ClusterOptions:
    name: str
    network: str | None = None  # "host", or None: a dedicated bridge network when one engine
    ray_args: list[str] = field(default_factory=list)  # extra `ray start` flags (head and workers)
    ready_timeout_s: float = 300
    wait_healthy_s: float = 0
    iface: str | None = None  # fills {iface} in the target's launch.cluster_env
    ib_hca: str | None = None  # fills {ib_hca} (NCCL_IB_HCA)
    rdma: bool = True  # the target's launch.rdma (verbs devices...); False: NCCL over TCP only


@dataclass
class Step:
    """One action of a launch: what ``--dry-run`` prints and what ``launch`` executes."""

    node: Node
    describe: str
    argv: list[str] | None = None  # a docker command on node.engine, if the step is one
    action: Callable[[], None] | None = None

    def command_line(self) -> str:
        if self.argv is None:
            return f"# {self.describe}"
        return self.node.engine.command_line(self.argv)


def parse_nodes(spec: list[str], addresses: list[str] | None = None,
                iface: str | None = None, node_env: list[str] | None = None) -> list[Node]:
    """``--nodes local,ssh://me@spark2,ctx3`` (+ ``--node-ips``, ``--iface``): head first."""
    if not spec:
        raise ClusterError("--nodes is empty: give one engine per node, head first")
    addresses = addresses or []
    if addresses and len(addresses) != len(spec):
        raise ClusterError(f"--node-ips gives {len(addresses)} addresses for {len(spec)} nodes")
    nodes = []
    for index, item in enumerate(spec):
        engine = DockerEngine.named(item)
        env = {"NCCL_SOCKET_IFNAME": iface, "GLOO_SOCKET_IFNAME": iface} if iface else {}
        nodes.append(Node(name=f"node{index}", engine=engine,
                          address=addresses[index] if addresses else None, env=env))
    for item in node_env or []:
        _apply_node_env(nodes, item)
    return nodes


def _apply_node_env(nodes: list[Node], item: str) -> None:
    """``--node-env node1:NCCL_IB_HCA=mlx5_1`` (a node name or index, then KEY=VALUE)."""
    example = f"NODE:KEY=VALUE with NODE one of {', '.join(n.name for n in nodes)}"
    where, value = split_pair(item, "--node-env", ClusterError, example)
    who, colon, key = where.partition(":")
    node = next((n for i, n in enumerate(nodes) if who in (n.name, str(i))), None)
    if node is None or not colon or not key:
        raise pair_error(item, "--node-env", ClusterError, example)
    node.env[key] = value


class Cluster:
    """The plan for one recipe on a list of nodes (``nodes[0]`` is the head)."""

    def __init__(self, rendered: Rendered, nodes: list[Node], options: ClusterOptions):
        topo = rendered.topology
        check(Name, options.name, "--cluster", ClusterError)  # in names, labels, filters
        if topo.mode == "solo":
            raise ClusterError(f"recipe {rendered.name} is solo: use inv serve without --nodes")
        if len(nodes) != topo.nodes:
            raise ClusterError(f"recipe {rendered.name} needs {topo.nodes} nodes, --nodes gives "
                               f"{len(nodes)} (or --set nodes={len(nodes)})")
        if len({n.name for n in nodes}) != len(nodes):
            raise ClusterError("node names must be unique")
        self.rendered, self.nodes, self.options = rendered, nodes, options
        self.head = nodes[0]
        self.started: set[str] = set()  # nodes whose container was started by launch()
        self.image_id: str | None = None  # the head's image id once checked (JIT cache folder)
        self.image_labels: dict[str, str] = {}  # the head's image labels (compute cache size)
        self.network = options.network or ("bridge" if self._one_engine() else "host")
        if self.network == "bridge" and not self._one_engine():
            raise ClusterError("a bridge network spans one engine only: nodes on several engines "
                               "need --network host and --node-ips")
        self.network_name = f"edgevllm-{options.name}" if self.network == "bridge" else "host"
        if self.network == "host" and not self.head.address:
            raise ClusterError(f"node {self.head.name} (head) needs an address the others can "
                               "reach: pass --node-ips")

    def _one_engine(self) -> bool:
        return len({repr(n.engine.base_argv()) for n in self.nodes}) == 1

    # -- naming --------------------------------------------------------------------------------
    def container(self, node: Node) -> str:
        return f"edgevllm-{self.options.name}-{node.name}"

    def address(self, node: Node) -> str:
        # On the launcher's bridge network the container name resolves through Docker's DNS.
        return node.address or self.container(node)

    def labels(self, node: Node) -> dict[str, str]:
        role = "head" if node is self.head else "worker"
        labels = {LABEL_CLUSTER: self.options.name, LABEL_ROLE: role, LABEL_NODE: node.name}
        if self.network == "bridge":
            labels[LABEL_NETWORK] = self.network_name
        return labels

    def image(self, node: Node) -> str:
        ref = node.image or self.rendered.image
        if not ref:
            raise ClusterError(f"recipe {self.rendered.name} has no image: set image: or --build")
        return ref

    # -- preflight: same image everywhere -------------------------------------------------------
    def check_images(self) -> str:
        """Every node must hold the same image id; return it. Refuse naming the first odd node."""
        ids: dict[str, str] = {}
        for node in self.nodes:
            ref = self.image(node)
            try:
                inspect = node.engine.image_inspect(ref)
            except ImageNotFoundError:
                raise ClusterError(f"node {node.name} (engine {node.engine.describe()}) lacks "
                                   f"image {ref}: load it there (docker save | docker load)") \
                    from None
            check_pinned_digest(ref, inspect, node.engine.describe())
            ids[node.name] = inspect["Id"]
            if node is self.head:
                self.image_labels = inspect.get("Config", {}).get("Labels") or {}
        head_id = ids[self.head.name]
        for node in self.nodes[1:]:
            if ids[node.name] != head_id:
                raise ClusterError(
                    f"node {node.name} (engine {node.engine.describe()}) runs image "
                    f"{self.image(node)} = {ids[node.name][:19]}, head has {head_id[:19]}: every "
                    "node must run the same image digest; load the head's image there")
        return head_id

    def check_free(self) -> None:
        for node in self.nodes:
            if node.engine.container_inspect(self.container(node)) is not None:
                raise ClusterError(f"container {self.container(node)} already exists on node "
                                   f"{node.name}: inv stop --cluster {self.options.name} "
                                   "--nodes ...")

    # -- plan ----------------------------------------------------------------------------------
    def node_env(self, node: Node) -> dict[str, str]:
        """The target's cluster env (``{iface}``/``{ib_hca}`` filled), then the node's own."""
        launch = self.rendered.launch
        env = cluster_env(launch.cluster_env,
                          {"iface": self.options.iface, "ib_hca": self.options.ib_hca})
        if not self.options.rdma:
            env.pop("NCCL_IB_HCA", None)
            env.update(launch.rdma.tcp_env)
        if self.rendered.topology.mode == "ray":  # the recipe's own env wins over these
            env.update({k: v for k, v in launch.ray_env.items() if k not in self.rendered.env})
        env.update(node.env)
        if node.address and _is_ip(node.address):
            env["VLLM_HOST_IP"] = node.address
        return env

    def run_options(self, node: Node, command: list[str],
                    env: dict[str, str] | None = None) -> RunOptions:
        """One node's container: restart "no" (a lone restarted node cannot rejoin the job);
        only the head publishes the API port and carries the health check."""
        is_head = node is self.head
        options = run_options(
            self.rendered, node.engine, name=self.container(node), command=command,
            labels=self.labels(node), network=self.network_name,
            hostname=self.container(node) if self.network == "bridge" else None,
            env={**self.node_env(node), **(env or {})}, image=self.image(node), ports=is_head,
            restart="no", healthcheck=is_head, image_id=self.image_id,
            image_labels=self.image_labels)
        options.extra = [*self.rdma_flags(), *options.extra]
        return options

    def rdma_flags(self) -> list[str]:
        """The target's RDMA flags (``rdma.run_flags``) where the cluster runs with RDMA."""
        return run_flags(self.rendered.launch.rdma) if self.options.rdma else []

    def plan(self) -> list[Step]:
        steps: list[Step] = []
        if self.network == "bridge":
            argv = ["network", "create", "--label", f"{LABEL_CLUSTER}={self.options.name}",
                    self.network_name]
            steps.append(Step(self.head, f"create network {self.network_name}", argv))
        mode = self.rendered.topology.mode
        steps += self._ray_steps() if mode == "ray" else self._torch_steps()
        if self.options.wait_healthy_s > 0:
            steps.append(Step(self.head, f"wait for GET {self.rendered.health_path} on the head",
                              action=self.wait_healthy))
        return steps

    def _ray_steps(self) -> list[Step]:
        topo = self.rendered.topology
        head_addr = f"{self.address(self.head)}:{topo.ray_port}"
        steps = []
        for node in self.nodes:
            is_head = node is self.head
            cmd = (["ray", "start", "--head", f"--port={topo.ray_port}"] if is_head
                   else ["ray", "start", f"--address={head_addr}"])
            if node.address and _is_ip(node.address):
                cmd.append(f"--node-ip-address={node.address}")
            cmd += ["--block", *self.rendered.launch.ray_start_args, *topo.ray_args,
                    *self.options.ray_args]
            cmd += topo.ray_head_args if is_head else []
            options = self.run_options(node, entry_command(self.rendered, cmd, server=False))
            role = "Ray head" if is_head else "Ray worker"
            steps.append(Step(node, f"start {role} {options.name}", options.argv()))
            if is_head:
                steps.append(Step(node, f"wait until Ray on {options.name} is up",
                                  action=lambda: self.wait_ray_nodes(1)))
        steps.append(Step(self.head, f"wait until ray status counts {len(self.nodes)} nodes",
                          action=lambda: self.wait_ray_nodes(len(self.nodes))))
        serve = entry_command(self.rendered, self.serve_argv(), earlyoom=False)
        exec_argv = ["exec", self.container(self.head), "sh", "-c", _BACKGROUND, "edgevllm-serve",
                     *serve]
        steps.append(Step(self.head, "start the server on the head (last)", exec_argv))
        return steps

    def serve_argv(self) -> list[str]:
        """The recipe's command, plus the Ray executor flag when it is ``vllm serve``."""
        command = list(self.rendered.command)
        if _is_vllm_serve(command) and "--distributed-executor-backend" not in command:
            command += ["--distributed-executor-backend", "ray"]
        return command

    def _torch_steps(self) -> list[Step]:
        topo = self.rendered.topology
        master = self.address(self.head)
        ranked = list(enumerate(self.nodes))
        steps = []
        for rank, node in ranked[1:] + ranked[:1]:  # workers first, rank 0 (the head) last
            command = list(self.rendered.command)
            # Also as env, for a command that is not `vllm serve` (a wrapper script, a stand-in).
            env = {"MASTER_ADDR": master, "MASTER_PORT": str(topo.master_port),
                   "NODE_RANK": str(rank), "NNODES": str(len(self.nodes))}
            if _is_vllm_serve(command):
                command += ["--nnodes", str(len(self.nodes)), "--node-rank", str(rank),
                            "--master-addr", master, "--master-port", str(topo.master_port)]
                if rank > 0:
                    command.append("--headless")
            options = self.run_options(node, entry_command(self.rendered, command), env)
            steps.append(Step(node, f"start rank {rank} {options.name}", options.argv()))
        return steps

    # -- waits ---------------------------------------------------------------------------------
    def wait_ray_nodes(self, count: int) -> None:
        head = self.container(self.head)
        last = [""]

        def counted() -> bool | None:
            self._check_running()
            proc = self.head.engine.exec(head, ["ray", "status"], timeout=120)
            last[0] = proc.stdout.decode(errors="replace") + proc.stderr.decode(errors="replace")
            return True if proc.returncode == 0 and count_ray_nodes(last[0]) >= count else None

        if poll(counted, self.options.ready_timeout_s, interval_s=2) is None:
            tail = " | ".join(last[0].strip().splitlines()[-3:])
            raise ClusterError(f"Ray on {head} counted {count_ray_nodes(last[0])} of {count} "
                               f"nodes after {self.options.ready_timeout_s:.0f}s ({tail})")

    def wait_healthy(self) -> None:
        head = self.container(self.head)
        probe = health_command(self.rendered.health_port, self.rendered.health_path)

        def healthy() -> bool | None:
            self._check_running()
            exited = self.head.engine.exec(head, ["cat", SERVE_EXIT_FILE])
            if exited.returncode == 0:
                raise ClusterError(f"the server on {head} exited with code "
                                   f"{exited.stdout.decode().strip()}: inv logs --name {head}")
            return True if self.head.engine.exec(head, probe, timeout=60).returncode == 0 else None

        if poll(healthy, self.options.wait_healthy_s, interval_s=2) is None:
            raise ClusterError(f"the server on {head} was not healthy after "
                               f"{self.options.wait_healthy_s:.0f}s: inv logs --name {head}")

    def _check_running(self) -> None:
        for node in (n for n in self.nodes if n.name in self.started):
            info = node.engine.container_inspect(self.container(node))
            state = (info or {}).get("State", {})
            if not state.get("Running"):
                logs = node.engine.logs(self.container(node), tail=3) if info else ""
                tail = " | ".join(logs.strip().splitlines()[-3:])
                raise ClusterError(f"node {node.name}: container {self.container(node)} is not "
                                   f"running (exit {state.get('ExitCode', '?')}): {tail}")

    # -- launch / teardown ---------------------------------------------------------------------
    def dry_run(self) -> list[str]:
        ref = self.image(self.head)
        try:
            inspect = self.head.engine.image_inspect(ref)
            self.image_id = inspect["Id"]
            self.image_labels = inspect.get("Config", {}).get("Labels") or {}
        except EdgeVllmError:
            self.image_id = None  # no daemon or no image here: the folder shows as IMAGE-ID
        return [step.command_line() for step in self.plan()]

    def launch(self) -> str:
        """Check images, then run the plan; on any failure remove everything it started."""
        self.image_id = self.check_images()
        self.check_free()
        try:
            for step in self.plan():
                console.step(f"{step.node.name}: {step.describe}")
                if step.action is not None:
                    step.action()
                else:
                    self._docker(step)
        except BaseException as exc:
            console.warn(f"cluster {self.options.name} failed; tearing down every node")
            self.teardown()
            if isinstance(exc, (EdgeVllmError, KeyboardInterrupt)):
                raise
            raise ClusterError(f"cluster {self.options.name}: {exc}") from exc
        return self.container(self.head)

    def _docker(self, step: Step) -> None:
        if step.argv and step.argv[0] == "run":
            self.started.add(step.node.name)
        # docker run -d / network create / exec into the background: seconds, even over ssh.
        proc = step.node.engine.run_cli(step.argv or [], timeout=300)
        if proc.returncode != 0:
            stderr = proc.stderr.decode(errors="replace")
            missing = self.options.rdma and missing_device(stderr,
                                                           self.rendered.launch.rdma.devices)
            if missing:
                raise ClusterError(f"node {step.node.name} has no RDMA devices ({missing}): "
                                   "NCCL would fall back to TCP; connect its RDMA NIC, or pass "
                                   "--no-rdma to run over TCP only")
            raise ClusterError(f"node {step.node.name}: {step.describe} failed: "
                               f"{error_line(stderr)}")

    def teardown(self) -> list[str]:
        return teardown(self.options.name, self.nodes)


def teardown(cluster: str, nodes: list[Node]) -> list[str]:
    """Remove every container labelled with ``cluster`` on every node's engine, then networks."""
    removed: list[str] = []
    engines = {repr(n.engine.base_argv()): n.engine for n in nodes}
    for engine in engines.values():
        # The launcher's network may exist with no container left (a failed first start).
        networks = {f"edgevllm-{cluster}"}
        for row in engine.containers(label=f"{LABEL_CLUSTER}={cluster}"):
            info = engine.container_inspect(row["Names"]) or {}
            labels = info.get("Config", {}).get("Labels") or {}
            if labels.get(LABEL_NETWORK):
                networks.add(labels[LABEL_NETWORK])
            engine.remove_container(row["Names"])
            removed.append(row["Names"])
        for network in sorted(networks):
            if engine.network_exists(network):
                engine.network_remove(network)
    return removed


def cluster_env(template: dict[str, str], values: dict[str, str | None]) -> dict[str, str]:
    """``{iface}`` / ``{ib_hca}`` filled in; an entry naming a value not given is left out."""
    env = {}
    for key, text in template.items():
        names = re.findall(r"\{(\w+)\}", text)
        if any(not values.get(name) for name in names):
            continue
        for name in names:
            text = text.replace("{" + name + "}", str(values[name]))
        env[key] = text
    return env


def count_ray_nodes(status_text: str) -> int:
    """Nodes alive in ``ray status`` output: ``node_...`` lines under ``Active:`` or ``Idle:``."""
    count, section = 0, ""
    for line in status_text.splitlines():
        stripped = line.strip()
        if stripped.endswith(":") and not stripped[:1].isdigit():
            section = stripped
        elif section in ("Active:", "Idle:") and "node_" in stripped:
            count += 1
    return count


def _is_vllm_serve(command: list[str]) -> bool:
    return len(command) >= 2 and command[0].endswith("vllm") and command[1] == "serve"


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False
