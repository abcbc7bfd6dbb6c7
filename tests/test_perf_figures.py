"""A benchmark's figures and verdicts (perf/metrics.py, perf/expect.py, perf/record.py): what a
``vllm bench serve`` result becomes, how repeats summarise, whether a recipe's ``expect:``
entries are met, and a record written and read back. Others' data throughout: a wrong value is
a missing figure or one of edgevllm's errors in one line, never a crash."""

from __future__ import annotations

import json
import math
import re
from http.server import BaseHTTPRequestHandler

import pytest

from edgevllm.common.errors import BenchError, MissingInputError
from edgevllm.perf.bench import roofline_facts, sweep_values
from edgevllm.perf.expect import judge, parse_expectations
from edgevllm.perf.metrics import SUMMARISED, figures, spread, summarise
from edgevllm.perf.record import SCHEMA, load_record, new_record, record_path, save_record
from edgevllm.perf.sweep import wait_for_health
from support.localhttp import serve_handler
from support.offline import tiny_model_files

RESULT = {"median_ttft_ms": 120.0, "p90_ttft_ms": 150.0, "p99_ttft_ms": 180.0,
          "median_tpot_ms": 20.0, "median_itl_ms": 19.5, "output_throughput": 48.0,
          "request_throughput": 0.5, "duration": 64.0, "completed": 32, "failed": 0,
          "errors": ["", ""], "version": "0.33.0"}


# -- metrics -------------------------------------------------------------------------------------
def test_a_result_gives_the_figures_the_reports_read():
    found = figures(RESULT)
    assert found["ttft_ms"] == 120.0 and found["ttft_p99_ms"] == 180.0
    assert found["tok_s_stream"] == 50.0  # 1000 / the median TPOT
    assert found["tok_s_total"] == 48.0 and found["req_s"] == 0.5
    assert (found["completed"], found["failed"], found["first_error"]) == (32, 0, None)
    assert found["vllm_version"] == "0.33.0"


@pytest.mark.parametrize("bad", ["fast", None, True, -1.0, math.nan, math.inf, [20.0]],
                         ids=["text", "null", "bool", "negative", "nan", "inf", "list"])
def test_a_figure_of_the_wrong_kind_is_missing_not_a_crash(bad):
    found = figures({**RESULT, "median_tpot_ms": bad, "completed": bad})
    assert found["tpot_ms"] is None and found["tok_s_stream"] is None
    assert found["completed"] == 0
    assert found["ttft_ms"] == 120.0  # the others stay


def test_a_zero_tpot_gives_no_stream_rate_rather_than_a_division_by_zero():
    assert figures({**RESULT, "median_tpot_ms": 0})["tok_s_stream"] is None


def test_the_first_error_is_its_last_line_cut_to_one_line():
    trace = "Traceback (most recent call last):\n  File x\n\nConnectionError: refused  \n"
    found = figures({**RESULT, "failed": 2, "errors": ["", trace, "other"],
                     "version": 33})
    assert found["first_error"] == "ConnectionError: refused"
    assert found["failed"] == 2 and found["vllm_version"] is None
    assert len(figures({**RESULT, "errors": ["x" * 1000]})["first_error"]) == 300
    assert figures({**RESULT, "errors": "not a list"})["first_error"] is None


def test_repeats_summarise_to_median_min_max_and_their_spread():
    repeats = [figures({**RESULT, "median_tpot_ms": tpot}) for tpot in (20.0, 25.0, 40.0)]
    summary = summarise(repeats)
    assert summary["tok_s_stream"] == {"median": 40.0, "min": 25.0, "max": 50.0}
    assert spread(summary["tok_s_stream"]) == 25.0
    assert set(summary) <= set(SUMMARISED)
    assert "ttft_p90_ms" in summary and "itl_p90_ms" not in summary  # never measured


# -- expectations --------------------------------------------------------------------------------
def _record(target: str, medians: dict[int, float]) -> dict:
    return {"target": target, "points": [
        {"concurrency": c, "input_len": 1024, "output_len": 128,
         "summary": {"tok_s_stream": {"median": m, "min": m, "max": m}}}
        for c, m in medians.items()]}


def test_expectations_are_met_missed_not_measured_or_not_judged():
    expect = parse_expectations([
        {"target": "spark", "concurrency": 1, "metric": "tok_s_stream", "at_least": 70,
         "source": "blog"},
        {"target": "spark", "concurrency": 4, "metric": "tok_s_stream", "at_least": 60},
        {"target": "spark", "concurrency": 8, "metric": "tok_s_stream", "at_most": 10},
        {"target": "thor", "concurrency": 1, "metric": "tok_s_stream", "at_least": 1},
        {"concurrency": 1, "metric": "tok_s_stream", "at_most": 80, "input_len": 1024},
    ], "recipes/x.yaml")
    verdicts = judge(expect, _record("spark", {1: 74.75, 4: 50.0}))
    assert [(v["concurrency"], v["kind"], v["status"]) for v in verdicts] == [
        (1, "at_least", "met"), (4, "at_least", "missed"), (8, "at_most", "not measured"),
        (1, "at_most", "met")]  # thor's is not judged on spark
    assert verdicts[0]["measured"] == 74.75 and verdicts[0]["source"] == "blog"
    assert verdicts[2]["measured"] is None


