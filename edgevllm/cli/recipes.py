"""``inv recipes | serve | stop | logs | status | compose | recipe-import``: launch recipes."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from edgevllm.cli._common import cli_task
from edgevllm.common import console
from edgevllm.common.errors import RecipeError
from edgevllm.common.escape import one_line
from edgevllm.common.grammar import flag_float, flag_int
from edgevllm.common.kv import split_csv
from edgevllm.containers.docker import DockerEngine

_ENGINE = "docker engine: 'local' (default), a docker context name or a URL (ssh://user@host)"
_COMMON = {
    "recipe": "recipe name (inv recipes) or path to a recipe YAML file",
    "set": "override a recipe default (repeatable): --set port=9000 --set max_model_len=16384",
    "target": "device the recipe runs on, for recipes with several targets (thor, spark)",
    "engine": _ENGINE,
}
ALLOW_HELP = ("let the recipe's container reach the host (--privileged, host namespaces, "
              "capabilities or devices beyond the target's, mounts of /, /etc, $HOME or the "
              "Docker socket): only for a recipe you trust")
_SERVE_HELP = {
    **_COMMON,
    "dry-run": "print the exact docker command(s) and start nothing",
    "name": "container name (default edgevllm-<recipe>)",
    "build": "build the recipe's image from its build spec/lock if the engine lacks it",
    "wait": "seconds to wait for GET /health (0: return once started)",
    "nodes": "cluster: one engine per node, head first (local, context names, ssh://host)",
    "node-ips": "cluster: the address of each node on the cluster network (sets VLLM_HOST_IP)",
    "iface": "cluster: network interface for NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME",
    "node-env": "cluster: env for one node (repeatable): --node-env node1:NCCL_IB_HCA=mlx5_1",
    "network": "cluster: 'host' or 'bridge' (default: bridge when every node is one engine)",
    "cluster": "cluster name (default: the recipe name); labels io.edgevllm.cluster=<name>",
    "ib-hca": "cluster: the RDMA devices for NCCL_IB_HCA (e.g. rocep1s0f1,roceP2p1s0f1)",
    "no-rdma": "cluster: run NCCL over TCP only (nodes without RDMA NICs; slower all-reduces)",
    "gpu-memory-gb": "memory budget in GiB; turned into --gpu-memory-utilization from the "
                     "device's total memory when the container starts",
    "earlyoom": "run earlyoom in the container first (the image needs the earlyoom mod)",
    "caches": "a JIT cache bundle (inv warm) to fill the cache folders with before the start "
              "(default: the one of this recipe and image in the bundle folder, if any)",
    "no-caches": "start without a cache bundle, even when the bundle folder has one",
    "allow-host-access": ALLOW_HELP,
}
_SERVE_USAGE = "inv serve RECIPE [--options] [-- EXTRA VLLM ARGS...]"


def extra_args(c) -> list[str]:
    """The words after ``--``, exactly as the shell passed them (invoke joins them with spaces,
    which would lose the quoting of JSON arguments)."""
    if "--" in sys.argv:
        return sys.argv[sys.argv.index("--") + 1:]
    return shlex.split(getattr(c, "remainder", "") or "")


def print_task_help(task: str) -> None:
    from invoke import Program

    from edgevllm.cli import namespace

    Program(namespace=namespace(), binary="inv").run(["inv", "--help", task], exit=False)


def _recipe_rows(loaded) -> list[dict]:
    """One row per target and form: a recipe that runs on one device or as a cluster
    (topology.cluster) lists both; one that needs --set values says which."""
    from edgevllm.serve.recipe.load import render

    forms = [False, True] if loaded.recipe.topology.cluster else [False]
    rows = []
    for target, status in loaded.recipe.status.items():
        for clustered in forms:
            row = {"name": loaded.name, "target": target, "status": status,
                   "description": loaded.recipe.description}
            try:
                rendered = render(loaded, {"target": target}, clustered=clustered,
                                  allow_host_access=None)
            except RecipeError:
                needs = " ".join(f"--set {k}=…" for k in loaded.recipe.required) or "fix it"
                rows.append({**row, "topology": "-", "image": f"(needs {needs})",
                             "build": None})
                continue
            rows.append({**row, "topology": f"{rendered.topology.mode}x{rendered.topology.nodes}",
                         "image": rendered.image, "build": rendered.build and
                         (rendered.build.spec or rendered.build.lock)})
    return rows


@cli_task(help={"as-json": "print JSON instead of a table"}, auto_shortflags=False)
def recipes(c, as_json=False):
    """List the launch recipes: per target, known-good or untested, and the image."""
    from edgevllm.serve.recipe.load import all_recipes

    rows = [row for loaded in all_recipes() for row in _recipe_rows(loaded)]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    width = max([len(r["name"]) for r in rows] + [36])
    for r in rows:
        print(one_line(f"{r['name']:<{width}} {r['target']:<6} {r['status']:<10} "
                       f"{r['topology']:<8} {r['image']}"))


@cli_task(help=_SERVE_HELP, iterable=["set_", "node_env"], positional=["recipe"],
          auto_shortflags=False)
def serve(c, recipe=None, set_=None, target=None, dry_run=False, name=None, engine=None,
          build=False, wait="0", nodes=None, node_ips=None, iface=None, node_env=None, network=None,
          cluster=None, ib_hca=None, gpu_memory_gb=None, earlyoom=False, no_rdma=False,
          caches=None, no_caches=False, allow_host_access=False):
    """Serve a model from a recipe: one container, or a Ray/torch cluster with --nodes.

    inv serve RECIPE [--options] [-- EXTRA VLLM ARGS...]: words after -- are appended to the
    server's command (vLLM takes the last of a repeated flag).
    """
    from edgevllm.serve import launch as serving
    from edgevllm.serve.cluster import Cluster, ClusterOptions, parse_nodes
    from edgevllm.serve.recipe.load import render_named

    if recipe in (None, "-h", "--help"):
        print_task_help("serve")
        if recipe is None:
            raise RecipeError(f"say which recipe: {_SERVE_USAGE} (inv recipes lists them)")
        return
    wait = flag_float(wait, "--wait", positive=False)
    gpu_gb = flag_float(gpu_memory_gb, "--gpu-memory-gb", example="40") \
        if gpu_memory_gb is not None else None
    rendered = render_named(recipe, set_, target, clustered=bool(nodes),
                            extra_args=extra_args(c), allow_host_access=allow_host_access)
    if gpu_gb is not None:
        rendered.gpu_memory_gb = gpu_gb
    rendered.earlyoom = bool(earlyoom)
    if rendered.topology.mode != "solo" and not nodes:
        raise RecipeError(f"recipe {rendered.name} is a {rendered.topology.nodes}-node "
                          f"{rendered.topology.mode} cluster: pass --nodes ENGINE,ENGINE,... "
                          "(head first)")
    if caches:
        if nodes:
            raise RecipeError("--caches fills one container: warm and serve each node on its own")
        from edgevllm.serve.cache.bundle import read_manifest

        read_manifest(caches)  # a bad bundle is refused before the engine is asked
    if nodes:
        node_list = parse_nodes(split_csv([nodes] if nodes else []), split_csv([node_ips])
                                if node_ips else None, iface, list(node_env or []))
        plan = Cluster(rendered, node_list, ClusterOptions(
            name=cluster or rendered.name, network=network, wait_healthy_s=float(wait),
            iface=iface, ib_hca=ib_hca, rdma=not no_rdma))
        if dry_run:
            print("\n".join(plan.dry_run()))
            return
        head = plan.launch()
        console.step(f"cluster {plan.options.name} up; API on {head} (inv logs --name {head})")
        return
    result = serving.serve(rendered, DockerEngine.named(engine), name=name, dry_run=dry_run,
                           build=build, wait_s=float(wait), caches=caches,
                           find_caches=not no_caches)
    if dry_run:
        print(result)


@cli_task(help={"recipe": "stop every container of this recipe", "name": "stop one container",
                "engine": _ENGINE, "nodes": "cluster: the engines of its nodes",
                "cluster": "cluster name (default: the recipe name)",
                "timeout": "seconds to wait before killing (0: kill at once)"},
          auto_shortflags=False)
def stop(c, recipe=None, name=None, engine=None, nodes=None, cluster=None, timeout="30"):
    """Stop and remove a recipe's container(s) (all nodes of a cluster with --nodes)."""
    from edgevllm.serve import launch as serving
    from edgevllm.serve.cluster import parse_nodes, teardown

    if nodes:
        if not (cluster or recipe):
            raise RecipeError("say which cluster: --cluster NAME or --recipe NAME")
        removed = teardown(cluster or recipe, parse_nodes(split_csv([nodes])))
    else:
        removed = serving.stop(DockerEngine.named(engine), recipe, name,
                               flag_int(timeout, "--timeout", 0, 86400))
    for container in removed:
        console.info(f"removed {container}")


