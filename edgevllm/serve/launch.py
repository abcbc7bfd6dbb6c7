"""Serve a rendered recipe on one engine (solo); stop it, show logs and status.

Containers are started through ``DockerEngine`` with argument lists: no value ever passes through
a shell, and ``--dry-run`` prints the exact ``docker run`` line. Secrets (``HF_TOKEN``...) are
passed by name (``-e HF_TOKEN``): their values are in no argv, dry-run output, label, log or file.
Every container carries ``io.edgevllm.recipe=<name>``; stop/logs/status find containers by it.

The device's launch defaults (``Rendered.launch``: ulimits, env, ``HF_HOME``, JIT cache mounts in
one host folder per image id) and the recipe's files (read-only) are part of every ``docker run``.
``--gpu-memory-gb`` / ``--earlyoom`` wrap the command in ``edgevllm/serve/inimage_entry.py``, which
runs inside the container. Each container is labelled with its memory budget in GiB
(``io.edgevllm.memory-gib``): a new recipe must fit beside the running ones. The same recipe
as a Compose file: ``serve/compose.py``.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

from edgevllm.common import console, labels
from edgevllm.common.errors import EdgeVllmError, RecipeError
from edgevllm.common.poll import poll
from edgevllm.containers.docker import DockerEngine, RunOptions
from edgevllm.serve.cache.harvest import bundle_line, start_with_caches
from edgevllm.serve.recipe.load import BuildRef, Rendered

LABEL_RECIPE = labels.RECIPE
LABEL_CLUSTER = labels.CLUSTER
LABEL_ROLE = labels.ROLE
LABEL_IMAGE = labels.IMAGE
LABEL_MEMORY = labels.MEMORY_GIB
UNKNOWN_IMAGE_ID = "IMAGE-ID"  # dry-run without the image: the folder name it will have
VLLM_DEFAULT_UTILIZATION = 0.9  # vLLM's --gpu-memory-utilization when a recipe gives none


def container_name(rendered: Rendered) -> str:
    return f"edgevllm-{rendered.name}"


def health_command(port: int, path: str) -> list[str]:
    """Probe /health from inside the container with the image's python3 (vLLM images have it)."""
    url = f"http://localhost:{port}/{path.lstrip('/')}"
    code = f'import urllib.request; urllib.request.urlopen("{url}", timeout=5)'
    return ["python3", "-c", code]


def _expand_volume(volume: str, engine: DockerEngine) -> str:
    """``~`` in a bind source means the home folder of the machine running a local engine.

    docker itself does not expand it; for a remote engine the path must be absolute on that node.
    """
    if not volume.startswith("~"):
        return volume
    if engine.context or engine.host:
        raise RecipeError(f"volume '{volume}' starts with ~ but engine {engine.describe()} is "
                          "remote: pass an absolute path on that node (--set hf_cache=/path)")
    source, sep, rest = volume.partition(":")
    return os.path.expanduser(source) + sep + rest


def run_options(rendered: Rendered, engine: DockerEngine, *, name: str,
                command: list[str] | None = None, labels: dict[str, str] | None = None,
                network: str | None = None, hostname: str | None = None,
                env: dict[str, str] | None = None, image: str | None = None,
                ports: bool = True, restart: str | None = None,
                entrypoint: str | None = None, healthcheck: bool = True,
                image_id: str | None = None,
                image_labels: dict[str, str] | None = None) -> RunOptions:
    """The ``docker run`` options of one recipe container (solo, or one node of a cluster).

    ``image_id`` names the JIT cache folder (``UNKNOWN_IMAGE_ID`` when not known: dry-run);
    ``image_labels`` size the driver's compute cache (verify's record; see cache/compute.py).
    """
    c = rendered.container
    net = network or c.network
    extra = ulimit_flags(rendered) + list(c.extra)
    if healthcheck:
        extra += _health_flags(rendered)
    budget = memory_budget_gib(rendered)
    memory = {LABEL_MEMORY: f"{budget:g}"} if budget is not None else {}
    return RunOptions(
        image=image or require_image(rendered),
        command=list(command if command is not None else entry_command(rendered)),
        name=name, detach=True,
        env=container_env(rendered, env, image_labels),
        env_names=list(rendered.secrets),
        volumes=[_expand_volume(v, engine) for v in rendered.volumes]
        + launch_volumes(rendered, image_id),
        ports=list(rendered.ports) if ports and net != "host" else [],
        network=net, hostname=hostname, ipc=c.ipc, shm_size=c.shm_size, runtime=c.runtime,
        gpus=c.gpus, restart=restart if restart is not None else rendered.restart,
        entrypoint=entrypoint if entrypoint is not None else c.entrypoint,
        labels={LABEL_RECIPE: rendered.name, **memory, **(labels or {})},
        extra=extra,
    )


