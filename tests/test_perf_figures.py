"""A benchmark's figures and verdicts (perf/metrics.py, perf/expect.py, perf/record.py): what a
``vllm bench serve`` result becomes, how repeats summarise, whether a recipe's ``expect:``
entries are met, and a record written and read back. Others' data throughout: a wrong value is
a missing figure or one of edgevllm's errors in one line, never a crash."""

from __future__ import annotations

import json
import math
import re

import pytest

from edgevllm.common.errors import BenchError, MissingInputError
from edgevllm.perf.expect import judge, parse_expectations
from edgevllm.perf.metrics import SUMMARISED, figures, spread, summarise
from edgevllm.perf.record import SCHEMA, load_record, new_record, record_path, save_record

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
