"""Reports of benchmark records: a markdown table, run-to-run changes, regressions, a PNG plot.

Contract: ``markdown(records)`` has one row per (run, point) with median [min-max] of the stream
and total tok/s, TTFT and ITL medians, failed requests and, for C=1, the share of the roofline
ceiling. With two or more records, ``compare`` puts each later run beside the first per point
(matched on concurrency, lengths and swept labels): the change of each median, and
``REGRESSION`` when a median moved the bad way by more than the spread (max - min) of the two
runs' repeats together. ``plot(records, png)`` draws tok/s and ITL vs concurrency, one line per
run (matplotlib, Agg backend: no display needed), written atomically.

A record is others' data (a run's name, its labels, a server's error text): every table row is
written by ``_row``, which escapes each cell for markdown (``common/escape.py``), so no value can
add a column, a row or markup to the report. Only the figures this module formats are kept as
written (``_Figure``).
"""

from __future__ import annotations

import io
from pathlib import Path

from edgevllm.common import escape
from edgevllm.common.fsutil import atomic_write_bytes
from edgevllm.perf.metrics import spread

# figure, label, higher is better
COMPARED = (("tok_s_stream", "tok/s/stream", True), ("tok_s_total", "tok/s total", True),
            ("ttft_ms", "TTFT ms", False), ("itl_ms", "ITL ms", False))


class _Figure(str):
    """Text this module formatted from numbers (brackets and signs stay as written)."""


def _row(*cells: object) -> str:
    """One markdown table row: every cell but this module's own figures escaped."""
    return "| " + " | ".join(c if isinstance(c, _Figure) else escape.markdown(c)
                             for c in cells) + " |"


def _key(point: dict) -> tuple:
    labels = tuple(sorted((point.get("labels") or {}).items()))
    return (labels, point["input_len"], point["output_len"], point["concurrency"])


def _cell(stats: dict | None) -> str:
    if not stats:
        return "-"
    return _Figure(f"{stats['median']:.1f} [{stats['min']:.1f}-{stats['max']:.1f}]")


def _roof_share(record: dict, point: dict) -> str:
    roof = record.get("roofline") or {}
    ceiling = roof.get("ceiling_tok_s")
    stream = point["summary"].get("tok_s_stream")
    if point["concurrency"] != 1 or not stream:
        return ""
    if not ceiling:
        return "unknown" if roof.get("unknown") else ""
    return f"{100 * stream['median'] / ceiling:.0f}% of {ceiling:.0f}"


def _label_text(point: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in (point.get("labels") or {}).items())


def markdown(records: list[dict]) -> str:
    """One table of every point of every record."""
    lines = ["| run | point | C | tok/s/stream | tok/s total | TTFT ms | ITL ms | failed | "
             "roofline |", "|---|---|---|---|---|---|---|---|---|"]
    for record in records:
        for point in record.get("points", []):
            s = point["summary"]
            what = f"in={point['input_len']} out={point['output_len']} {_label_text(point)}"
            failed = (s.get("failed") or {}).get("max", 0)
            lines.append(_row(record["name"], what.strip(), point["concurrency"],
                              _cell(s.get("tok_s_stream")), _cell(s.get("tok_s_total")),
                              _cell(s.get("ttft_ms")), _cell(s.get("itl_ms")), f"{failed:g}",
                              _roof_share(record, point)))
    return "\n".join(lines)


def compare(base: dict, other: dict) -> list[dict]:
    """Per matched point and figure: both medians, the change and whether it is a regression."""
    rows = []
    theirs = {_key(p): p for p in other.get("points", [])}
    for point in base.get("points", []):
        match = theirs.get(_key(point))
        if match is None:
            continue
        for name, label, higher_better in COMPARED:
            a, b = point["summary"].get(name), match["summary"].get(name)
            if not a or not b:
                continue
            change = b["median"] - a["median"]
            noise = max(spread(a), spread(b))
            worse = change < 0 if higher_better else change > 0
            rows.append({"concurrency": point["concurrency"], "labels": point.get("labels"),
                         "input_len": point["input_len"], "output_len": point["output_len"],
                         "figure": label, "base": a["median"], "other": b["median"],
                         "change_pct": 100 * change / a["median"] if a["median"] else None,
                         "noise": noise, "regression": worse and abs(change) > noise})
    return rows


