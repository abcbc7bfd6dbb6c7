"""``inv bench | roofline``: serving benchmarks against the bandwidth roofline (edgevllm.perf)."""

from __future__ import annotations

import json
from pathlib import Path

from invoke import Exit

from edgevllm.cli._common import cli_task
from edgevllm.common import console
from edgevllm.common.errors import BenchError, ConfigError
from edgevllm.common.grammar import flag_float, flag_int, flag_lengths, flag_port
from edgevllm.common.kv import split_csv
from edgevllm.containers.docker import DockerEngine

_BENCH_HELP = {
    "what": "a recipe to start (inv recipes), or the URL of a running server (http://host:port)",
    "model": "URL: the model name the server serves (default: ask /v1/models)",
    "tokenizer": "URL: tokenizer folder or HF id for prompts (default: --model)",
    "client-python": "URL: a python with vLLM installed that runs the client (default python3)",
    "client-container": "URL: run the client inside this container (the server's image)",
    "concurrency": "comma list (default 1,2,4,8,16)",
    "lengths": "input:output token lengths, comma list (default 1024:128)",
    "sweep": "recipe placeholder values (repeatable): --sweep num_speculative_tokens=8,10,12",
    "set": "override a recipe default (repeatable)",
    "repeats": "runs per point; the report shows median [min-max] (default 3)",
    "rounds": "requests per stream per run: num_prompts = concurrency x rounds (default 4)",
    "seed": "random-prompt seed (default 0)",
    "prompt-file": "JSON lines {\"prompt\": ...} instead of random prompts",
    "warmup": "warm-up requests before the sweep (default 2; 0: none)",
    "target": "device (thor, spark): its memory bandwidth gives the roofline",
    "roofline": "model folder or HF id whose safetensors headers give the roofline",
    "out": "record folder (default out/bench)",
    "report": "WHAT is a record (out/bench/*.json): print its table and plot, measure nothing",
    "compare": "--report: further records to set beside the first (repeatable)",
    "png": "--report: the plot's path (default: beside the first record, .png)",
    "engine": "docker engine for a recipe: local, a context name or ssh://host",
    "wait": "seconds to wait for the recipe's server to be healthy (default 1800)",
    "build": "build the recipe's image if the engine lacks it",
    "health-timeout": "URL: seconds to wait for /health (default 60)",
    "point-timeout": "seconds one run of the client may take (default 1800)",
    "run-timeout": "seconds the whole benchmark may take, every run together (default 21600)",
    "allow-host-access": "a recipe: let its container reach the host (inv serve --help)",
}


def _ints(text: str, flag: str) -> list[int]:
    values = split_csv([text])
    if not values:
        raise ConfigError(f"{flag} '{text}': give positive whole numbers, e.g. 1,2,4")
    return [flag_int(v, flag, 1, 100_000) for v in values]


def _bandwidth(target: str | None) -> float | None:
    if not target:
        return None
    from edgevllm.specs.targets import load_target

    return load_target(target).memory_bandwidth_gbps


def _print_record(record: dict) -> None:
    from edgevllm.perf.report import expectations_markdown, markdown, start_markdown

    print(markdown([record]))
    starts = start_markdown([record])
    if starts:
        print("\n" + starts)
    verdicts = expectations_markdown(record)
    if verdicts:
        print("\n" + verdicts)
    console.info(f"record: {record['path']}")
    if record["status"] != "complete":
        line = f"bench {record['status']}: {record.get('error')}; finished points kept in " \
               f"{record['path']}"
        console.error(line)
        raise Exit(code=130 if record["status"] == "interrupted" else BenchError.exit_code)


def _report(paths: list[str], png: str | None) -> None:
    from edgevllm.perf.record import load_record
    from edgevllm.perf.report import compare_markdown, markdown, plot, start_markdown

    records = [load_record(p) for p in paths]
    print(markdown(records))
    starts = start_markdown(records)
    if starts:
        print("\n" + starts)
    for other in records[1:]:
        print("\n" + compare_markdown(records[0], other))
    out = Path(png) if png else Path(paths[0]).with_suffix(".png")
    plot(records, out)
    console.info(f"plot: {out}")


@cli_task(help=_BENCH_HELP, iterable=["sweep", "set_", "compare"], positional=["what"],
          auto_shortflags=False)