@cli_task(help={"recipe": "the recipe's (head) container", "name": "a container by name",
                "engine": _ENGINE, "tail": "only the last N lines", "follow": "keep following"},
          auto_shortflags=False)
def logs(c, recipe=None, name=None, engine=None, tail=None, follow=False):
    """Show the logs of a recipe's container (the head, for a cluster)."""
    from edgevllm.serve import launch as serving

    if not recipe and not name:
        raise RecipeError("say whose logs: --recipe NAME or --name CONTAINER")
    eng = DockerEngine.named(engine)
    container = serving.one_container(eng, recipe, name)
    if follow:
        proc = eng.follow_logs(container)
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                print(line.decode(errors="replace"), end="")
        finally:
            proc.terminate()
        return
    print(eng.logs(container, tail=flag_int(tail, "--tail", 0) if tail else None, check=True),
          end="")


@cli_task(help={"engine": _ENGINE, "as-json": "print JSON instead of a table"},
          auto_shortflags=False)
def status(c, engine=None, as_json=False):
    """List edgevllm containers on an engine: recipe, cluster role, state and health."""
    from edgevllm.serve import launch as serving

    rows = serving.status(DockerEngine.named(engine))
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    if not rows:
        console.info("no edgevllm containers on this engine")
    for r in rows:
        print(one_line(f"{r['name']:<48} {r['recipe']:<36} {r['role']:<7} {r['state']:<9} "
                       f"{r['health']}"))  # names and labels of any container: escaped


