"""How long a server took to start: container start → healthy → first streamed token.

``StartClock`` is started right after ``docker run``: it runs ``inimage_startprobe.py`` inside the
container (``docker exec``, in a thread, beside the health wait), so the times it takes and the
container's ``State.StartedAt`` are on one clock, the engine host's, whichever machine runs
``inv``. ``result()`` gives a ``StartTiming``: seconds from the container's start to the first
200 from the health endpoint and to the first token of one streamed completion. A cold and a
warm start (a second start of the same image, its JIT caches filled) compare directly.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from edgevllm.common.errors import EdgeVllmError


@dataclass
class StartTiming:
    started_at: str | None  # the container's State.StartedAt
    health_s: float | None = None  # container start → first healthy answer
    first_token_s: float | None = None  # container start → first streamed token
    error: str | None = None

    def to_json(self) -> dict:
        return {"started_at": self.started_at, "health_s": self.health_s,
                "first_token_s": self.first_token_s, "error": self.error}

    def describe(self) -> str:
        parts = []
        if self.health_s is not None:
            parts.append(f"healthy {self.health_s:.1f} s after the container started")
        if self.first_token_s is not None:
            parts.append(f"first streamed token at {self.first_token_s:.1f} s")
        if self.error:
            parts.append(f"not measured: {self.error}")
        return "start: " + ", ".join(parts)


def docker_time(text: str) -> float:
    """``2026-11-24T13:40:01.123456789Z`` (Docker's RFC 3339, nanoseconds) → epoch seconds."""
    head, _, frac = text.rstrip("Z").partition(".")
    stamp = datetime.fromisoformat(head + "+00:00").timestamp()
    return stamp + (float("0." + frac.split("+")[0]) if frac else 0.0)


def probe_config(rendered, deadline_s: float) -> dict:
    """What inimage_startprobe.py needs: the health and completions URLs inside the container, and
    the model name the server answers to."""
    port = rendered.health_port
    return {"health": f"http://localhost:{port}/{rendered.health_path.lstrip('/')}",
            "completions": f"http://localhost:{port}/v1/completions",
            "model": served_model_name(rendered), "deadline_s": deadline_s}


SERVED_FLAG = "--served-model-name"


def served_model_name(rendered) -> str:
    """The name vLLM answers to: the command's last ``--served-model-name`` (its first name; an
    imported eugr recipe writes it literally, and vLLM takes the last of a repeated flag), else
    the recipe's ``served_model_name`` value, else the model. Asked for another name, vLLM
    answers 404 and the first token is never timed."""
    command, found = list(rendered.command or []), None
    for index, arg in enumerate(command):
        if arg == SERVED_FLAG and index + 1 < len(command):
            found = command[index + 1]
        elif arg.startswith(SERVED_FLAG + "="):
            found = arg[len(SERVED_FLAG) + 1:]
    served = rendered.values.get("served_model_name") if rendered.values else None
    return str(found or served or rendered.model or "")


class StartClock:
    """Begin right after the container started; ``result()`` once the wait for health is over."""

    def __init__(self, engine, container: str, config: dict):
        self.engine, self.container = engine, container
        self._found: dict = {}
        source = Path(__file__).with_name("inimage_startprobe.py").read_text()
        command = ["python3", "-c", source, json.dumps(config, separators=(",", ":"))]
        timeout = float(config.get("deadline_s", 1800)) + 30
        self._thread = threading.Thread(target=self._run, args=(command, timeout), daemon=True)
        self._thread.start()

    def _run(self, command: list[str], timeout: float) -> None:
        try:
            proc = self.engine.exec(self.container, command, timeout=timeout)
        except EdgeVllmError as exc:
            self._found = {"error": str(exc)}
            return
        lines = proc.stdout.decode(errors="replace").strip().splitlines()
        try:
            self._found = json.loads(lines[-1]) if lines else {}
        except ValueError:
            self._found = {}
        if not self._found:
            tail = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
            self._found = {"error": f"the start probe did not run (exit {proc.returncode}): "
                                    f"{tail[0][:200]}"}

    def result(self, timeout_s: float = 120) -> StartTiming:
        """The timing, waiting up to ``timeout_s`` for the first token after health."""
        self._thread.join(timeout_s)
        info = self.engine.container_inspect(self.container) or {}
        started = (info.get("State") or {}).get("StartedAt")
        if self._thread.is_alive():
            return StartTiming(started, error=f"no first token {timeout_s:.0f} s after health")
        timing = StartTiming(started, error=self._found.get("error"))
        if started:
            origin = docker_time(started)
            for key, attr in (("healthy", "health_s"), ("first_token", "first_token_s")):
                if isinstance(self._found.get(key), (int, float)):
                    setattr(timing, attr, round(self._found[key] - origin, 2))
        return timing
