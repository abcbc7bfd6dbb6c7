"""``inv bench``: benchmark a running server (``--url``) or a recipe's server, into one record.

Contract: ``bench_url`` measures a server that is already up, with a given client runner.
``bench_recipe`` starts the recipe's container through ``edgevllm.serve.launch`` once per value of
the swept placeholders (``--sweep num_speculative_tokens=8,10,12``), runs vLLM's client inside
that container (client and server from one image), records image digest, lock hash, rendered
command, device facts (``nvidia-smi`` in the container) and vLLM version, then stops the
container. Both return the record (also written under ``out/bench/``), with the roofline and
the recipe's expectations judged.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

from edgevllm.common import labels
from edgevllm.common.errors import BenchError, RecipeError, RooflineUnknown
from edgevllm.common.kv import pair_error, split_pair
from edgevllm.containers.docker import DockerEngine
from edgevllm.perf.client import ClientRunner, ExecRunner, within
from edgevllm.perf.expect import judge, parse_expectations
from edgevllm.perf.record import new_record, record_path, save_record
from edgevllm.perf.roofline import weights_per_token
from edgevllm.perf.sweep import Server, SweepPlan, run_sweep

RESULT_DIR_IN_CONTAINER = "/tmp/edgevllm-bench"
# A server given by URL was started by someone else: its start is not timed (a recipe's is).
URL_START = {"started_at": None, "health_s": None, "first_token_s": None,
             "error": "the server was already running (--url); inv bench RECIPE times the start"}
_SMI_FIELDS = "name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.limit,pstate"


def roofline_facts(model: str | None, bandwidth_gbps: float | None) -> dict | None:
    """The roofline for the record, or ``{"unknown": reason}``; never guesses."""
    if not model:
        return None
    try:
        roof = weights_per_token(model)
    except RooflineUnknown as exc:
        return {"unknown": str(exc)}
    if bandwidth_gbps:
        roof.with_bandwidth(bandwidth_gbps)
    return roof.as_dict()


def finish(record: dict, path: Path, expectations: list) -> dict:
    """Mark a sweep that ran to the end complete, judge expectations, save."""
    if record["status"] == "running":
        record["status"] = "complete"
    record["expectations"] = judge(expectations, record)
    save_record(record, path)
    record["path"] = str(path)
    return record


def bench_url(url: str, model: str, tokenizer: str | None, plan: SweepPlan,
              runner: ClientRunner, out_dir: Path, *, target: str | None = None,
              bandwidth_gbps: float | None = None, roofline_model: str | None = None,
              served_model_name: str | None = None,
              progress: Callable[[str], None] = lambda line: None) -> dict:
    """Benchmark the server at ``url`` (already running)."""
    path = record_path(out_dir, url.split("://", 1)[-1])
    record = new_record(url, target=target, url=url, model=model, plan=_plan_dict(plan),
                        start=URL_START,
                        client=runner.where, vllm_version=runner.vllm_version(),
                        roofline=roofline_facts(roofline_model, bandwidth_gbps))
    if isinstance(runner, ExecRunner):  # the client's container: what it runs on
        record["device"] = device_facts(runner)
    save_record(record, path)
    server = Server(url.rstrip("/"), model, tokenizer or model, served_model_name)
    run_sweep(within(runner, plan.run_timeout_s), server, plan, record, path,
              str(out_dir / ".results"), progress)
    return finish(record, path, [])


def sweep_values(items: list[str]) -> list[dict]:
    """``["k=1,2", "j=a"]`` -> every combination as override dicts (``[{}]`` when none)."""
    from edgevllm.serve.recipe.load import parse_sets

    axes = []
    for item in items:
        example = "NAME=V1,V2,... (a recipe placeholder)"
        key, values = split_pair(item, "--sweep", BenchError, example)
        if not values:
            raise pair_error(item, "--sweep", BenchError, example)
        axes.append([parse_sets([f"{key}={v}"]) for v in values.split(",")])
    return [dict(kv for part in combo for kv in part.items())
            for combo in itertools.product(*axes)] or [{}]


def _plan_dict(plan: SweepPlan) -> dict:
    return {"concurrency": plan.concurrency, "lengths": [list(x) for x in plan.lengths],
            "repeats": plan.repeats, "rounds": plan.rounds, "seed": plan.seed,
            "prompt_file": plan.prompt_file, "warmup_prompts": plan.warmup_prompts}


def image_facts(engine: DockerEngine, image: str) -> dict:
    info = engine.image_inspect(image)
    image_labels = (info.get("Config") or {}).get("Labels") or {}
    return {"ref": image, "id": info.get("Id"), "repo_digests": info.get("RepoDigests") or [],
            "lock_sha256": image_labels.get(labels.LOCK_SHA)}


def device_facts(runner: ExecRunner) -> dict:
    """What ``nvidia-smi`` reports inside the container; fields it cannot read stay out."""
    text = runner.shell(["nvidia-smi", f"--query-gpu={_SMI_FIELDS}",
                         "--format=csv,noheader,nounits"])
    if not text or not text.strip():
        return {"nvidia_smi": "not readable in the container"}
    values = [v.strip() for v in text.strip().splitlines()[0].split(",")]
    return {key: value for key, value in zip(_SMI_FIELDS.split(","), values, strict=False)
            if value and "N/A" not in value and "Not Supported" not in value}


def _start(rendered, engine: DockerEngine, wait_s: float, build: bool) -> tuple[str, dict]:
    """Start the recipe's container and wait for health; (container, its start timing)."""
    from edgevllm.serve.launch import serve, wait_timed

    container = serve(rendered, engine, build=build)
    return container, wait_timed(engine, container, rendered, wait_s).to_json()


