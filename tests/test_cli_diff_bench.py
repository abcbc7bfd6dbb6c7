"""``inv diff OLD NEW --bench A.json,B.json`` (cli/inspect.py reads the two bench records
itself): each point's medians keyed by concurrency and lengths, rounded to 2 places, the
roofline ceiling beside them; points only one side measured are said as added or removed. A
file that is not a bench record, in any of the shapes a hand-edited or foreign JSON takes, is
one line naming ``--bench`` and the file (exit 2), never a traceback; the locks compared are
real lock files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgevllm.specs.lock import write_lock
from support.inprocess import exit_code, one_error, run_cli
from support.inside_locks import make_lock


def _point(concurrency: int, median: float, metric: str = "tok_s_stream") -> dict:
    return {"concurrency": concurrency, "input_len": 128, "output_len": 64,
            "summary": {metric: {"median": median, "min": median, "max": median}}}


@pytest.fixture
def lock(tmp_path) -> Path:
    return write_lock(make_lock(), tmp_path / "a.lock.json")


def _write(tmp_path: Path, name: str, data: object) -> str:
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else json.dumps(data).encode())
    return str(path)


def _diff(capsys, monkeypatch, *argv: str) -> tuple[int, dict]:
    monkeypatch.setenv("NO_COLOR", "1")
    capsys.readouterr()
    code = exit_code(["diff", *argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out) if code == 0 else {}


def test_medians_are_rounded_keyed_by_point_and_added_or_removed_points_said(
        tmp_path, lock, capsys, monkeypatch):
    old = _write(tmp_path, "old.json", {"points": [_point(1, 10.123456), _point(4, 30.0)],
                                        "roofline": {"ceiling_tok_s": 40.0}})
    new = _write(tmp_path, "new.json", {"points": [_point(1, 10.129), _point(8, 55.5)],
                                        "roofline": {"ceiling_tok_s": 42.5}})
    code, result = _diff(capsys, monkeypatch, str(lock), str(lock), "--bench", old,
                         "--bench", new)
    assert code == 0
    bench = result["sections"]["bench"]
    assert bench["changed"] == {"c1 in128 out64 tok_s_stream": {"old": 10.12, "new": 10.13},
                                "roofline ceiling_tok_s": {"old": 40.0, "new": 42.5}}
    assert "c4 in128 out64 tok_s_stream" in json.dumps(bench.get("removed"))
    assert "c8 in128 out64 tok_s_stream" in json.dumps(bench.get("added"))


def test_equal_records_add_no_section(tmp_path, lock, capsys, monkeypatch):
    same = _write(tmp_path, "same.json", {"points": [_point(1, 10.0)]})
    code, result = _diff(capsys, monkeypatch, str(lock), str(lock), "--bench",
                         f"{same},{same}")
    assert code == 0 and "bench" not in result["sections"]


def test_a_summary_entry_without_a_median_is_left_out_not_a_failure(tmp_path, lock, capsys,
                                                                   monkeypatch):
    point = _point(1, 10.0)
    point["summary"]["failed"] = 3  # not stats: no median to compare
    point["summary"]["ttft_ms"] = {"min": 1.0}
    old = _write(tmp_path, "old.json", {"points": [point]})
    new = _write(tmp_path, "new.json", {"points": [_point(1, 11.0)]})
    code, result = _diff(capsys, monkeypatch, str(lock), str(lock), "--bench", f"{old},{new}")
    assert code == 0
    assert list(result["sections"]["bench"]["changed"]) == ["c1 in128 out64 tok_s_stream"]


@pytest.mark.parametrize(("data", "said"), [
    (b"\xff\xfe not utf-8", "not UTF-8 text (byte 0); save it as UTF-8"),
    (b"{\"points\": [", "not valid JSON (line 1: "),
], ids=["not-utf8", "cut"])
def test_a_file_that_is_no_json_text_is_the_loaders_line_naming_it(tmp_path, lock, capsys,
                                                                   monkeypatch, data, said):
    good = _write(tmp_path, "good.json", {"points": [_point(1, 10.0)]})
    bad = _write(tmp_path, "bad.json", data)
    code, err = run_cli(capsys, monkeypatch, "diff", str(lock), str(lock), "--bench",
                        f"{bad},{good}")
    assert code == 2, err
    assert one_error(err).startswith(f"error: {bad}: {said}")


@pytest.mark.parametrize("data", [
    [],
    {"points": "many"},
    {"points": [{"input_len": 1, "output_len": 1, "summary": {}}]},
    {"points": [{**_point(1, 1.0), "summary": [1, 2]}]},
    {"points": [_point(1, 1.0)], "roofline": "fast"},
    {"points": [{**_point(1, 1.0), "summary": {"x": {"median": "fast"}}}]},
], ids=["list", "points-text", "no-concurrency", "summary-list",
        "roofline-text", "median-text"])
def test_a_file_that_is_no_bench_record_is_one_line_naming_it(tmp_path, lock, capsys,
                                                              monkeypatch, data):
    good = _write(tmp_path, "good.json", {"points": [_point(1, 10.0)]})
    bad = _write(tmp_path, "bad.json", data)
    code, err = run_cli(capsys, monkeypatch, "diff", str(lock), str(lock), "--bench",
                        f"{good},{bad}")
    assert code == 2, err
    assert one_error(err) == (f"error: --bench {bad}: not a bench record (inv bench --out "
                              "writes one)")


@pytest.mark.parametrize("what", ["missing", "folder"])
def test_a_bench_path_that_is_no_file_is_one_line(tmp_path, lock, capsys, monkeypatch, what):
    path = tmp_path / "rec.json"
    if what == "folder":
        path.mkdir()
    good = _write(tmp_path, "good.json", {"points": []})
    code, err = run_cli(capsys, monkeypatch, "diff", str(lock), str(lock), "--bench",
                        f"{path},{good}")
    assert code == 2, err
    assert f"--bench {path}: not a bench record" in one_error(err)


@pytest.mark.parametrize("bench", ["a.json", "a.json,b.json,c.json", ","])
def test_anything_but_two_records_is_one_line(lock, capsys, monkeypatch, bench):
    code, err = run_cli(capsys, monkeypatch, "diff", str(lock), str(lock), "--bench", bench)
    assert code == 2, err
    assert one_error(err) == "error: --bench takes two records: --bench OLD.json,NEW.json"