# -- launch defaults (targets/<target>.yaml launch:, overridden by the recipe's launch:) --------
def launch_env(rendered: Rendered) -> dict[str, str]:
    env = dict(rendered.launch.env)
    if rendered.launch.hf_home:
        env["HF_HOME"] = rendered.launch.hf_home
    return env


def compute_cache_of(rendered: Rendered, env: dict[str, str] | None = None,
                     image_labels: dict[str, str] | None = None):
    """The driver's compute cache of this container (``cache.compute.ComputeCache``)."""
    from edgevllm.serve.cache.compute import compute_cache

    given = {**launch_env(rendered), **rendered.env, **(env or {})}
    return compute_cache(rendered.launch.jit_caches, given, image_labels)


def container_env(rendered: Rendered, env: dict[str, str] | None = None,
                  image_labels: dict[str, str] | None = None) -> dict[str, str]:
    """Launch defaults, then the compute cache's variables, then the recipe's env, then ``env``."""
    added = compute_cache_of(rendered, env, image_labels).env
    return {**launch_env(rendered), **added, **rendered.env, **(env or {})}


def ulimit_flags(rendered: Rendered) -> list[str]:
    return [arg for name, value in rendered.launch.ulimits.items()
            for arg in ("--ulimit", f"{name}={value}")]


def jit_folder(image_id: str | None) -> str:
    """One host folder per image: ``sha256:abcd…`` → ``abcd…`` (first 16 hex digits)."""
    from edgevllm.serve.cache.bundle import image_folder

    return image_folder(image_id) if image_id else UNKNOWN_IMAGE_ID


def launch_volumes(rendered: Rendered, image_id: str | None) -> list[str]:
    root = rendered.launch.jit_cache_root.rstrip("/")
    folder = jit_folder(image_id)
    volumes = [f"{root}/{folder}/{name}:{path}"
               for name, path in rendered.launch.jit_caches.items()]
    return volumes + [f"{host}:{mount}:ro" for host, mount in rendered.files]


def entry_command(rendered: Rendered, command: list[str] | None = None,
                  server: bool = True, earlyoom: bool = True) -> list[str]:
    """The command, wrapped in the in-container entry when a GiB budget or earlyoom is asked for.

    ``server``: the command is the model server (gets the memory fraction); a Ray ``ray start``
    command gets earlyoom only, and the server exec'd beside it (``earlyoom=False``) the fraction.
    """
    command = list(command if command is not None else rendered.command)
    config: dict[str, object] = {}
    if server and rendered.gpu_memory_gb is not None:
        config["gpu_memory_gib"] = rendered.gpu_memory_gb
    if rendered.earlyoom and earlyoom:
        config["earlyoom"] = list(rendered.launch.earlyoom_args)
    if not config:
        return command
    source = (Path(__file__).with_name("inimage_entry.py")).read_text()
    return ["python3", "-c", source, json.dumps(config, separators=(",", ":")), *command]


