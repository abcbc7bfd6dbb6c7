"""The sweep: warm up, then every (length, concurrency) point, each repeated, into a record.

Contract: ``run_sweep`` checks the server's ``/health`` first (one clear line and a record with
``status: unhealthy`` when it never answers), runs one warm-up, then each point ``repeats`` times
with vLLM's client, summarising median/min/max. The record is rewritten atomically after every
point, so Ctrl-C (``status: interrupted``) or a failing server (``status: errors``) keeps the
finished points. A point where every request failed stops the sweep.
"""

from __future__ import annotations

import http.client
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from edgevllm.common.dataload import load_json
from edgevllm.common.errors import BenchError
from edgevllm.common.poll import poll
from edgevllm.perf.client import ClientArgs, ClientRunner, http_get, run_once
from edgevllm.perf.metrics import figures, summarise
from edgevllm.perf.record import save_record


@dataclass
class SweepPlan:
    """What to measure: the grid and how hard to drive each point."""

    concurrency: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16])
    lengths: list[tuple[int, int]] = field(default_factory=lambda: [(1024, 128)])
    repeats: int = 3
    rounds: int = 4  # requests per stream per repeat: num_prompts = concurrency * rounds
    seed: int = 0
    prompt_file: str | None = None
    warmup_prompts: int = 2
    point_timeout_s: float = 1800
    health_timeout_s: float = 60
    run_timeout_s: float = 6 * 3600  # every run of the client together (perf/client.within)


@dataclass
class Server:
    """Where the server is, and what the client sends it."""

    base_url: str
    model: str
    tokenizer: str
    served_model_name: str | None = None
    labels: dict = field(default_factory=dict)  # e.g. {"num_speculative_tokens": 8}


def wait_for_health(base_url: str, timeout_s: float) -> None:
    """GET ``/health`` until it answers 200; one line saying what was seen when it never does."""
    deadline = time.monotonic() + timeout_s
    seen = ["no answer"]

    def healthy() -> bool | None:
        try:  # 5 s for the whole answer: a server that dribbles bytes cannot hold us
            answer = http_get(f"{base_url}/health", max(1.0, min(5.0, deadline - time.monotonic())),
                              limit=4096)
            if answer.status == 200:
                return True
            seen[0] = f"HTTP {answer.status}"
        except (OSError, http.client.HTTPException) as exc:
            seen[0] = str(getattr(exc, "reason", exc)) or type(exc).__name__
        except ValueError as exc:  # a URL urllib cannot use (bad port, bad host)
            raise BenchError(f"server {base_url}: {exc}; give http://HOST:PORT") from None
        return None

    if poll(healthy, timeout_s, 1.0) is None:
        raise BenchError(f"server {base_url} not healthy after {timeout_s:.0f}s ({seen[0]})")


def _args(server: Server, plan: SweepPlan, result_dir: str, concurrency: int,
          lengths: tuple[int, int], prompts: int, tag: str) -> ClientArgs:
    return ClientArgs(base_url=server.base_url, model=server.model, tokenizer=server.tokenizer,
                      concurrency=concurrency, num_prompts=prompts, input_len=lengths[0],
                      output_len=lengths[1], seed=plan.seed, result_dir=result_dir,
                      result_file=f"{tag}.json", prompt_file=plan.prompt_file,
                      served_model_name=server.served_model_name)


def run_point(runner: ClientRunner, args: ClientArgs, repeats: int, timeout_s: float,
              progress: Callable[[str], None]) -> dict:
    """One point: ``repeats`` runs of the client, their figures and the summary."""
    runs = []
    for index in range(repeats):
        run_args = replace(args, result_file=f"{args.result_file[:-5]}-r{index}.json")
        runs.append(figures(run_once(runner, run_args, timeout_s)))
        progress(f"  repeat {index + 1}/{repeats}: " + _brief(runs[-1]))
    return {"concurrency": args.concurrency, "input_len": args.input_len,
            "output_len": args.output_len, "num_prompts": args.num_prompts, "runs": runs,
            "summary": summarise(runs)}


def _brief(fig: dict) -> str:
    def fmt(value, unit):
        return "-" if value is None else f"{value:.1f}{unit}"
    return (f"{fmt(fig.get('tok_s_stream'), ' tok/s/stream')}  "
            f"{fmt(fig.get('tok_s_total'), ' tok/s')}  TTFT {fmt(fig.get('ttft_ms'), 'ms')}  "
            f"ITL {fmt(fig.get('itl_ms'), 'ms')}  failed {fig.get('failed', 0)}")


def run_sweep(runner: ClientRunner, server: Server, plan: SweepPlan, record: dict,
              record_path: Path, result_dir: str,
              progress: Callable[[str], None] = lambda line: None) -> dict:
    """Run the plan against one server, appending points to ``record`` and saving after each."""
    try:
        wait_for_health(server.base_url, plan.health_timeout_s)
    except BenchError as exc:
        return _stop(record, record_path, "unhealthy", str(exc))
    try:
        _warm_up(runner, server, plan, result_dir, progress)
        for lengths in plan.lengths:
            for concurrency in plan.concurrency:
                progress(f"point C={concurrency} in={lengths[0]} out={lengths[1]} "
                         f"{_labels(server)}")
                args = _args(server, plan, result_dir, concurrency, lengths,
                             concurrency * plan.rounds, f"c{concurrency}-i{lengths[0]}")
                point = run_point(runner, args, plan.repeats, plan.point_timeout_s, progress)
                point["labels"] = dict(server.labels)
                record["points"].append(point)
                save_record(record, record_path)
                if all(r["completed"] == 0 for r in point["runs"]):
                    first = point["runs"][0].get("first_error") or "no request completed"
                    return _stop(record, record_path, "errors",
                                 f"server {server.base_url} failed every request at "
                                 f"C={concurrency}: {first}")
    except KeyboardInterrupt:
        return _stop(record, record_path, "interrupted", "interrupted by Ctrl-C")
    except BenchError as exc:
        return _stop(record, record_path, "errors", str(exc))
    return record


