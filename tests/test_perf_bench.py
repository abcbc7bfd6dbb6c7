"""inv bench without a client run: unhealthy servers, bad input, reports and regressions.

The measurements themselves (vLLM's real client against the fixture server) are in
tests/e2e/test_bench_client.py: each client start imports vLLM (~15 s), too slow for the fast loop.
"""

from __future__ import annotations

import http.server
import json
import socketserver
import sys
import threading
import time
from contextlib import contextmanager

import pytest

from edgevllm.perf.metrics import summarise
from edgevllm.perf.record import new_record, save_record
from edgevllm.perf.report import compare
from support.bench_server import BenchServer, ServerConfig
from support.localhttp import serve_handler


def test_unhealthy_server_gives_one_line_and_a_record_that_says_so(tmp_path, cli):
    with BenchServer(ServerConfig(healthy=False)) as server:
        code, stdout, stderr = cli("bench", server.url, "--model", "m",
                                   "--client-python", sys.executable, "--health-timeout", "2",
                                   "--out", str(tmp_path))
    assert code == 12, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "not healthy after 2s" in errors[0], stderr
    assert "Traceback" not in stderr
    (path,) = tmp_path.glob("*.json")
    record = json.loads(path.read_text())
    assert record["status"] == "unhealthy" and record["points"] == []
    assert "not healthy" in record["error"]
    # A server given by URL was started by someone else: the record says its start is not timed.
    assert record["start"]["health_s"] is None and "already running" in record["start"]["error"]


def test_bad_flags_are_one_line(cli, tmp_path):
    code, _, stderr = cli("bench", "http://127.0.0.1:9", "--lengths", "1024",
                          "--out", str(tmp_path))
    assert code == 2 and "error: --lengths '1024': write INPUT:OUTPUT" in stderr
    code, _, stderr = cli("bench", "--report", str(tmp_path / "none.json"))
    assert code == 2 and stderr.strip() == f"error: {tmp_path / 'none.json'}: no such " \
                                           "benchmark record; give a file inv bench wrote"
    code, _, stderr = cli("bench", "http://127.0.0.1:9", "--sweep", "k=1,2")
    assert code == 12 and "give a recipe, not a URL" in stderr


def _record(tmp_path, name: str, itl_runs: list[float]):
    runs = [{"itl_ms": v, "tok_s_stream": 1000 / v, "failed": 0} for v in itl_runs]
    record = new_record(name)
    record["points"] = [{"concurrency": 1, "input_len": 32, "output_len": 16, "labels": {},
                         "runs": runs, "summary": summarise(runs)}]
    record["status"] = "complete"
    return save_record(record, tmp_path / f"{name}.json"), record


def test_regression_only_when_medians_differ_by_more_than_the_spread(tmp_path):
    _, base = _record(tmp_path, "a", [20.0, 21.0, 22.0])
    _, noisy = _record(tmp_path, "b", [21.5, 22.5, 23.0])  # +1.5 ms, spread 2 ms: noise
    _, slow = _record(tmp_path, "c", [30.0, 30.5, 31.0])  # +9.5 ms: regression
    _, fast = _record(tmp_path, "d", [10.0, 10.5, 11.0])  # better: never a regression
    verdict = {r["figure"]: r["regression"] for r in compare(base, noisy)}
    assert verdict == {"ITL ms": False, "tok/s/stream": False}
    verdict = {r["figure"]: r["regression"] for r in compare(base, slow)}
    assert verdict == {"ITL ms": True, "tok/s/stream": True}
    assert not any(r["regression"] for r in compare(base, fast))


def test_cli_report_prints_table_comparison_and_png(tmp_path, cli):
    a, _ = _record(tmp_path, "a", [20.0, 21.0, 22.0])
    c, _ = _record(tmp_path, "c", [30.0, 30.5, 31.0])
    png = tmp_path / "plot.png"
    code, stdout, stderr = cli("bench", "--report", str(a), "--compare", str(c),
                               "--png", str(png))
    assert code == 0, stderr
    assert "| a | in=32 out=16 | 1 | 47.6 [45.5-50.0]" in stdout
    assert "| 1 | in=32 out=16 | ITL ms | 21.0 | 30.5 | +45.2% | 2.0 | REGRESSION |" in stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_table_shows_single_stream_as_share_of_the_roofline(tmp_path):
    from edgevllm.perf.report import markdown

    _, record = _record(tmp_path, "a", [20.0, 20.0, 20.0])  # 50 tok/s per stream
    record["roofline"] = {"ceiling_tok_s": 80.0}
    assert markdown([record]).splitlines()[-1].endswith("| 62% of 80 |")
    record["roofline"] = {"unknown": "roofline unknown: no config.json"}
    assert markdown([record]).splitlines()[-1].endswith("| unknown |")


def test_recipe_expectations_are_met_or_missed_for_their_target(tmp_path):
    from edgevllm.perf.expect import judge, parse_expectations
    from edgevllm.serve.recipe.load import load_recipe

    loaded = load_recipe("nemotron-3-nano-w4a16-b12x-spark")
    expectations = parse_expectations(loaded.recipe.expect, "recipe")
    _, record = _record(tmp_path, "a", [13.0, 13.4, 13.2])  # 75.8 tok/s per stream at C=1
    record["target"] = "spark"
    verdicts = {(v["metric"], v["concurrency"]): v["status"]
                for v in judge(expectations, record)}
    assert verdicts == {("tok_s_stream", 1): "met", ("tok_s_total", 16): "not measured"}
    _, slow = _record(tmp_path, "b", [14.0, 14.2, 14.4])  # 70.4 tok/s: below 74.75
    slow["target"] = "spark"
    assert judge(expectations, slow)[0]["status"] == "missed"
    slow["target"] = "thor"
    assert judge(expectations, slow) == []