# -- memory budget: several models on one box ---------------------------------------------------
def memory_budget_gib(rendered: Rendered) -> float | None:
    """GiB this recipe may take: --gpu-memory-gb, else its (or vLLM's default) fraction × device
    memory."""
    if rendered.gpu_memory_gb is not None:
        return float(rendered.gpu_memory_gb)
    device = rendered.launch.device_memory_gib
    if device is None or not _is_vllm_serve(rendered.command):
        return None
    return round(_utilization(rendered.command) * device, 1)


def _utilization(command: list[str]) -> float:
    for index, arg in enumerate(command):
        raw = None
        if arg == "--gpu-memory-utilization" and index + 1 < len(command):
            raw = command[index + 1]
        elif arg.startswith("--gpu-memory-utilization="):
            raw = arg.split("=", 1)[1]
        if raw is not None:
            try:
                return float(raw)
            except ValueError:
                break
    return VLLM_DEFAULT_UTILIZATION


def _is_vllm_serve(command: list[str]) -> bool:
    return len(command) >= 2 and command[0].endswith("vllm") and command[1] == "serve"


def check_memory_fits(rendered: Rendered, engine: DockerEngine) -> None:
    """Refuse a recipe whose budget does not fit beside the running edgevllm containers."""
    need, device = memory_budget_gib(rendered), rendered.launch.device_memory_gib
    if need is None or device is None:
        return
    running = []
    for row in engine.containers(label=LABEL_MEMORY, all=False):
        held = _labels(row).get(LABEL_MEMORY)
        try:
            running.append((row["Names"], float(held or 0)))
        except ValueError:
            continue
    used = sum(gib for _, gib in running)
    if used + need > device:
        listing = ", ".join(f"{name} ({gib:g} GiB)" for name, gib in running) or "none"
        raise RecipeError(f"recipe {rendered.name} needs {need:g} GiB but only "
                          f"{max(device - used, 0):g} of {device:g} GiB are free; running: "
                          f"{listing}; stop one (inv stop) or lower --gpu-memory-gb")


def _health_flags(rendered: Rendered) -> list[str]:
    h = rendered.health
    # --health-cmd is one string that docker runs with /bin/sh inside the container; it holds only
    # the port and path (validated above), never a user value or secret.
    probe = shlex.join(health_command(rendered.health_port, rendered.health_path))
    return ["--health-cmd", probe, "--health-interval", h.interval, "--health-timeout", h.timeout,
            "--health-retries", str(h.retries), "--health-start-period", h.start_period]


def require_image(rendered: Rendered) -> str:
    if not rendered.image:
        raise RecipeError(f"{rendered.source}: no 'image' to run: build it first (--build) "
                          "or add image: <tag or repo@sha256:...>")
    return rendered.image


# -- image pinning ------------------------------------------------------------------------------
def resolve_image(rendered: Rendered, engine: DockerEngine, build: bool = False) -> str:
    """The image to run: the pinned one if the engine has it, else build on demand (``--build``).

    A digest reference (``repo@sha256:...``) is checked against the image's RepoDigests, so a
    re-tagged image with the same name never stands in for the tested one.
    """
    if rendered.image and engine.image_exists(rendered.image):
        check_pinned_digest(rendered.image, engine.image_inspect(rendered.image), engine.describe())
        return rendered.image
    if rendered.build and (build or not rendered.image):
        return build_on_demand(rendered.build, rendered.name, engine)
    hint = (f" or pass --build to build it from {rendered.build.spec or rendered.build.lock}"
            if rendered.build else "")
    raise RecipeError(f"image '{rendered.image}' of recipe {rendered.name} is not on engine "
                      f"{engine.describe()}: pull or load it{hint}")


def check_pinned_digest(ref: str, inspect: dict, where: str) -> None:
    if "@sha256:" not in ref:
        return
    digest = ref.split("@", 1)[1]
    repo_digests = inspect.get("RepoDigests") or []
    if inspect.get("Id") != digest and not any(d.endswith("@" + digest) for d in repo_digests):
        raise RecipeError(f"image {ref} on engine {where} does not carry digest {digest}; "
                          "pull the pinned image again")


