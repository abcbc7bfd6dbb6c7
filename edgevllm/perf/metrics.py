"""Figures of one benchmark point, read from ``vllm bench serve``'s result JSON, and their summary.

``figures(result)`` keeps what the reports use (all times in ms, rates per second):
TTFT / TPOT / ITL median, p90, p99 (vLLM's own percentiles); ``tok_s_stream`` = 1000 / median
TPOT (the decode rate one stream sees, the figure the single-stream roofline bounds);
``tok_s_total`` = vLLM's ``output_throughput`` (all streams); ``req_s``; ``completed``/``failed``
and the first error text. ``summarise(repeats)`` gives each figure's median, min and max.
"""

from __future__ import annotations

import math
import statistics

# (name in our records, key in vLLM's result JSON)
_COPIED = (
    ("ttft_ms", "median_ttft_ms"), ("ttft_p90_ms", "p90_ttft_ms"),
    ("ttft_p99_ms", "p99_ttft_ms"), ("tpot_ms", "median_tpot_ms"),
    ("tpot_p90_ms", "p90_tpot_ms"), ("tpot_p99_ms", "p99_tpot_ms"),
    ("itl_ms", "median_itl_ms"), ("itl_p90_ms", "p90_itl_ms"), ("itl_p99_ms", "p99_itl_ms"),
    ("e2el_ms", "median_e2el_ms"), ("tok_s_total", "output_throughput"),
    ("req_s", "request_throughput"), ("duration_s", "duration"),
)
SUMMARISED = tuple(name for name, _ in _COPIED) + ("tok_s_stream", "failed")


def _number(value: object) -> float | None:
    """A finite, non-negative figure; anything else (text, NaN, a negative time) is missing."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) and number >= 0 else None


def figures(result: dict) -> dict:
    """The figures of one run of ``vllm bench serve`` (its ``--save-result`` JSON); a field of
    the wrong type counts as missing, never as a crash."""
    out: dict = {}
    for name, key in _COPIED:
        out[name] = _number(result.get(key))
    tpot = out.get("tpot_ms")
    out["tok_s_stream"] = 1000.0 / tpot if tpot else None
    out["completed"] = int(_number(result.get("completed")) or 0)
    out["failed"] = int(_number(result.get("failed")) or 0)
    listed = result.get("errors")
    errors = [e for e in listed if e] if isinstance(listed, list) else []
    out["first_error"] = _one_line(errors[0]) if errors else None
    version = result.get("version")
    out["vllm_version"] = version if isinstance(version, str) else None
    return out


def _one_line(text: str) -> str:
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return (lines[-1] if lines else "")[:300]


def summarise(repeats: list[dict]) -> dict:
    """Median, min and max of every figure over the repeats of one point."""
    summary: dict = {}
    for name in SUMMARISED:
        values = [r[name] for r in repeats if r.get(name) is not None]
        if values:
            summary[name] = {"median": statistics.median(values), "min": min(values),
                             "max": max(values)}
    return summary


def spread(stats: dict) -> float:
    """The width of a figure's repeats (max - min): the noise a change must exceed."""
    return stats["max"] - stats["min"]