@cli_task(help={**{k: v for k, v in _COMMON.items() if k != "engine"},
                "out": "the Compose file to write (e.g. compose.yaml)",
                "allow-host-access": ALLOW_HELP},
          iterable=["set_"], auto_shortflags=False)
def compose(c, recipe, out, set_=None, target=None, allow_host_access=False):
    """Write a Compose file (service mode: restart policy, health check) for a solo recipe."""
    from edgevllm.serve.compose import write_compose
    from edgevllm.serve.recipe.load import render_named

    path = write_compose(render_named(recipe, set_, target, allow_host_access=allow_host_access),
                         Path(out))
    console.step(f"wrote {path}: docker compose -f {path} up -d")


@cli_task(help={"path": "a spark-vllm-docker recipe YAML, or a folder of them (recursive)",
                "out": "where to write: a file for one recipe, a folder for a folder "
                       "(default: your recipe folder, $XDG_CONFIG_HOME/edgevllm/recipes, "
                       "where inv recipes looks)",
                "force": "overwrite existing files",
                "dry-run": "convert and report, write nothing"}, auto_shortflags=False,
          positional=["path"])
def recipe_import(c, path, out=None, force=False, dry_run=False):
    """Convert spark-vllm-docker recipes; report notes (dropped) and warnings (will not work)."""
    from edgevllm.serve.recipe.importfolder import convert_file, import_dir, import_file

    source = Path(path)
    if source.is_dir():
        rows = import_dir(source, Path(out) if out else None, force=force, dry_run=dry_run)
        _print_import_table(rows)
        failed = [r for r in rows if r.status == "failed"]
        if failed or not rows:
            what = (f"{len(failed)} failed ({', '.join(r.source for r in failed)})" if failed
                    else "no *.yaml recipe under it")
            raise RecipeError(f"{source}: imported {len(rows) - len(failed)} of {len(rows)} "
                              f"recipes: {what}")
        return
    result = (convert_file(source) if dry_run
              else import_file(source, Path(out) if out else None, force=force))
    console.step(f"would write {result.recipe['name']}.yaml" if dry_run
                 else f"wrote {result.path}")
    for warning in result.warnings:
        console.warn(warning)
    for note in result.notes:
        console.info(f"note: {note}")
    if not result.notes and not result.warnings:
        console.info("everything converted")


def _print_import_table(rows) -> None:
    """One line per file (status, notes, warnings, where), then the warnings and failures."""
    width = max([len(r.source) for r in rows] + [6])
    print(f"{'recipe':<{width}}  {'status':<12} {'notes':>5} {'warnings':>8}  written to / error")
    for r in rows:
        notes = len(r.result.notes) if r.result else 0
        warns = len(r.result.warnings) if r.result else 0
        where = str(r.result.path) if r.result else r.error
        print(f"{r.source:<{width}}  {r.status:<12} {notes:>5} {warns:>8}  {where}")
    done = sum(r.status != "failed" for r in rows)
    print(f"{done} imported, {len(rows) - done} failed, "
          f"{sum(len(r.result.notes) for r in rows if r.result)} notes, "
          f"{sum(len(r.result.warnings) for r in rows if r.result)} warnings")
    for r in rows:
        for warning in (r.result.warnings if r.result else []):
            console.warn(f"{r.source}: {warning}")


def doctor_nodes(target: str, nodes: str, image: str) -> None:
    """``inv doctor --nodes``: per node, RDMA devices, what the image sees, NCCL's transport."""
    from edgevllm.common.errors import ClusterError
    from edgevllm.serve.cluster import cluster_env, parse_nodes
    from edgevllm.serve.rdma import check_node
    from edgevllm.specs.targets import load_target

    launch = load_target(target).launch
    if not launch.rdma.devices:
        raise ClusterError(f"target {target} has no RDMA launch settings (launch.rdma): its "
                           "clusters run over TCP")
    env = cluster_env(launch.cluster_env, {})
    findings = [f for node in parse_nodes(split_csv([nodes]))
                for f in check_node(node.name, node.engine, image, launch, env)]
    for f in findings:
        mark = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}[f.status]
        print(one_line(f"{mark}  {f.node:8} {f.name:16} {f.detail}"))
    failed = sorted({f.node for f in findings if f.status == "fail"})
    if failed:
        raise ClusterError(f"RDMA not usable on {', '.join(failed)} (see above): fix it, or run "
                           "the cluster with inv serve --no-rdma (NCCL over TCP only)")
