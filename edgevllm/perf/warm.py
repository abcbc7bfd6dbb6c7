"""``inv warm RECIPE``: start the recipe's server once, warm it up, harvest its JIT caches.

The server starts exactly as ``inv serve`` starts it (``serve.launch.serve``: same options, same
per-image cache folders, a bundle of this image already there filled in first), the start is
timed while it waits for health, then vLLM's own benchmark client (``perf.client``, inside the
container unless a client python is given) sends a short warm-up: ``prompts`` requests at each
``(input, output)`` length, one at a time, so that the kernels those shapes need are compiled and
cached. The container is stopped, its caches are copied into a bundle
(``serve.cache.harvest.harvest``: sha256 per file, every cubin and shared object read by verify for
the target), and the container is removed.
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from edgevllm.common.errors import BenchError
from edgevllm.containers.docker import DockerEngine
from edgevllm.perf.client import ClientArgs, ClientRunner, ExecRunner, run_once
from edgevllm.perf.sweep import wait_for_health

RESULT_DIR_IN_CONTAINER = "/tmp/edgevllm-warm"
DEFAULT_LENGTHS = [(128, 32), (1024, 16)]  # a short and a longer prefill, a few decode steps


@dataclass
class WarmPlan:
    prompts: int = 2  # per length
    lengths: list[tuple[int, int]] = field(default_factory=lambda: list(DEFAULT_LENGTHS))
    tokenizer: str | None = None  # default: the recipe's model
    wait_s: float = 1800  # for health
    request_timeout_s: float = 900


@dataclass
class WarmResult:
    bundle: Path
    manifest: object  # serve.cache.bundle.Manifest
    start: dict  # starttime.StartTiming.to_json()
    requests: int  # warm-up requests completed


def warm_recipe(rendered, engine: DockerEngine, out_dir: Path, plan: WarmPlan, *,
                build: bool = False,
                runner_for: Callable[[str], ClientRunner] | None = None,
                progress: Callable[[str], None] = lambda line: None) -> WarmResult:
    """Serve, warm up, stop, harvest, remove; see module doc. ``runner_for(container)``: where
    the client runs (default: inside the container)."""
    from edgevllm.serve.cache.bundle import bundle_key
    from edgevllm.serve.cache.harvest import harvest
    from edgevllm.serve.launch import serve, stop, wait_timed

    container = serve(rendered, engine, build=build)
    try:
        start = wait_timed(engine, container, rendered, plan.wait_s).to_json()
        runner = runner_for(container) if runner_for else ExecRunner(engine, container)
        progress(f"warming up {rendered.name}: {plan.prompts} requests at "
                 f"{', '.join(f'{i}:{o}' for i, o in plan.lengths)} tokens ({runner.where})")
        done = warm_up(runner, rendered, plan)
        info = engine.container_inspect(container) or {}
        engine.stop(container, timeout=30)
        key = bundle_key(rendered, str(info.get("Image")))
        progress(f"harvesting the JIT caches of image {key.image_id[7:19]}")
        bundle, manifest = harvest(engine, container, key, dict(rendered.launch.jit_caches),
                                   out_dir)
    finally:
        stop(engine, name=container, timeout=10)
    return WarmResult(bundle, manifest, start, done)


def warm_up(runner: ClientRunner, rendered, plan: WarmPlan) -> int:
    """The warm-up requests through vLLM's client; the number completed (every one must)."""
    base_url = f"http://localhost:{rendered.health_port}"
    if not isinstance(runner, ExecRunner):  # a client outside the container checks the way in
        wait_for_health(base_url, 60)
    with contextlib.ExitStack() as stack:
        result_dir = (RESULT_DIR_IN_CONTAINER if isinstance(runner, ExecRunner) else
                      stack.enter_context(tempfile.TemporaryDirectory(prefix="edgevllm-warm-")))
        return sum(_warm_one(runner, rendered, plan, index, lengths, base_url, result_dir)
                   for index, lengths in enumerate(plan.lengths))


def _warm_one(runner: ClientRunner, rendered, plan: WarmPlan, index: int,
              lengths: tuple[int, int], base_url: str, result_dir: str) -> int:
    served = rendered.values.get("served_model_name")
    input_len, output_len = lengths
    args = ClientArgs(base_url=base_url, model=rendered.model,
                      tokenizer=plan.tokenizer or rendered.model, concurrency=1,
                      num_prompts=plan.prompts, input_len=input_len, output_len=output_len,
                      seed=index, result_dir=result_dir,
                      result_file=f"warm-{index}.json",
                      served_model_name=str(served) if served else None)
    result = run_once(runner, args, plan.request_timeout_s)
    completed = int(result.get("completed") or 0)
    if completed < plan.prompts:
        raise BenchError(f"warm-up at {input_len}:{output_len} tokens: {completed} of "
                         f"{plan.prompts} requests completed; inv logs --name "
                         f"{getattr(runner, 'container', rendered.name)}")
    return completed