def build_on_demand(build: BuildRef, recipe: str, engine: DockerEngine | None = None) -> str:
    """Build the recipe's image with the build pipeline and return the tag it produced."""
    # imported here: only a recipe without an image builds, and the pipeline pulls in every stage
    from edgevllm.builder.pipeline import build as run_build
    from edgevllm.common.paths import cache_dir, project_root
    from edgevllm.specs.buildspec import load_spec_file, lock_overrides, spec_from_dict
    from edgevllm.specs.lock import read_lock

    what = f"--spec {build.spec}" if build.spec else f"--lock {build.lock}"
    root = project_root()
    if build.spec:
        spec, lock_path = load_spec_file(root / build.spec), None
    else:
        lock_path = root / str(build.lock)
        spec = spec_from_dict(lock_overrides(read_lock(lock_path)), str(lock_path))
    console.step(f"building the image of recipe {recipe} ({what})")
    return run_build(spec, cache_dir("recipe-builds"), engine, lock_path=lock_path).image


# -- solo serve ---------------------------------------------------------------------------------
def serve(rendered: Rendered, engine: DockerEngine, *, name: str | None = None,
          dry_run: bool = False, build: bool = False, wait_s: float = 0,
          caches: Path | str | None = None, find_caches: bool = True) -> str:
    """Start the recipe's container; return its name (or, with ``dry_run``, the docker command).
    ``caches``: a JIT cache bundle, else (``find_caches``) the one of this recipe and image."""
    if rendered.topology.mode != "solo":
        raise RecipeError(f"recipe {rendered.name} is a {rendered.topology.nodes}-node "
                          f"{rendered.topology.mode} cluster: pass --nodes ENGINE,ENGINE,...")
    cname = name or container_name(rendered)
    if dry_run:
        built_from = (rendered.build.spec or rendered.build.lock) if rendered.build else None
        image = rendered.image or f"<image built from {built_from}>"
        known = _known_image(engine, rendered.image)
        options = run_options(rendered, engine, name=cname, image=image,
                              image_id=known.get("Id"), image_labels=_labels_of(known))
        console.info(compute_cache_of(rendered, image_labels=_labels_of(known)).describe())
        console.info(bundle_line(rendered, known.get("Id"), caches, find_caches))
        return engine.command_line(options.argv())
    engine.check_daemon()
    image = resolve_image(rendered, engine, build)
    existing = engine.container_inspect(cname)
    if existing is not None:
        state = existing.get("State", {}).get("Status", "?")
        raise RecipeError(f"container {cname} already exists ({state}): "
                          f"inv stop --recipe {rendered.name} first, or pass --name")
    check_memory_fits(rendered, engine)
    inspect = engine.image_inspect(image)
    options = run_options(rendered, engine, name=cname, image=image, image_id=inspect["Id"],
                          image_labels=_labels_of(inspect))
    start_with_caches(engine, options, rendered, inspect["Id"], caches, find_caches)
    console.step(f"started {cname} ({image}) on engine {engine.describe()}")
    if wait_s > 0:
        wait_timed(engine, cname, rendered, wait_s)
    return cname


def wait_timed(engine: DockerEngine, container: str, rendered: Rendered, timeout_s: float):
    """``wait_healthy``, timing the start meanwhile (``starttime.StartTiming``, also printed)."""
    from edgevllm.serve.starttime import StartClock, probe_config

    clock = StartClock(engine, container, probe_config(rendered, timeout_s))
    wait_healthy(engine, container, timeout_s, rendered.health.fail_on_log)
    timing = clock.result()
    console.step(timing.describe())
    return timing


def _known_image(engine: DockerEngine, image: str | None) -> dict:
    """The image's inspect record for a dry-run; {} without one (the folder shows IMAGE-ID)."""
    if not image:
        return {}
    try:
        return engine.image_inspect(image)
    except EdgeVllmError:
        return {}


def _labels_of(inspect: dict) -> dict[str, str]:
    return inspect.get("Config", {}).get("Labels") or {}