def _stop(engine: DockerEngine, container: str) -> None:
    from edgevllm.serve.launch import stop

    stop(engine, name=container, timeout=30)


def bench_recipe(loaded, sets: dict, sweeps: list[str], plan: SweepPlan, engine: DockerEngine,
                 out_dir: Path, *, wait_s: float = 1800, build: bool = False,
                 bandwidth_gbps: float | None = None,
                 progress: Callable[[str], None] = lambda line: None,
                 allow_host_access: bool = False) -> dict:
    """Serve the recipe once per swept value, benchmark it from inside its container, stop it."""
    from edgevllm.serve.recipe.load import render

    combos = sweep_values(sweeps)
    first = render(loaded, {**sets, **combos[0]}, allow_host_access=allow_host_access)
    path = record_path(out_dir, first.name)
    record = new_record(first.name, target=first.target, model=first.model,
                        plan=_plan_dict(plan), sweep=combos,
                        roofline=roofline_facts(first.model, bandwidth_gbps), runs=[])
    expectations = parse_expectations(loaded.recipe.expect, first.source)
    ends = time.monotonic() + plan.run_timeout_s  # the whole run, every swept value together
    for combo in combos:
        rendered = render(loaded, {**sets, **combo}, allow_host_access=allow_host_access)
        left = replace(plan, run_timeout_s=max(0.0, ends - time.monotonic()))
        if not _bench_one(rendered, combo, engine, left, record, path, wait_s, build, progress):
            break
    return finish(record, path, expectations)


def _bench_one(rendered, combo: dict, engine: DockerEngine, plan: SweepPlan, record: dict,
               path: Path, wait_s: float, build: bool, progress) -> bool:
    """One server start + sweep; False when the sweep must stop (Ctrl-C, errors)."""
    progress(f"starting {rendered.name} {combo or ''}".rstrip())
    try:
        container, start = _start(rendered, engine, wait_s, build)
    except RecipeError as exc:  # never healthy, exited, or a fail_on_log line: keep a record
        record.update(status="unhealthy", error=str(exc))
        save_record(record, path)
        return False
    try:
        runner = ExecRunner(engine, container)
        record["runs"].append({"labels": combo, "container": container, "start": start,
                               "command": rendered.command, "values": _plain(rendered.values),
                               "image": image_facts(engine, rendered.image or container),
                               "device": device_facts(runner),
                               "vllm_version": runner.vllm_version()})
        record.setdefault("vllm_version", record["runs"][-1]["vllm_version"])
        served = rendered.values.get("served_model_name")
        server = Server(f"http://localhost:{rendered.health_port}", rendered.model,
                        rendered.model, str(served) if served else None, labels=combo)
        run_sweep(within(runner, plan.run_timeout_s), server, replace(plan, health_timeout_s=60),
                  record, path, RESULT_DIR_IN_CONTAINER, progress)
    finally:
        _stop(engine, container)
    return record["status"] == "running"


def _plain(values: dict) -> dict:
    return {k: v if isinstance(v, (str, int, float, bool, type(None))) else str(v)
            for k, v in values.items()}
