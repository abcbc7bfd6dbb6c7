"""Timing a start: container start → healthy → first streamed token, against the fixture
streaming server the bench tests use (tests/support/bench_server.py: no GPU here, it stands in
for vLLM). The in-container probe runs for real, first as a host process, then inside a real
container on the host network (so that its ``localhost`` is the fixture server) through
``inv serve --wait``'s code path and ``inv bench RECIPE``'s record.

Only lower bounds are asserted: the server is made healthy a known time after the container
started, and streams its first token a known time after the request; the measured times must
not be shorter. Nothing here asserts a speed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from edgevllm.containers.docker import DockerEngine
from edgevllm.perf.bench import bench_recipe
from edgevllm.perf.report import start_markdown
from edgevllm.perf.sweep import SweepPlan
from edgevllm.serve.launch import serve, stop, wait_timed
from edgevllm.serve.recipe.load import LoadedRecipe, parse_recipe, render
from edgevllm.serve.starttime import docker_time
from support.bench_server import BenchServer, ServerConfig

PROBE = Path(__file__).resolve().parents[1] / "edgevllm" / "serve" / "inimage_startprobe.py"
HEALTHY_AFTER_S = 2.0
TTFT_S = 0.4


def test_docker_times_keep_their_nanoseconds():
    whole = datetime(2026, 11, 24, 13, 40, 1, tzinfo=timezone.utc).timestamp()
    assert docker_time("2026-11-24T13:40:01.123456789Z") == pytest.approx(whole + 0.123456789)
    assert docker_time("2026-11-24T13:40:01Z") == whole


def _probe(server: BenchServer, model: str = "fixture-model", deadline_s: float = 30) -> dict:
    config = {"health": server.url + "/health", "completions": server.url + "/v1/completions",
              "model": model, "deadline_s": deadline_s}
    proc = subprocess.run([sys.executable, str(PROBE), json.dumps(config)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _healthy_later(server: BenchServer, delay_s: float) -> None:
    def flip():
        server.config.healthy = True
    threading.Timer(delay_s, flip).start()


def test_probe_times_health_then_the_first_token():
    with BenchServer(ServerConfig(healthy=False, ttft_s=TTFT_S)) as server:
        began = time.time()
        _healthy_later(server, HEALTHY_AFTER_S)
        found = _probe(server)
    assert "error" not in found, found
    assert found["healthy"] - began >= HEALTHY_AFTER_S
    assert found["first_token"] - found["healthy"] >= TTFT_S
    assert server.requests == 1


def test_probe_says_what_it_could_not_measure():
    with BenchServer(ServerConfig(fail=True)) as server:
        found = _probe(server)
    assert found["healthy"] and "first_token" not in found
    assert found["error"].startswith("first token: HTTP Error 500")
    with BenchServer(ServerConfig(healthy=False)) as server:
        found = _probe(server, deadline_s=1)
    assert found == {"healthy": None, "error": "not healthy before the deadline"}


def test_start_table_puts_a_cold_and_a_warm_start_side_by_side():
    def record(name, health, token):
        return {"name": name, "started": "t", "runs": [
            {"labels": {}, "start": {"health_s": health, "first_token_s": token,
                                     "error": None}}]}
    table = start_markdown([record("cold", 312.4, 318.0), record("warm", 95.1, 96.3)])
    assert table.splitlines()[2:] == ["| cold (t) |  | 312.4 | 318.0 |  |",
                                      "| warm (t) |  | 95.1 | 96.3 |  |"]
    assert start_markdown([{"name": "url", "points": []}]) == ""


# -- in a real container ---------------------------------------------------------------------------
def host_recipe(image: str, port: int, name: str):
    """A container on the host network that only waits: its health check and the start probe
    reach the fixture server on the host through localhost."""
    return parse_recipe({
        "name": name, "description": "start timing against the fixture server",
        "targets": ["thor"], "status": {"thor": "untested"}, "image": image,
        "model": "fixture-model", "defaults": {"port": port},
        "serve": {"command": ["sleep", "600"]},
        "container": {"network": "host", "ports": [], "volumes": [], "shm_size": None,
                      "ipc": None, "gpus": None},
        "health": {"interval": "1s", "timeout": "5s", "retries": 60, "start_period": "1s"},
        "launch": {"ulimits": {"nofile": None}},
    }, "host-recipe")


def _stop_quietly(engine: DockerEngine, name: str) -> None:
    try:
        stop(engine, recipe=name, timeout=1)
    except Exception:  # noqa: BLE001 - nothing to stop
        pass


def test_serve_wait_times_the_start_in_the_container(engine, python_image_native, capsys):
    name = "edgevllm-test-starttime"
    with BenchServer(ServerConfig(healthy=False, ttft_s=TTFT_S)) as server:
        # The fixture server is on the host's loopback: the container joins the host's network,
        # which a recipe may do only with the user's --allow-host-access.
        rendered = render(host_recipe(python_image_native, server.port, name),
                          allow_host_access=True)
        _stop_quietly(engine, name)
        try:
            container = serve(rendered, engine)
            _healthy_later(server, HEALTHY_AFTER_S)  # armed after the container started
            timing = wait_timed(engine, container, rendered, 120)
        finally:
            _stop_quietly(engine, name)
    assert timing.error is None, timing
    assert timing.started_at and timing.health_s >= HEALTHY_AFTER_S
    assert timing.first_token_s >= timing.health_s + TTFT_S
    err = capsys.readouterr().err
    assert f"start: healthy {timing.health_s:.1f} s after the container started, first " \
           f"streamed token at {timing.first_token_s:.1f} s" in err


def test_bench_recipe_records_each_start(engine, python_image_native, tmp_path):
    """inv bench RECIPE: the start is in the record even when the client cannot run (this image
    has no vLLM, so the sweep itself errors)."""
    name = "edgevllm-test-starttime-bench"
    plan = SweepPlan(concurrency=[1], lengths=[(8, 4)], repeats=1, rounds=1, warmup_prompts=0)
    with BenchServer(ServerConfig(ttft_s=TTFT_S)) as server:
        loaded = LoadedRecipe(host_recipe(python_image_native, server.port, name),
                              tmp_path / f"{name}.yaml")
        _stop_quietly(engine, name)
        try:
            record = bench_recipe(loaded, {}, [], plan, engine, tmp_path, wait_s=120,
                                  allow_host_access=True)
        finally:
            _stop_quietly(engine, name)
    (run,) = record["runs"]
    start = run["start"]
    # the record keeps each figure rounded to 0.01 s: two roundings may cost 0.01 s together
    assert start["error"] is None
    assert start["first_token_s"] >= start["health_s"] + TTFT_S - 0.011
    saved = json.loads(Path(record["path"]).read_text())
    assert saved["runs"][0]["start"] == start
    assert "| to health s | to first token s |" in start_markdown([saved])