def _labels(server: Server) -> str:
    return " ".join(f"{k}={v}" for k, v in server.labels.items())


def _warm_up(runner: ClientRunner, server: Server, plan: SweepPlan, result_dir: str,
             progress: Callable[[str], None]) -> None:
    if plan.warmup_prompts <= 0:
        return
    progress(f"warm-up: {plan.warmup_prompts} requests")
    lengths = plan.lengths[0]
    run_once(runner, _args(server, plan, result_dir, 1, lengths, plan.warmup_prompts, "warmup"),
             plan.point_timeout_s)


def _stop(record: dict, record_path: Path, status: str, message: str) -> dict:
    record["status"] = status
    record["error"] = message
    save_record(record, record_path)
    return record


def served_model(base_url: str, health_timeout_s: float) -> str:
    """The first model id ``/v1/models`` lists (what ``--url`` benchmarks without ``--model``)."""
    return first_model_id(openai_models(base_url, health_timeout_s), base_url)


# Each ask of /v1/models: connect, headers and body within this many seconds (a model list is
# small and vLLM answers it at once, even under load).
PROBE_S = 5.0


def openai_models(base_url: str, wait_s: float) -> bytes:
    """``/v1/models``'s answer, asked before anything is measured or written. Only a server
    that is not up yet (connection refused, HTTP 5xx) is waited for, up to ``wait_s``; anything
    else that is not OpenAI's model list stops at once with one line naming the endpoint and
    what it answered: a TCP server that sends something other than HTTP, closes, or says
    nothing within ``PROBE_S``; an HTTP server without ``/v1/models`` or with another shape."""
    url = f"{base_url}/v1/models"
    seen = ["no answer"]
    each = min(PROBE_S, max(1.0, wait_s))

    def answered() -> bytes | None:
        try:
            answer = http_get(url, each, limit=1 << 20)
        except ConnectionRefusedError:
            seen[0] = "connection refused"
            return None
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise BenchError(f"{url}: {_not_http(exc, each)}; not an OpenAI-compatible server: "
                             "give a vLLM server's http://HOST:PORT") from None
        if answer.status >= 500:  # a proxy or a server still starting
            seen[0] = f"HTTP {answer.status}"
            return None
        _check_models_shape(url, answer.status, answer.body)
        return answer.body

    body = poll(answered, wait_s, 1.0)
    if body is None:
        raise BenchError(f"{url}: no answer within {wait_s:g}s ({seen[0]}); start the server "
                         "or raise --health-timeout")
    return body


def _not_http(exc: Exception, seconds: float) -> str:
    """What a server that is not HTTP did, said plainly (its own bytes escaped, cut short)."""
    from edgevllm.common.escape import one_line

    if isinstance(exc, http.client.RemoteDisconnected):
        return "closed the connection without an HTTP answer"
    if isinstance(exc, http.client.BadStatusLine):
        return f"answered something other than HTTP ({one_line(str(exc)[:60])})"
    if isinstance(exc, TimeoutError):
        return f"sent no whole HTTP answer within {seconds:g}s"
    if isinstance(exc, http.client.HTTPException):
        return f"answered broken HTTP ({type(exc).__name__})"
    return one_line(str(getattr(exc, "reason", None) or exc or type(exc).__name__)[:120])


def _check_models_shape(url: str, status: int, body: bytes) -> None:
    """An HTTP answer that is not OpenAI's model list (``{"data": [...]}``): one line."""
    if status != 200:
        raise BenchError(f"{url}: answered HTTP {status}; not an OpenAI-compatible server: give "
                         "a vLLM server's http://HOST:PORT")
    try:
        document = load_json(body, url, BenchError)
    except BenchError:
        document = None
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        what = "JSON without a 'data' list" if document is not None else "text that is not JSON"
        raise BenchError(f"{url}: answered {what} ({len(body)} bytes); not OpenAI's model list: "
                         "give a vLLM server's http://HOST:PORT")


def first_model_id(answer: bytes, base_url: str) -> str:
    """The first model id of a ``/v1/models`` answer (OpenAI's shape: ``{"data": [{"id"}]}``)."""
    try:
        document = load_json(answer, base_url, BenchError)
    except BenchError:
        raise BenchError(f"{base_url}/v1/models did not answer JSON: pass --model") from None
    models = document.get("data") if isinstance(document, dict) else None
    if not isinstance(models, list) or not models:
        raise BenchError(f"{base_url}/v1/models lists no model: pass --model")
    first = models[0]
    model_id = first.get("id") if isinstance(first, dict) else None
    if not isinstance(model_id, str) or not model_id.strip() or not model_id.isprintable():
        raise BenchError(f"{base_url}/v1/models gives no usable model id: pass --model")
    return model_id