@pytest.mark.parametrize(("entry", "said"), [
    ({"metric": "speed", "at_least": 1}, "metric 'speed' is not one of"),
    ({"metric": "tok_s_stream"}, "give exactly one of at_least or at_most"),
    ({"metric": "tok_s_stream", "at_least": 1, "at_most": 2}, "exactly one"),
    ({"metric": "tok_s_stream", "at_least": 1, "concurrency": 0}, "concurrency"),
    ({"metric": "tok_s_stream", "at_least": 1, "typo_field": 1}, "typo_field"),
], ids=["unknown-metric", "no-bound", "two-bounds", "concurrency-0", "unknown-field"])
def test_a_bad_expectation_is_one_line_naming_its_place(entry, said):
    with pytest.raises(BenchError) as info:
        parse_expectations([{"metric": "ttft_ms", "at_most": 1}, entry], "recipes/x.yaml")
    line = str(info.value)
    assert line.startswith("recipes/x.yaml: expect[1]: ") and said in line and "\n" not in line


# -- records -------------------------------------------------------------------------------------
def test_a_record_is_written_whole_and_read_back(tmp_path):
    record = new_record("qwen3 / 8b: nvfp4?", target="spark")
    record["points"].append({"concurrency": 1, "input_len": 8, "output_len": 8,
                             "summary": summarise([figures(RESULT)])})
    path = record_path(tmp_path, record["name"])
    assert re.fullmatch(r"\d{8}T\d{6}Z-qwen3-8b-nvfp4", path.stem), path.name
    save_record(record, path)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary left
    assert load_record(path) == record and record["schema"] == SCHEMA
    assert record["status"] == "running" and record["error"] is None
    assert record_path(tmp_path, "///").name.endswith("-bench.json")


@pytest.mark.parametrize(("data", "error", "said"), [
    (b"", BenchError, "not valid JSON"),
    (b"[1, 2]", BenchError, "not an inv bench record"),
    (json.dumps({"schema": SCHEMA, "points": []}).encode(), BenchError, "name"),
    (json.dumps({"schema": SCHEMA, "name": "x", "points": [
        {"concurrency": 1, "input_len": -1, "output_len": 1, "summary": {}}]}).encode(),
     BenchError, "points.0.input_len"),
    (json.dumps({"schema": SCHEMA, "name": "x", "points": [
        {"concurrency": 1, "input_len": 1, "output_len": 1,
         "summary": {"ttft_ms": {"median": "fast", "min": 1, "max": 1}}}]}).encode(),
     BenchError, "summary"),
], ids=["empty", "a-list", "no-name", "negative-length", "text-median"])
def test_a_record_that_is_not_one_is_one_line(tmp_path, data, error, said):
    path = tmp_path / "r.json"
    path.write_bytes(data)
    with pytest.raises(error) as info:
        load_record(path)
    assert said in str(info.value) and str(path) in str(info.value)
    assert "\n" not in str(info.value)


def test_a_missing_record_or_a_folder_is_one_line(tmp_path):
    with pytest.raises(MissingInputError, match="no such benchmark record"):
        load_record(tmp_path / "none.json")
    with pytest.raises(BenchError, match="cannot read it"):
        load_record(tmp_path)


# -- sweeps, the roofline's facts and the server's health -----------------------------------------
def test_sweeps_multiply_into_every_combination():
    assert sweep_values([]) == [{}]
    combos = sweep_values(["port=8000,8001", "max_model_len=4096"])
    assert combos == [{"port": 8000, "max_model_len": 4096},  # read as --set reads values
                      {"port": 8001, "max_model_len": 4096}]


@pytest.mark.parametrize("bad", ["port", "port=", "=1,2"], ids=["no-values", "empty", "no-name"])
def test_a_sweep_without_name_or_values_is_one_line(bad):
    with pytest.raises(BenchError) as info:
        sweep_values([bad])
    assert "--sweep" in str(info.value) and "\n" not in str(info.value)


def test_the_roofline_of_a_record_is_its_figures_or_why_not(tmp_path):
    assert roofline_facts(None, 273.0) is None
    assert roofline_facts(str(tmp_path / "none"), 273.0) == {
        "unknown": f"roofline unknown: {tmp_path / 'none'} is neither a folder nor a model id "
                   "(org/name)"}
    model = tmp_path / "tiny"
    for name, data in tiny_model_files().items():
        (model / name).parent.mkdir(parents=True, exist_ok=True)
        (model / name).write_bytes(data)
    facts = roofline_facts(str(model), 100.0)
    assert facts is not None and facts["ceiling_tok_s"] == pytest.approx(100e9 / 2048)


def _health(status: int) -> type[BaseHTTPRequestHandler]:
    class Health(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            self.send_response(status if self.path == "/health" else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    return Health


def test_a_healthy_server_is_seen_and_an_unhealthy_one_said_in_one_line():
    with serve_handler(_health(200)) as base:
        wait_for_health(base, 5)
    with serve_handler(_health(503)) as base:
        with pytest.raises(BenchError) as info:
            wait_for_health(base, 1)
    assert str(info.value) == f"server {base} not healthy after 1s (HTTP 503)"
    with pytest.raises(BenchError, match="give http://HOST:PORT"):
        wait_for_health("http://127.0.0.1:99999", 1)