def wait_healthy(engine: DockerEngine, container: str, timeout_s: float,
                 fail_on_log: list[str] | None = None) -> None:
    """Wait for Docker's health check to report healthy; fail on exit, unhealthy or a bad log."""

    def healthy() -> bool | None:
        info = engine.container_inspect(container)
        if info is None:
            raise RecipeError(f"container {container} disappeared while starting")
        state = info.get("State", {})
        health = (state.get("Health") or {}).get("Status")
        if state.get("Status") in ("exited", "dead"):
            raise RecipeError(f"container {container} exited with code {state.get('ExitCode')}: "
                              f"inv logs --name {container}")
        _check_logs(engine, container, fail_on_log)
        if health == "unhealthy":
            raise RecipeError(f"container {container} is unhealthy: inv logs --name {container}")
        return True if health == "healthy" else None

    if poll(healthy, timeout_s, interval_s=2) is None:
        raise RecipeError(f"container {container} not healthy after {timeout_s:.0f}s; "
                          f"it keeps starting: inv logs --name {container}")


def _check_logs(engine: DockerEngine, container: str, patterns: list[str] | None) -> None:
    if not patterns:
        return
    text = engine.logs(container)
    for pattern in patterns:
        if pattern in text:
            raise RecipeError(f"container {container} logged '{pattern}', which this recipe treats "
                              "as a failed preflight; fix the image or recipe")


# -- stop / logs / status -----------------------------------------------------------------------
def find_containers(engine: DockerEngine, recipe: str | None = None,
                    name: str | None = None) -> list[dict]:
    rows = engine.containers(label=f"{LABEL_RECIPE}={recipe}" if recipe else LABEL_RECIPE)
    if name:
        rows = [r for r in rows if r.get("Names") == name or r.get("ID", "").startswith(name)]
    return rows


def stop(engine: DockerEngine, recipe: str | None = None, name: str | None = None,
         timeout: int = 30) -> list[str]:
    """Stop and remove every container of a recipe (or one by name); return their names."""
    if not recipe and not name:
        raise RecipeError("say what to stop: --recipe NAME, --name CONTAINER, or --cluster NAME "
                          "--nodes ENGINES")
    rows = find_containers(engine, recipe, name)
    if not rows:
        raise RecipeError(f"no edgevllm container for {recipe or name} on engine "
                          f"{engine.describe()} (inv status lists them)")
    stopped = []
    for row in rows:
        engine.stop(row["Names"], timeout=timeout)
        engine.remove_container(row["Names"])
        stopped.append(row["Names"])
    return stopped


def one_container(engine: DockerEngine, recipe: str | None, name: str | None) -> str:
    if name and not recipe:
        return name
    rows = find_containers(engine, recipe, name)
    if not rows:
        raise RecipeError(f"no edgevllm container for {recipe or name} on engine "
                          f"{engine.describe()} (inv status lists them)")
    heads = [r for r in rows if _labels(r).get(LABEL_ROLE, "head") == "head"]
    return (heads or rows)[0]["Names"]


def _labels(row: dict) -> dict[str, str]:
    text = row.get("Labels") or ""
    pairs = (p.partition("=") for p in text.split(",") if p)
    return {k: v for k, _, v in pairs}


def status(engine: DockerEngine) -> list[dict[str, str]]:
    """One row per edgevllm container on the engine: name, recipe, role, image, state, health."""
    rows = []
    for row in engine.containers(label=LABEL_RECIPE):
        info = engine.container_inspect(row["Names"]) or {}
        state = info.get("State", {})
        labels = info.get("Config", {}).get("Labels") or _labels(row)
        rows.append({
            "name": row["Names"], "recipe": labels.get(LABEL_RECIPE, ""),
            "cluster": labels.get(LABEL_CLUSTER, ""), "role": labels.get(LABEL_ROLE, "solo"),
            "image": row.get("Image", ""), "state": state.get("Status", row.get("State", "")),
            "health": (state.get("Health") or {}).get("Status", "-"),
        })
    return rows
