"""The load generator: vLLM's own ``vllm bench serve`` code, run where the server's vLLM lives.

Why not the ``vllm`` command: ``vllm bench serve`` builds every subcommand's parser at start, and
without a GPU that dies with "Failed to infer device type". The benchmark itself is plain asyncio
+ aiohttp in ``vllm.benchmarks.serve`` (``add_cli_args`` + ``main``, the same two functions the
``vllm bench serve`` subcommand calls, vLLM 0.33.0: vllm/entrypoints/cli/benchmark/serve.py), so
``CLIENT_CODE`` builds that parser alone and calls ``main``: same code, same flags, same result
JSON, no device needed.

A ``ClientRunner`` says where that Python runs: ``ExecRunner`` inside the server's container (one
image, one vLLM version for client and server), ``PythonRunner`` with a given interpreter (a test
venv or a host install). Each run writes its result with ``--save-result`` into a folder of the
runner and ``read`` returns the JSON text.

Nothing waits without end: each client run has its point timeout, the runs together the whole
run's (``within``: ``--run-timeout``), and every request edgevllm itself sends (``/health``,
``/v1/models``) a deadline for the whole answer (``http_get``), not one per read.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

from edgevllm.common.dataload import load_json
from edgevllm.common.errors import BenchError
from edgevllm.containers.docker import DockerEngine

CLIENT_CODE = (
    "import sys\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "parser = FlexibleArgumentParser(prog='vllm bench serve')\n"
    "add_cli_args(parser)\n"
    "main(parser.parse_args(sys.argv[1:]))\n"
)
VERSION_CODE = "import importlib.metadata as m; print(m.version('vllm'))"
# Percentiles of TTFT, TPOT, ITL and end-to-end latency written to the result JSON.
PERCENTILE_METRICS = "ttft,tpot,itl,e2el"
PERCENTILES = "50,90,99"


@dataclass(frozen=True)
class ClientArgs:
    """One benchmark run: the server, the workload and where the result goes."""

    base_url: str
    model: str
    tokenizer: str
    concurrency: int
    num_prompts: int
    input_len: int
    output_len: int
    seed: int
    result_dir: str
    result_file: str
    prompt_file: str | None = None
    served_model_name: str | None = None
    ready_timeout_s: int = 0

    def argv(self) -> list[str]:
        """The ``vllm bench serve`` flags (vLLM 0.33.0 names)."""
        argv = ["--backend", "openai", "--base-url", self.base_url, "--endpoint",
                "/v1/completions", "--model", self.model, "--tokenizer", self.tokenizer,
                "--num-prompts", str(self.num_prompts), "--max-concurrency",
                str(self.concurrency), "--request-rate", "inf", "--seed", str(self.seed),
                "--ignore-eos", "--temperature", "0", "--disable-tqdm", "--save-result",
                "--save-detailed", "--result-dir", self.result_dir, "--result-filename",
                self.result_file, "--percentile-metrics", PERCENTILE_METRICS,
                "--metric-percentiles", PERCENTILES]
        argv += self._dataset()
        if self.served_model_name:
            argv += ["--served-model-name", self.served_model_name]
        if self.ready_timeout_s:
            argv += ["--ready-check-timeout-sec", str(self.ready_timeout_s)]
        return argv

    def _dataset(self) -> list[str]:
        if self.prompt_file:
            # one prompt per JSON line {"prompt": ...}; outputs are forced to output_len tokens
            return ["--dataset-name", "custom", "--dataset-path", self.prompt_file,
                    "--custom-output-len", str(self.output_len), "--skip-chat-template"]
        return ["--dataset-name", "random", "--random-input-len", str(self.input_len),
                "--random-output-len", str(self.output_len), "--random-range-ratio", "0"]


@dataclass
class ClientResult:
    returncode: int
    output: str
    result_json: dict | None


class ClientRunner(Protocol):
    @property
    def where(self) -> str: ...  # where the client runs, for messages

    def run(self, args: ClientArgs, timeout_s: float) -> ClientResult: ...

    def vllm_version(self) -> str | None: ...


def _tail(text: str, lines: int = 1) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()]
    return " | ".join(kept[-lines:]) if kept else "no output"


@dataclass
class PythonRunner:
    """Run the client with a local interpreter that has vLLM installed (tests, host installs)."""

    python: str
    where: str = "local python"

    def run(self, args: ClientArgs, timeout_s: float) -> ClientResult:
        Path(args.result_dir).mkdir(parents=True, exist_ok=True)
        target = Path(args.result_dir) / args.result_file
        target.unlink(missing_ok=True)
        proc = _run([self.python, "-c", CLIENT_CODE, *args.argv()], timeout_s)
        data = parse_result(target.read_bytes(), str(target)) if target.is_file() else None
        return ClientResult(proc.returncode, proc.stdout + proc.stderr, data)

    def vllm_version(self) -> str | None:
        proc = _run([self.python, "-c", VERSION_CODE], 120)
        return proc.stdout.strip() or None if proc.returncode == 0 else None


@dataclass
class ExecRunner:
    """Run the client inside the server's container: the image's own vLLM and python3."""

    engine: DockerEngine
    container: str
    python: str = "python3"

    @property
    def where(self) -> str:
        return f"container {self.container}"

    def run(self, args: ClientArgs, timeout_s: float) -> ClientResult:
        command = [self.python, "-c", CLIENT_CODE, *args.argv()]
        proc = self.engine.exec(self.container, command, timeout=timeout_s)
        output = _decode(proc.stdout) + _decode(proc.stderr)
        path = f"{args.result_dir}/{args.result_file}"
        cat = self.engine.exec(self.container, ["cat", path], timeout=60)
        data = parse_result(cat.stdout, f"{self.where}:{path}") if cat.returncode == 0 else None
        self.engine.exec(self.container, ["rm", "-f", path], timeout=60)
        return ClientResult(proc.returncode, output, data)

    def vllm_version(self) -> str | None:
        proc = self.engine.exec(self.container, [self.python, "-c", VERSION_CODE], timeout=120)
        return _decode(proc.stdout).strip() or None if proc.returncode == 0 else None

    def shell(self, command: Sequence[str]) -> str | None:
        proc = self.engine.exec(self.container, list(command), timeout=60)
        return _decode(proc.stdout) if proc.returncode == 0 else None


def parse_result(data: bytes | str, where: str) -> dict:
    """The result JSON ``vllm bench serve`` wrote: an object, or one BenchError line."""
    try:
        result = load_json(data, where, BenchError)
    except BenchError as exc:
        raise BenchError(f"{where}: the benchmark result is not JSON ({str(exc)[:80]})") from None
    if not isinstance(result, dict):
        raise BenchError(f"{where}: the benchmark result is not a JSON object")
    return result


def _decode(data) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def _run(argv: list[str], timeout_s: float) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        raise BenchError(f"benchmark client python '{argv[0]}' not found: pass "
                         "--client-python with a Python that has vLLM installed") from None
    except subprocess.TimeoutExpired:
        raise BenchError(f"vllm bench serve did not finish within {timeout_s:.0f}s: lower "
                         "--rounds or --concurrency, or raise --point-timeout") from None


# --- deadlines: every request, and the whole run ----------------------------------------------
@dataclass
class Answer:
    status: int
    body: bytes


def http_get(url: str, timeout_s: float, limit: int = 1 << 20) -> Answer:
    """GET ``url`` with a deadline for the whole exchange (connect, headers, body), not per
    read: a server that answers one byte every few seconds, or garbage without end, is cut off
    at ``timeout_s``; at most ``limit`` bytes of the body are read. OSError or
    http.client.HTTPException (what urllib raises) when there is no answer in time."""
    import http.client
    import threading
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url[:120]}")
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = kind(parts.hostname, parts.port, timeout=min(timeout_s, 10))
    fired = threading.Event()  # the deadline passed: whatever was read is cut short
    cut = threading.Timer(timeout_s, _shut, [conn, fired])
    cut.start()
    try:
        conn.request("GET", (parts.path or "/") + (f"?{parts.query}" if parts.query else ""))
        response = conn.getresponse()
        answer = Answer(response.status, response.read(limit))
    except (OSError, http.client.HTTPException, ValueError):
        if not fired.is_set():
            raise
        answer = None
    finally:
        cut.cancel()
        conn.close()
    if answer is None or fired.is_set():
        raise TimeoutError(f"no whole answer within {timeout_s:g}s")
    return answer


def _shut(conn, fired) -> None:
    import socket

    fired.set()
    sock = getattr(conn, "sock", None)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)  # the blocked read returns: the deadline has passed
        except OSError:
            pass


@dataclass
class Deadline:
    """A runner whose runs together end by ``at`` (time.monotonic()): each run gets what is left
    of the whole run's time, and none starts after it (``inv bench --run-timeout``)."""

    inner: ClientRunner
    at: float
    seconds: float

    @property
    def where(self) -> str:
        return self.inner.where

    def run(self, args: ClientArgs, timeout_s: float) -> ClientResult:
        import time

        left = self.at - time.monotonic()
        if left <= 1:
            raise BenchError(f"the benchmark ran past its --run-timeout of {self.seconds:.0f}s; "
                             "the points measured so far are kept")
        return self.inner.run(args, min(timeout_s, left))

    def vllm_version(self) -> str | None:
        return self.inner.vllm_version()


def within(runner: ClientRunner, seconds: float) -> Deadline:
    import time

    return Deadline(runner, time.monotonic() + seconds, seconds)


def run_once(runner: ClientRunner, args: ClientArgs, timeout_s: float) -> dict:
    """Run one benchmark and return vLLM's result JSON; one clear line when it did not run."""
    result = runner.run(args, timeout_s)
    if result.result_json is None:
        raise BenchError(f"vllm bench serve ({runner.where}) wrote no result (exit "
                         f"{result.returncode}): {_tail(result.output, 2)}")
    return result.result_json