def compare_markdown(base: dict, other: dict) -> str:
    lines = [escape.markdown(f"{other['name']} ({other.get('started', '')}) vs {base['name']} "
                             f"({base.get('started', '')})"), "",
             "| C | point | figure | base | new | change | spread | verdict |",
             "|---|---|---|---|---|---|---|---|"]
    for row in compare(base, other):
        pct = "-" if row["change_pct"] is None else f"{row['change_pct']:+.1f}%"
        verdict = "REGRESSION" if row["regression"] else "ok"
        point = f"in={row['input_len']} out={row['output_len']} " + " ".join(
            f"{k}={v}" for k, v in (row["labels"] or {}).items())
        lines.append(_row(row["concurrency"], point.strip(), row["figure"], f"{row['base']:.1f}",
                          f"{row['other']:.1f}", pct, f"{row['noise']:.1f}", verdict))
    return "\n".join(lines)


def plot(records: list[dict], png: Path | str) -> Path:
    """tok/s (stream and total) and ITL vs concurrency, one line per run and label set."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for index, record in enumerate(records):
        for series, points in _series(record).items():
            xs = [p["concurrency"] for p in points]
            name = f"{index + 1}: {record['name']} {series}".strip()
            axes[0].plot(xs, [_median(p, "tok_s_total") for p in points], marker="o",
                         label=f"{name} total")
            axes[0].plot(xs, [_median(p, "tok_s_stream") for p in points], marker=".",
                         linestyle="--", label=f"{name} per stream")
            axes[1].plot(xs, [_median(p, "itl_ms") for p in points], marker="o", label=name)
    for ax, ylabel in ((axes[0], "output tok/s"), (axes[1], "ITL median (ms)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return atomic_write_bytes(png, buffer.getvalue())


def _series(record: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for point in record.get("points", []):
        name = f"in={point['input_len']} out={point['output_len']} {_label_text(point)}".strip()
        out.setdefault(name, []).append(point)
    return {k: sorted(v, key=lambda p: p["concurrency"]) for k, v in out.items()}


def _median(point: dict, name: str) -> float | None:
    stats = point["summary"].get(name)
    return stats["median"] if stats else None


def _seconds(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def start_markdown(records: list[dict]) -> str:
    """One row per server start: seconds from the container's start to health and to the first
    streamed token (a cold start, then a warm one, side by side); "" when no start was timed."""
    lines = []
    for record in records:
        for run in record.get("runs") or []:
            start = run.get("start")
            if not start:
                continue
            note = start.get("error") or ""
            values = " ".join(f"{k}={v}" for k, v in (run.get("labels") or {}).items())
            lines.append(_row(f"{record['name']} ({record.get('started', '')})", values,
                              _seconds(start.get("health_s")),
                              _seconds(start.get("first_token_s")), note))
    if not lines:
        return ""
    return "\n".join(["| start | values | to health s | to first token s | note |",
                      "|---|---|---|---|---|", *lines])


def expectations_markdown(record: dict) -> str:
    verdicts = record.get("expectations") or []
    if not verdicts:
        return ""
    lines = ["| expectation | measured | verdict | source |", "|---|---|---|---|"]
    for v in verdicts:
        sign = ">=" if v["kind"] == "at_least" else "<="
        measured = "-" if v["measured"] is None else f"{v['measured']:.2f}"
        lines.append(_row(f"{v['metric']} C={v['concurrency']} {sign} {v['bound']:g}", measured,
                          v["status"], v["source"]))
    return "\n".join(lines)
