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

import re
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from edgevllm.common.dataload import load_json
from edgevllm.common.errors import BenchError, MissingInputError
from edgevllm.common.fsutil import atomic_write_json

SCHEMA = "edgevllm-bench/1"
Swept = str | int | float | bool | None


class _Open(BaseModel):
    """A record holds more facts than a report reads: those are kept, not checked."""

    model_config = ConfigDict(extra="allow")


class _Stats(_Open):
    median: float
    min: float
    max: float


class _Point(_Open):
    concurrency: int = Field(ge=1)
    input_len: int = Field(ge=0)
    output_len: int = Field(ge=0)
    labels: dict[str, Swept] | None = None
    summary: dict[str, _Stats]


class _Start(_Open):
    health_s: float | None = None
    first_token_s: float | None = None
    error: str | None = None


class _Run(_Open):
    labels: dict[str, Swept] | None = None
    start: _Start | None = None


class _Roofline(_Open):
    ceiling_tok_s: float | None = None
    unknown: str | None = None


class BenchRecordModel(_Open):
    """What ``inv bench --report`` / ``--compare`` read of a record (report.py)."""

    name: str
    started: str = ""
    points: list[_Point] = []
    runs: list[_Run] | None = None
    roofline: _Roofline | None = None


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
        data = load_json(path.read_bytes(), str(path), BenchError)
    except FileNotFoundError:
        raise MissingInputError(f"{path}: no such benchmark record; give a file inv bench "
                                "wrote") from None
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
    from edgevllm.common.schema import parse_model

    parse_model(BenchRecordModel, data, str(path), BenchError)
    return data