class _Dribble(socketserver.BaseRequestHandler):
    """Answers anything with an endless garbage status line, one byte every 0.3 s: each read
    gets a byte well inside any per-read timeout, so only a deadline for the whole answer ends
    the wait."""

    def handle(self):
        try:
            self.request.sendall(b"HTTP/1.1 200 ")
            while True:
                self.request.sendall(b"x")
                time.sleep(0.3)
        except OSError:
            return


def test_a_request_has_a_deadline_for_its_whole_answer():
    from edgevllm.perf.client import http_get

    with serve_handler(_Dribble, socketserver.ThreadingTCPServer) as url:
        started = time.monotonic()
        with pytest.raises(OSError, match="no whole answer within 1s"):
            http_get(f"{url}/health", 1)
        waited = time.monotonic() - started
    assert waited < 30, waited  # not a timing assertion: without the deadline it never returns


def test_inv_bench_against_a_server_that_answers_garbage_ends_with_one_line(tmp_path, cli):
    """/v1/models answered with endless garbage: one error line within the probe's deadline,
    nothing written (no server was measured)."""
    with serve_handler(_Dribble, socketserver.ThreadingTCPServer) as url:
        code, _, stderr = cli("bench", url, "--client-python", sys.executable,
                              "--health-timeout", "2", "--out", str(tmp_path))
    assert code == 12, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "sent no whole HTTP answer within 2s" in errors[0], stderr
    assert "Traceback" not in stderr
    assert list(tmp_path.iterdir()) == []


def test_the_whole_run_has_a_deadline():
    """No client run starts once the run's time is spent (each gets what is left of it)."""
    from edgevllm.common.errors import BenchError
    from edgevllm.perf.client import ClientArgs, PythonRunner, within

    runner = within(PythonRunner(sys.executable), 0.5)
    time.sleep(0.6)
    args = ClientArgs("http://127.0.0.1:9", "m", "m", 1, 1, 8, 8, 0, "/nonexistent", "r.json")
    with pytest.raises(BenchError, match="past its --run-timeout of 0s"):
        runner.run(args, 60)


class _Junk(socketserver.BaseRequestHandler):
    """A TCP server that is no HTTP server: answers any request with bytes that are not HTTP
    (``junk``), or closes at once (``close``)."""

    mode = "junk"

    def handle(self):
        try:
            if self.mode == "junk":
                self.request.recv(1024)
                self.request.sendall(b"\x00\xff SSH-2.0-not-http\r\n\r\n")
        except OSError:
            return


class _Closes(_Junk):
    mode = "close"


class _Html(http.server.BaseHTTPRequestHandler):
    """An HTTP server that is not OpenAI's: a web page at every path, or a JSON object
    without a model list at /v1/models (``json``)."""

    body = b"<!doctype html><html><body>It works!</body></html>"

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        return


class _JsonNoData(_Html):
    body = b'{"models": ["m"]}'


class _NotFound(_Html):
    def do_GET(self):
        self.send_error(404)


def _local_server(handler):
    kind = socketserver.ThreadingTCPServer if issubclass(handler, _Junk) else None
    return serve_handler(handler, kind)


@pytest.mark.parametrize(("handler", "said"), [
    (_Junk, "answered something other than HTTP"),
    (_Closes, "closed the connection without an HTTP answer"),
    (_Html, "answered text that is not JSON"),
    (_JsonNoData, "JSON without a 'data' list"),
    (_NotFound, "answered HTTP 404"),
], ids=["junk", "closes", "html", "json-no-data", "404"])
def test_an_endpoint_that_is_not_an_openai_server_is_one_line_at_once(tmp_path, cli, handler,
                                                                       said):
    """The /v1/models probe tells a non-HTTP or non-OpenAI endpoint before anything is
    measured or written (default --health-timeout: 60 s, which it does not wait out)."""
    with _local_server(handler) as url:
        started = time.monotonic()
        code, stdout, stderr = cli("bench", url, "--client-python", sys.executable,
                                   "--out", str(tmp_path / "bench"))
        seconds = time.monotonic() - started
    print(f"{handler.__name__}: refused in {seconds:.2f}s")  # the figure; no timed assertion
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr, stderr
    assert len(lines) == 1 and lines[0].startswith(f"error: {url}/v1/models: "), stderr
    assert said in lines[0] and "OpenAI" in lines[0], lines[0]
    assert code == 12, stderr
    assert not (tmp_path / "bench").exists(), "a record was written for a server never measured"


def test_a_server_that_refuses_connections_is_waited_for_then_one_line(tmp_path, cli):
    """Nothing listening (a server still starting) is waited for up to --health-timeout."""
    with socketserver.TCPServer(("127.0.0.1", 0), _Junk) as taken:
        port = taken.server_address[1]
    code, _, stderr = cli("bench", f"http://127.0.0.1:{port}", "--health-timeout", "1",
                          "--out", str(tmp_path / "bench"))
    assert code == 12 and "no answer within 1s (connection refused)" in stderr, stderr
    assert not (tmp_path / "bench").exists()
