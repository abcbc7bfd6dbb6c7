"""Where the benchmark client runs and what edgevllm asks of a server itself (perf/client.py,
perf/sweep.py, perf/bench.py, perf/warm.py), with real subprocesses and real servers on
127.0.0.1: a client python that is missing, or has no vLLM, is one line and a record that says
so; each request has a deadline and a size bound; a server still starting is waited for and
one that is not OpenAI's is not. vLLM's own client measuring the fixture server (~15 s a start)
is tests/e2e/test_bench_client.py."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from edgevllm.common.errors import BenchError
from edgevllm.perf.bench import bench_url
from edgevllm.perf.client import (
    ClientArgs,
    PythonRunner,
    http_get,
    parse_result,
    run_once,
    within,
)
from edgevllm.perf.record import load_record
from edgevllm.perf.sweep import SweepPlan, openai_models, served_model
from support.bench_server import BenchServer, ServerConfig
from support.localhttp import serve_handler, serve_pages

ARGS = ClientArgs("http://127.0.0.1:9", "org/model", "org/tok", 4, 16, 128, 32, 7, "/tmp/r",
                  "point.json")


def test_the_client_flags_are_vllms_for_a_random_and_a_custom_dataset():
    argv = ARGS.argv()
    pairs = dict(zip(argv, argv[1:], strict=False))
    assert pairs["--base-url"] == "http://127.0.0.1:9" and pairs["--endpoint"] == "/v1/completions"
    assert (pairs["--max-concurrency"], pairs["--num-prompts"], pairs["--seed"]) == ("4", "16",
                                                                                   "7")
    assert (pairs["--random-input-len"], pairs["--random-output-len"]) == ("128", "32")
    assert pairs["--result-filename"] == "point.json" and "--ignore-eos" in argv
    assert "--served-model-name" not in argv and "--ready-check-timeout-sec" not in argv
    custom = replace(ARGS, prompt_file="/p.jsonl", served_model_name="served",
                     ready_timeout_s=30).argv()
    pairs = dict(zip(custom, custom[1:], strict=False))
    assert pairs["--dataset-name"] == "custom" and pairs["--dataset-path"] == "/p.jsonl"
    assert pairs["--custom-output-len"] == "32" and "--random-input-len" not in custom
    assert pairs["--served-model-name"] == "served" and pairs["--ready-check-timeout-sec"] == "30"


def test_a_client_python_that_is_not_there_is_one_line_saying_what_to_pass(tmp_path):
    runner = PythonRunner(str(tmp_path / "no-python"))
    with pytest.raises(BenchError, match="benchmark client python '.*no-python' not found: pass "
                                         "--client-python"):
        runner.run(replace(ARGS, result_dir=str(tmp_path)), 30)


def test_a_client_python_without_vllm_writes_no_result_and_says_why(tmp_path):
    """The real interpreter runs the real client code: it stops at ``import vllm``."""
    runner = PythonRunner(sys.executable)
    args = ClientArgs("http://127.0.0.1:9", "m", "m", 1, 1, 8, 8, 0, str(tmp_path / "res"),
                      "r.json")
    stale = tmp_path / "res" / "r.json"
    stale.parent.mkdir()
    stale.write_text(json.dumps({"completed": 99}))  # a result of an earlier run: not read
    result = runner.run(args, 60)
    assert result.returncode != 0 and result.result_json is None
    assert not stale.exists()
    with pytest.raises(BenchError) as raised:
        run_once(runner, args, 60)
    line = str(raised.value)
    assert line.startswith("vllm bench serve (local python) wrote no result (exit 1): ")
    assert "No module named 'vllm'" in line and "\n" not in line
    assert runner.vllm_version() is None


def test_the_whole_runs_deadline_passes_its_runner_through():
    runner = within(PythonRunner(sys.executable, where="here"), 600)
    assert runner.where == "here" and runner.vllm_version() is None
    assert runner.seconds == 600


@pytest.mark.parametrize(("data", "said"), [
    (b"", "the benchmark result is not JSON"),
    (b"{\"completed\": ", "the benchmark result is not JSON"),
    (b"[1, 2]", "the benchmark result is not a JSON object"),
    (b"\xff\xfe", "the benchmark result is not JSON"),
], ids=["empty", "cut", "list", "binary"])
def test_a_result_file_that_is_no_result_is_one_line_naming_it(data, said):
    with pytest.raises(BenchError) as raised:
        parse_result(data, "container c:/tmp/r.json")
    assert str(raised.value).startswith(f"container c:/tmp/r.json: {said}")
    assert "\n" not in str(raised.value)


def test_a_request_reads_at_most_its_limit_and_refuses_what_is_no_http_url():
    with serve_pages({"/big": b"x" * 5000}) as base:
        answer = http_get(f"{base}/big", 10, limit=100)
        assert (answer.status, answer.body) == (200, b"x" * 100)
        assert http_get(f"{base}/big?x=1", 10).status == 404  # the query is sent
        assert http_get(f"{base}/missing", 10).status == 404
    for url in ("ftp://127.0.0.1/x", "127.0.0.1:8000", "http:///path"):
        with pytest.raises(ValueError, match="not an http"):
            http_get(url, 1)


class _StartsLate(BaseHTTPRequestHandler):
    """A server that answers 503 to its first two asks (still loading), then a model list."""

    asks: list[str] = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.asks.append(self.path)
        ready = len(self.asks) > 2
        body = json.dumps({"data": [{"id": "late/model"}]}).encode() if ready else b"loading"
        self.send_response(200 if ready else 503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_server_still_starting_is_waited_for_then_its_first_model_named():
    _StartsLate.asks = []
    with serve_handler(_StartsLate) as base:
        assert served_model(base, 30) == "late/model"
    assert _StartsLate.asks == ["/v1/models"] * 3


def test_a_server_that_stays_5xx_is_one_line_with_what_it_last_said():
    with serve_pages({}) as base:  # 404 for everything: not OpenAI's, said at once
        with pytest.raises(BenchError, match="answered HTTP 404"):
            openai_models(base, 30)
    with serve_handler(_NeverReady) as base:
        with pytest.raises(BenchError) as raised:
            openai_models(base, 1)
    assert str(raised.value) == (f"{base}/v1/models: no answer within 1s (HTTP 503); start the "
                                 "server or raise --health-timeout")


class _NeverReady(_StartsLate):
    def do_GET(self):  # noqa: N802
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.mark.parametrize(("answer", "said"), [
    ({"data": []}, "lists no model: pass --model"),
    ({"data": ["m"]}, "gives no usable model id"),
    ({"data": [{"id": ""}]}, "gives no usable model id"),
    ({"data": [{"id": "bad\nid"}]}, "gives no usable model id"),
    ({"data": [{"id": 5}]}, "gives no usable model id"),
], ids=["empty", "no-object", "empty-id", "newline", "number"])
def test_a_model_list_without_a_usable_first_id_says_pass_model(answer, said):
    with serve_pages({"/v1/models": json.dumps(answer).encode()}) as base:
        with pytest.raises(BenchError, match=said):
            served_model(base, 5)


def test_bench_url_with_a_client_that_cannot_run_keeps_a_record_saying_so(tmp_path):
    """A healthy server, a client python without vLLM: the warm-up fails; the record is
    written with status ``errors``, the line, the plan and no points, and reads back."""
    plan = SweepPlan(concurrency=[1, 2], lengths=[(32, 8)], repeats=1, rounds=1,
                     warmup_prompts=1, health_timeout_s=10)
    lines: list[str] = []
    with BenchServer(ServerConfig()) as server:
        record = bench_url(server.url + "/", "fixture-model", None, plan,
                           PythonRunner(sys.executable), tmp_path, progress=lines.append)
    assert record["status"] == "errors" and record["points"] == []
    assert "wrote no result" in record["error"] and "No module named 'vllm'" in record["error"]
    assert record["vllm_version"] is None and record["client"] == "local python"
    assert record["plan"]["concurrency"] == [1, 2] and record["expectations"] == []
    assert record["start"]["health_s"] is None  # a server given by URL: its start not timed
    assert lines == ["warm-up: 1 requests"]
    saved = load_record(Path(record["path"]))
    assert saved["status"] == "errors" and saved["error"] == record["error"]
    assert Path(record["path"]).parent == tmp_path


def test_bench_url_without_warm_up_fails_at_the_first_point_and_names_it(tmp_path):
    plan = SweepPlan(concurrency=[4], lengths=[(64, 8)], repeats=2, rounds=1, warmup_prompts=0,
                     health_timeout_s=10)
    lines: list[str] = []
    with BenchServer(ServerConfig()) as server:
        record = bench_url(server.url, "fixture-model", "tok", plan,
                           PythonRunner(sys.executable), tmp_path, progress=lines.append)
    assert record["status"] == "errors" and lines == ["point C=4 in=64 out=8 "]
    assert record["points"] == []  # a point that did not finish is not a point
