"""Probe level 2 (on the device): serve a small model and talk to it.

Starts ``vllm serve`` detached through the engine with the target's flags, publishes the server
port on 127.0.0.1 (a free host port), waits for ``/health`` under a deadline while watching the
container (an early exit fails at once, with the log tail), then ``GET /v1/models`` and one chat
completion. The server log is matched against the signature catalogue. The container is removed
in every case: success, failure, timeout, Ctrl-C (SIGINT) and SIGTERM.
"""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any, Sequence

from edgevllm.common.dataload import load_json
from edgevllm.common.errors import ConfigError
from edgevllm.common.interrupts import sigterm_as_interrupt
from edgevllm.common.poll import poll
from edgevllm.containers.docker import DockerEngine, RunOptions
from edgevllm.probe.level1 import PROBE_LABEL
from edgevllm.probe.result import FAIL, PASS, WARN, ProbeResult
from edgevllm.probe.signatures import Match, load_catalogue, match_log
from edgevllm.probe.target import probe_target

CONTAINER_PORT = 8000
LOG_TAIL = 40


@dataclass
class ServeSettings:
    """How the server container is started (defaults fit the devices; tests drop the GPU)."""

    gpus: str | None = "all"
    runtime: str | None = None
    ipc: str | None = "host"
    env: dict[str, str] = field(default_factory=dict)
    env_names: Sequence[str] = ()  # passed by name (HF_TOKEN): values stay out of argv and logs
    volumes: Sequence[str] = ()
    host: str = "127.0.0.1"
    poll_s: float = 1.0
    request_timeout_s: float = 300.0


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def http(method: str, url: str, body: dict | None = None,
         timeout: float = 5.0) -> tuple[int, Any]:
    """(status, parsed JSON or text); status 0 when the server is not reachable."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    except (urllib.error.URLError, OSError):
        return 0, None
    text = raw.decode(errors="replace")
    try:
        return status, load_json(text, url, ConfigError) if text else None
    except ConfigError:
        return status, text


def remove_shielded(engine: DockerEngine, name: str) -> None:
    """Remove the container; a second Ctrl-C during the removal must not leave it behind."""
    if threading.current_thread() is not threading.main_thread():
        engine.remove_container(name)
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        engine.remove_container(name)
    finally:
        signal.signal(signal.SIGINT, previous)


def serve_command(model: str, serve_args: Sequence[str]) -> list[str]:
    return ["serve", model, "--host", "0.0.0.0", "--port", str(CONTAINER_PORT), *serve_args]


def container_state(engine: DockerEngine, name: str) -> dict:
    info = engine.container_inspect(name)
    return info.get("State", {}) if info else {"Status": "gone", "Running": False}


def stop_signature(engine: DockerEngine, name: str, target: str) -> Match | None:
    stops = [s for s in load_catalogue() if s.stop]
    found = match_log(engine.logs(name).splitlines(), stops, target) if stops else []
    return found[0] if found else None


def wait_healthy(engine: DockerEngine, name: str, base: str, timeout: float,
                 settings: ServeSettings, result: ProbeResult) -> bool:
    """Poll /health until 200, the container exits, a stop signature shows, or the deadline."""
    started = time.monotonic()
    polls = iter(range(1, 1 << 62))

    def check() -> bool | None:
        if not (state := container_state(engine, name)).get("Running"):
            code, oom = state.get("ExitCode"), state.get("OOMKilled")
            why = "was OOM-killed" if oom else f"exited with code {code}"
            result.add("server-start", FAIL, f"the server container {why} before it was healthy",
                       "read the log tail and the matched signatures", exit_code=code,
                       oom_killed=oom)
            return False
        if http("GET", f"{base}/health", timeout=5)[0] == 200:
            result.facts["seconds_to_healthy"] = round(time.monotonic() - started, 1)
            result.add("health", PASS, "GET /health returned 200")
            return True
        if next(polls) % 5 == 0 and (match := stop_signature(engine, name, result.target)):
            result.add("server-start", FAIL, f"stopped early: '{match.signature.id}' appeared",
                       match.signature.remedy)
            return False
        return None

    outcome = poll(check, timeout, settings.poll_s)
    if outcome is None:
        result.add("health", FAIL, f"no healthy /health within {timeout:.0f}s",
                   "raise --timeout for a cold start (JIT, weight download), or read the log")
        return False
    return outcome


def check_models(result: ProbeResult, base: str, settings: ServeSettings) -> str | None:
    status, body = http("GET", f"{base}/v1/models", timeout=settings.request_timeout_s)
    listed = body.get("data") if status == 200 and isinstance(body, dict) else None
    # the image under test answers: any shape but OpenAI's list is a failed check, not a crash
    ids = [str(m["id"]) for m in listed if isinstance(m, dict) and m.get("id")] \
        if isinstance(listed, list) else []
    if not ids:
        result.add("models", FAIL, f"GET /v1/models: status {status}, no model listed",
                   body=str(body)[:500])
        return None
    result.add("models", PASS, f"serves {', '.join(ids)}")
    return ids[0]


def check_chat(result: ProbeResult, base: str, model_id: str, settings: ServeSettings) -> None:
    request = {"model": model_id, "max_tokens": 16, "temperature": 0,
               "messages": [{"role": "user", "content": "Say hello in one word."}]}
    started = time.monotonic()
    status, body = http("POST", f"{base}/v1/chat/completions", request,
                        timeout=settings.request_timeout_s)
    seconds = round(time.monotonic() - started, 2)
    text = _completion_text(body) if status == 200 else None
    if not text:
        result.add("chat", FAIL, f"POST /v1/chat/completions: status {status}, no completion text",
                   body=str(body)[:500])
        return
    result.facts["chat_seconds"] = seconds
    result.add("chat", PASS, f"chat completion in {seconds}s: {text.strip()[:60]!r}",
               usage=body.get("usage"))


def _completion_text(body: Any) -> str | None:
    """The first choice's text (or reasoning text) of a chat answer; None for any other shape
    (the image under test answers: a wrong shape is a failed check, not a crash)."""
    choices = body.get("choices") if isinstance(body, dict) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    if not isinstance(message, dict):
        return None
    text = message.get("content") or message.get("reasoning_content")
    return text if isinstance(text, str) and text else None


def judge_log(result: ProbeResult, log: str) -> None:
    lines = log.splitlines()
    result.log_tail = lines[-LOG_TAIL:]
    matches = match_log(lines, target=result.target)
    for found in matches:
        sig = found.signature
        result.add(f"signature:{sig.id}", FAIL if sig.severity == "fail" else WARN,
                   sig.explanation, sig.remedy, line=found.line, line_no=found.line_no,
                   count=found.count)
    if not matches:
        result.add("log-signatures", PASS, f"no known-bad line in {len(lines)} log lines")


def probe_level2(engine: DockerEngine, image: str, target: Any, model: str | None = None,
                 timeout: float = 900, serve_args: Sequence[str] | None = None,
                 port: int | None = None, container_name: str | None = None,
                 settings: ServeSettings | None = None) -> ProbeResult:
    """Serve ``model`` (default: the target's ``probe.level2_model``) from ``image`` and check it.

    ``serve_args`` replaces the target's ``probe.serve_args``; ``timeout`` bounds the wait for
    ``/health``; ``port`` is the host port (default: a free one). KeyboardInterrupt propagates
    after the container is removed.
    """
    tgt = probe_target(target)
    settings = settings or ServeSettings()
    model = model or tgt.level2_model
    if not model:
        from edgevllm.common.errors import ConfigError

        raise ConfigError(f"target '{tgt.name}' has no probe.level2_model: pass --model")
    args = list(tgt.serve_args if serve_args is None else serve_args)
    host_port = port or free_port(settings.host)
    name = container_name or f"edgevllm-probe-{uuid.uuid4().hex[:8]}"
    result = ProbeResult(image=image, target=tgt.name, level=2)
    # fail with "image not found" here rather than a registry pull attempt by `docker run`
    result.facts.update(image_id=engine.image_id(image), model=model, serve_args=args,
                        container=name, port=host_port)
    options = RunOptions(
        image=image, command=serve_command(model, args), entrypoint="vllm", name=name,
        gpus=settings.gpus, runtime=settings.runtime, ipc=settings.ipc,
        env={**tgt.runtime_env, **settings.env}, env_names=settings.env_names,
        volumes=settings.volumes, ports=[f"{settings.host}:{host_port}:{CONTAINER_PORT}"],
        labels={PROBE_LABEL: "1", f"{PROBE_LABEL}.level": "2"})
    base = f"http://{settings.host}:{host_port}"
    started = time.monotonic()
    with sigterm_as_interrupt():
        try:
            engine.start(options)
            if wait_healthy(engine, name, base, timeout, settings, result):
                model_id = check_models(result, base, settings)
                if model_id:
                    check_chat(result, base, model_id, settings)
            judge_log(result, engine.logs(name))
        finally:
            remove_shielded(engine, name)
    result.duration_s = round(time.monotonic() - started, 1)
    return result
