"""Benchmark records: one JSON per run under ``out/bench/``, written atomically after each point.

A record holds ``schema`` (``edgevllm-bench/1``), ``status`` (``running`` until the sweep
ends, then ``complete``, ``interrupted``, ``unhealthy`` or ``errors`` with an ``error`` line),
``started``, ``name`` (recipe or URL), ``target``, ``model``, ``plan``, ``roofline``,
``vllm_version``; for a recipe, ``runs`` (per swept value: container, its ``start`` (seconds from
the container's start to health and to the first streamed token, ``serve.starttime``), rendered
command and values, image id/digests/lock sha256, nvidia-smi device facts); for a URL, ``start``
says the server was already running; ``points`` (each: concurrency, lengths,
labels, every run's figures and their summary) and ``expectations`` (met / missed).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from edgevllm.common.errors import BenchError
from edgevllm.common.fsutil import atomic_write_json

SCHEMA = "edgevllm-bench/1"


def new_record(name: str, **facts) -> dict:
    return {"schema": SCHEMA, "status": "running", "error": None, "name": name,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **facts,
            "points": []}


def record_path(out_dir: Path, name: str) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-")[:80] or "bench"
    return out_dir / f"{stamp}-{safe}.json"


def save_record(record: dict, path: Path) -> Path:
    """Write atomically: a reader (or Ctrl-C) never sees half a record under the final name."""
    return atomic_write_json(path, record)


def load_record(path: Path | str) -> dict:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise BenchError(f"{path}: no such benchmark record") from None
    except OSError as exc:
        raise BenchError(f"{path}: cannot read it ({exc.strerror})") from None
    except RecursionError:
        raise BenchError(f"{path}: nested too deeply; give a record written by inv bench") \
            from None
    except ValueError as exc:
        raise BenchError(f"{path}: not JSON ({exc}); give a record written by inv bench") \
            from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise BenchError(f"{path}: not an inv bench record (schema {SCHEMA} expected)")
    return data
