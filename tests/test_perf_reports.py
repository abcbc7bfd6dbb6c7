"""What ``inv bench --report`` makes of records (perf/report.py) beyond one table: points are
compared only with the same point of the other run (concurrency, lengths and swept labels), each
figure judged the way it is better (higher tok/s, lower times), a zero base gives no percentage;
the plot is a real PNG written whole; the start table puts each timed start beside the others.
And ``perf/warm.py``'s warm-up, with a client outside the container: the server's health is
checked first, and a client that cannot run is one line naming where it ran."""

from __future__ import annotations

import sys

import pytest

from edgevllm.common.errors import BenchError
from edgevllm.perf.client import PythonRunner
from edgevllm.perf.report import compare, compare_markdown, plot, start_markdown
from edgevllm.perf.warm import WarmPlan, warm_up
from support.bench_server import BenchServer, ServerConfig

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _stats(median: float, spread: float = 0.0) -> dict:
    return {"median": median, "min": median - spread / 2, "max": median + spread / 2}


def _point(concurrency: int, labels: dict | None = None, input_len: int = 1024,
           **medians: float) -> dict:
    return {"concurrency": concurrency, "input_len": input_len, "output_len": 128,
            "labels": labels or {}, "summary": {k: _stats(v) for k, v in medians.items()}}


def _run(name: str, *points: dict) -> dict:
    return {"name": name, "started": "2026-11-29T10:00:00Z", "points": list(points)}


def test_only_the_same_point_is_compared():
    base = _run("a", _point(1, tok_s_stream=50.0), _point(1, {"k": 8}, tok_s_stream=40.0),
                _point(1, input_len=128, tok_s_stream=60.0), _point(2, tok_s_stream=45.0))
    other = _run("b", _point(1, tok_s_stream=55.0), _point(1, {"k": 10}, tok_s_stream=10.0),
                 _point(1, input_len=128, tok_s_stream=30.0))
    rows = compare(base, other)
    assert [(r["concurrency"], r["input_len"], r["labels"], r["other"]) for r in rows] == [
        (1, 1024, {}, 55.0), (1, 128, {}, 30.0)]  # other labels, and C=2, have no partner


@pytest.mark.parametrize(("figure", "label", "before", "after", "regression"), [
    ("tok_s_stream", "tok/s/stream", 50.0, 40.0, True),
    ("tok_s_total", "tok/s total", 500.0, 600.0, False),
    ("ttft_ms", "TTFT ms", 100.0, 150.0, True),
    ("itl_ms", "ITL ms", 20.0, 15.0, False),
], ids=["stream-down", "total-up", "ttft-up", "itl-down"])
def test_each_figure_is_judged_the_way_it_is_better(figure, label, before, after, regression):
    (row,) = compare(_run("a", _point(1, **{figure: before})),
                     _run("b", _point(1, **{figure: after})))
    assert (row["figure"], row["regression"]) == (label, regression)
    assert row["change_pct"] == pytest.approx(100 * (after - before) / before)


def test_labels_match_whatever_their_order_and_a_zero_base_has_no_percentage():
    base = _run("a", _point(1, {"x": 1, "y": 2}, itl_ms=0.0))
    other = _run("b", _point(1, {"y": 2, "x": 1}, itl_ms=5.0))
    (row,) = compare(base, other)
    assert row["change_pct"] is None and row["regression"] is True
    table = compare_markdown(base, other)
    assert table.splitlines()[0] == "b (2026-11-29T10:00:00Z) vs a (2026-11-29T10:00:00Z)"
    assert "| 1 | in=1024 out=128 x=1 y=2 | ITL ms | 0.0 | 5.0 | - | 0.0 | REGRESSION |" in table


def test_a_figure_missing_on_one_side_is_not_compared():
    base = _run("a", _point(1, tok_s_stream=50.0, itl_ms=20.0))
    other = _run("b", _point(1, tok_s_stream=50.0))
    assert [r["figure"] for r in compare(base, other)] == ["tok/s/stream"]


def test_the_plot_is_a_png_of_every_run_written_whole(tmp_path):
    runs = [_run("a", _point(1, tok_s_stream=50.0, tok_s_total=50.0, itl_ms=20.0),
                 _point(4, tok_s_stream=40.0, tok_s_total=160.0, itl_ms=25.0)),
            _run("b", _point(1, {"k": 8}, tok_s_stream=55.0, tok_s_total=55.0, itl_ms=18.0),
                 _point(2, {"k": 8}, tok_s_total=100.0))]
    out = plot(runs, tmp_path / "sub" / "plot.png")
    assert out == tmp_path / "sub" / "plot.png"
    data = out.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 10_000
    assert sorted(p.name for p in out.parent.iterdir()) == ["plot.png"]  # no temporary left


def test_the_start_table_has_a_row_per_timed_start_and_says_what_was_not_timed():
    cold = {"labels": {"k": 8}, "start": {"health_s": 312.44, "first_token_s": 320.0}}
    warm = {"labels": {"k": 8}, "start": {"health_s": 41.0, "first_token_s": None,
                                          "error": "no token streamed"}}
    record = dict(_run("r"), runs=[cold, {"labels": {}}, warm])
    lines = start_markdown([record]).splitlines()
    assert lines[0] == "| start | values | to health s | to first token s | note |"
    assert lines[2] == "| r (2026-11-29T10:00:00Z) | k=8 | 312.4 | 320.0 |  |"
    assert lines[3] == "| r (2026-11-29T10:00:00Z) | k=8 | 41.0 | - | no token streamed |"
    assert len(lines) == 4  # the run without a start has no row
    assert start_markdown([_run("url")]) == ""


class _Rendered:
    """What warm_up reads of a rendered recipe (its name, model, port and values)."""

    def __init__(self, port: int):
        self.name, self.model, self.health_port = "fixture", "fixture-model", port
        self.values = {"served_model_name": None}


def test_a_warm_up_outside_the_container_checks_health_then_says_where_the_client_failed():
    with BenchServer(ServerConfig()) as server:
        port = int(server.url.rsplit(":", 1)[1])
        with pytest.raises(BenchError) as raised:
            warm_up(PythonRunner(sys.executable, where="client here"), _Rendered(port),
                    WarmPlan(prompts=1, lengths=[(16, 4)]))
    line = str(raised.value)
    assert line.startswith("vllm bench serve (client here) wrote no result (exit 1): ")
    assert "No module named 'vllm'" in line


def test_a_warm_up_of_a_server_that_is_not_there_is_one_line(monkeypatch):
    import socket

    from edgevllm.perf import warm

    original = warm.wait_for_health  # its 60 s is for a real server's start: 1 s here
    monkeypatch.setattr(warm, "wait_for_health", lambda url, seconds: original(url, 1))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(BenchError, match=f"server http://localhost:{port} not healthy after 1s"):
        warm_up(PythonRunner(sys.executable), _Rendered(port), WarmPlan(prompts=1))
