"""``inv roofline`` and ``inv bench --report`` (cli/bench.py) as a user runs them, in this process
through the CLI's own entry: what they print and write for real files (a tiny checkpoint laid
out as safetensors, benchmark records as ``inv bench`` writes them), and for bad ones one
``error:`` line with the error's own exit code, no traceback, nothing written. Neither task
measures anything here: no server, no GPU."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from edgevllm.common.errors import BenchError, ConfigError, NoSuchModelError, RooflineUnknown
from edgevllm.perf.record import SCHEMA
from edgevllm.specs.targets import load_target
from support.inprocess import exit_code, one_error, run_cli
from support.offline import tiny_model_files

STATS = {"median": 10.0, "min": 9.0, "max": 11.0}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_model(folder: Path, files: dict[str, bytes] | None = None) -> Path:
    for name, data in (files or tiny_model_files()).items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return folder


def safetensors(header: dict, data: bytes) -> bytes:
    head = json.dumps(header).encode()
    return struct.pack("<Q", len(head)) + head + data


def record(name: str, median: float = 10.0) -> dict:
    stats = {"median": median, "min": median - 1, "max": median + 1}
    point = {"input_len": 32, "output_len": 16, "concurrency": 1, "labels": {},
             "summary": {"tok_s_stream": stats, "tok_s_total": stats, "ttft_ms": STATS,
                         "itl_ms": STATS, "failed": {"median": 0, "min": 0, "max": 0}}}
    return {"schema": SCHEMA, "name": name, "status": "complete", "started": "2026-11-29",
            "points": [point]}


# -- inv roofline --------------------------------------------------------------------------------
def test_roofline_of_a_local_checkpoint_counts_its_stored_bytes(tmp_path, capsys, monkeypatch):
    model = write_model(tmp_path / "tiny")
    out = tmp_path / "roofline.json"
    code, err = run_cli(capsys, monkeypatch, "roofline", "--model", str(model), "--target",
                        "spark", "--json", str(out))
    assert code == 0, err
    figures = json.loads(out.read_text())
    bandwidth = load_target("spark").memory_bandwidth_gbps
    assert bandwidth is not None, "targets/spark.yaml names its memory bandwidth"
    assert figures["bytes_per_token"] == figures["dense_bytes"] == 512 * 4  # one F32 tensor
    assert figures["tensors"] == 1 and figures["bandwidth_gbps"] == bandwidth
    assert figures["ceiling_tok_s"] == pytest.approx(bandwidth * 1e9 / 2048)


def test_roofline_without_a_target_says_bytes_and_no_ceiling(tmp_path, capsys, monkeypatch):
    model = write_model(tmp_path / "tiny")
    capsys.readouterr()
    code = exit_code(["roofline", "--model", str(model)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "2048 bytes, 1 tensors" in out and "ceiling" not in out, out


def _bad_models(root: Path) -> dict[str, tuple[Path, str]]:
    config = tiny_model_files()["config.json"]
    lying = safetensors({"w": {"dtype": "F32", "shape": [512], "data_offsets": [0, 10 ** 8]}},
                        b"\0" * 16)
    cases = {
        "no weights": ({"config.json": config}, "has no safetensors weights"),
        "header past the file": ({"config.json": config, "model.safetensors": lying},
                                 "ends at byte 100000000 of the data, the file holds 16"),
        "header length past 64 bits": ({"config.json": config, "model.safetensors":
                                        struct.pack("<Q", 2 ** 60) + b"{}"},
                                       "bad safetensors header length"),
        "header not json": ({"config.json": config, "model.safetensors":
                             struct.pack("<Q", 4) + b"\xff\xfe{["}, "header"),
        "negative offsets": ({"config.json": config, "model.safetensors": safetensors(
            {"w": {"shape": [1], "data_offsets": [8, 4]}}, b"\0" * 8)},
                             "has no valid data_offsets/shape"),
        "too short": ({"config.json": config, "model.safetensors": b"\x01"}, "too short"),
    }
    return {kind: (write_model(root / kind.replace(" ", "-"), files), said)
            for kind, (files, said) in cases.items()}


@pytest.mark.parametrize("kind", ["no weights", "header past the file",
                                  "header length past 64 bits", "header not json",
                                  "negative offsets", "too short"])
def test_a_checkpoint_that_cannot_be_counted_is_one_line(tmp_path, capsys, monkeypatch, kind):
    model, said = _bad_models(tmp_path)[kind]
    out = tmp_path / "roofline.json"
    code, err = run_cli(capsys, monkeypatch, "roofline", "--model", str(model), "--target",
                        "spark", "--json", str(out))
    line = one_error(err)
    assert code == RooflineUnknown.exit_code, (code, line)
    assert said in line and line.startswith("error: roofline unknown: "), line
    assert not out.exists()


def test_roofline_of_nothing_or_for_an_unknown_target_is_one_line(tmp_path, capsys,
                                                                  monkeypatch):
    code, err = run_cli(capsys, monkeypatch, "roofline", "--model", str(tmp_path / "none"))
    assert "is neither a folder nor a model id" in one_error(err)
    assert code == NoSuchModelError.exit_code  # an input error: the user named nothing
    model = write_model(tmp_path / "tiny")
    code, err = run_cli(capsys, monkeypatch, "roofline", "--model", str(model), "--target",
                        "nope")
    assert "unknown target 'nope'" in one_error(err) and code == ConfigError.exit_code


# -- inv bench --report --------------------------------------------------------------------------
def test_a_report_prints_the_table_and_writes_the_plot(tmp_path, capsys, monkeypatch):
    first = tmp_path / "a.json"
    first.write_text(json.dumps(record("a")))
    png = tmp_path / "plots" / "a.png"
    capsys.readouterr()
    code, err = run_cli(capsys, monkeypatch, "bench", "--report", str(first), "--png", str(png))
    assert code == 0, err
    assert png.read_bytes().startswith(PNG_MAGIC)
    assert f"plot: {png}" in err


def test_a_report_with_a_comparison_gives_each_figure_a_verdict(tmp_path, capsys, monkeypatch):
    base, new = tmp_path / "base.json", tmp_path / "new.json"
    base.write_text(json.dumps(record("base", 10.0)))
    new.write_text(json.dumps(record("new", 5.0)))
    capsys.readouterr()
    code = exit_code(["bench", "--report", str(base), "--compare", str(new), "--png",
                      str(tmp_path / "cmp.png")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "new (2026-11-29) vs base (2026-11-29)" in out
    rows = {line.split("|")[3].strip(): line for line in out.splitlines() if "%" in line}
    assert set(rows) == {"tok/s/stream", "tok/s total", "TTFT ms", "ITL ms"}, out
    assert "-50.0%" in rows["tok/s/stream"] and "REGRESSION" in rows["tok/s/stream"]
    assert "+0.0%" in rows["TTFT ms"] and rows["TTFT ms"].rstrip(" |").endswith("ok")


def _bad_records(folder: Path) -> dict[str, tuple[Path, int | None, str]]:
    good = record("r")
    zero = json.loads(json.dumps(good))
    zero["points"][0]["concurrency"] = 0
    texts = {"not json": (b"{", BenchError.exit_code, "not valid JSON"),
             "other schema": (json.dumps({**good, "schema": "other/1"}).encode(),
                              BenchError.exit_code, "not an inv bench record"),
             "concurrency 0": (json.dumps(zero).encode(), BenchError.exit_code,
                               "points.0.concurrency"),
             "not utf8": (b'{"name": "\xff"}', BenchError.exit_code, "r.json")}
    found: dict[str, tuple[Path, int | None, str]] = {}
    for kind, (data, code, said) in texts.items():
        path = folder / kind.replace(" ", "-") / "r.json"
        path.parent.mkdir(parents=True)
        path.write_bytes(data)
        found[kind] = (path, code, said)
    found["missing"] = (folder / "none.json", None, "no such benchmark record")
    return found


@pytest.mark.parametrize("kind", ["not json", "other schema", "concurrency 0", "not utf8",
                                  "missing"])
def test_a_record_that_is_not_one_is_one_line_and_no_plot(tmp_path, capsys, monkeypatch, kind):
    path, expected, said = _bad_records(tmp_path)[kind]
    png = tmp_path / "plot.png"
    code, err = run_cli(capsys, monkeypatch, "bench", "--report", str(path), "--png", str(png))
    line = one_error(err)
    assert code != 0 and (expected is None or code == expected), (code, line)
    assert said in line, line
    assert not png.exists()