def bench(c, what, model=None, tokenizer=None, client_python="python3",
          client_container=None, concurrency="1,2,4,8,16", lengths="1024:128", sweep=None,
          set_=None, repeats="3", rounds="4", seed="0", prompt_file=None, warmup="2",
          target=None, roofline=None, out="out/bench", report=False, compare=None, png=None,
          engine=None, wait="1800", build=False, health_timeout="60", point_timeout="1800",
          run_timeout="21600", allow_host_access=False):
    """Benchmark a recipe's server or a URL with vLLM's own client; --report compares records.

    inv bench RECIPE | inv bench http://HOST:PORT | inv bench --report A.json [--compare B.json]
    """
    from edgevllm.perf.sweep import SweepPlan

    if report:
        return _report([what, *(compare or [])], png)
    url = _server_url(what) if what.startswith(("http://", "https://")) else None
    plan = SweepPlan(concurrency=_ints(str(concurrency), "--concurrency"),
                     lengths=flag_lengths(lengths), repeats=flag_int(repeats, "--repeats", 1, 1000),
                     rounds=flag_int(rounds, "--rounds", 1, 100_000),
                     seed=flag_int(seed, "--seed", 0, 2**32 - 1), prompt_file=prompt_file,
                     warmup_prompts=flag_int(warmup, "--warmup", 0, 100_000),
                     health_timeout_s=flag_float(health_timeout, "--health-timeout"),
                     point_timeout_s=flag_float(point_timeout, "--point-timeout"),
                     run_timeout_s=flag_float(run_timeout, "--run-timeout"))
    wait = flag_float(wait, "--wait", positive=False)
    progress = console.step
    if url:
        record = _bench_url(url, model, tokenizer, client_python, client_container, plan,
                            target, roofline, out, engine, sweep, progress)
    else:
        record = _bench_recipe(what, set_, target, sweep, plan, engine, out, wait, build,
                               progress, allow_host_access)
    _print_record(record)


def _server_url(text: str) -> str:
    """``http://HOST:PORT[/]``: a host and, when given, a port from 1 to 65535."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        port, parts = -1, None
    if parts is None or not parts.hostname or port == -1 or any(c.isspace() for c in text):
        raise ConfigError(f"'{text}' is not a server URL: give http://HOST:PORT")
    if port is not None:
        flag_port(port, "the URL's port")
    return text


def _bench_url(url, model, tokenizer, client_python, client_container, plan, target, roofline,
               out, engine, sweep, progress) -> dict:
    from edgevllm.perf.bench import bench_url
    from edgevllm.perf.client import ExecRunner, PythonRunner
    from edgevllm.perf.sweep import first_model_id, openai_models

    if sweep:
        raise BenchError("--sweep restarts the server per value: give a recipe, not a URL")
    # Before anything is written: an endpoint that is not an OpenAI server is one line now,
    # not an empty table after two health timeouts.
    models = openai_models(url.rstrip("/"), plan.health_timeout_s)
    name = model or first_model_id(models, url.rstrip("/"))
    runner = (ExecRunner(DockerEngine.named(engine), client_container) if client_container
              else PythonRunner(client_python))
    return bench_url(url, name, tokenizer, plan, runner, Path(out), target=target,
                     bandwidth_gbps=_bandwidth(target), roofline_model=roofline,
                     progress=progress)


def _bench_recipe(recipe, sets, target, sweep, plan, engine, out, wait, build, progress,
                  allow_host_access=False):
    from edgevllm.perf.bench import bench_recipe
    from edgevllm.serve.recipe.load import load_recipe, parse_sets

    overrides = parse_sets([str(s) for s in sets or []])
    if target:
        overrides["target"] = target
    loaded = load_recipe(recipe)
    bandwidth = _bandwidth(target or (loaded.recipe.targets[0]
                                      if len(loaded.recipe.targets) == 1 else None))
    return bench_recipe(loaded, overrides, list(sweep or []), plan, DockerEngine.named(engine),
                        Path(out), wait_s=float(wait), build=build, bandwidth_gbps=bandwidth,
                        progress=progress, allow_host_access=bool(allow_host_access))


@cli_task(help={"model": "model folder, HF cache id or HF id (org/name): headers only",
                "target": "device whose memory bandwidth divides the bytes (thor, spark)",
                "json": "also write the figures as JSON to this file"},
          positional=["model"], auto_shortflags=False)
def roofline(c, model, target=None, json_=None):
    """Bytes of weights read per decoded token and the single-stream tok/s ceiling."""
    from edgevllm.common.fsutil import atomic_write_text
    from edgevllm.perf.roofline import format_roofline, weights_per_token

    bandwidth = _bandwidth(target)  # an unknown target is refused before any download
    roof = weights_per_token(model)
    if target and not bandwidth:
        raise BenchError(f"targets/{target}.yaml has no memory_bandwidth_gbps")
    if bandwidth:
        roof.with_bandwidth(bandwidth)
    print(format_roofline(roof))
    if json_:
        atomic_write_text(json_, json.dumps(roof.as_dict(), indent=2) + "\n")
