"""``inv bench http://HOST:PORT`` and ``inv warm`` as a user runs them (cli/bench.py,
cli/warm.py), in this process through the CLI's entry, against the fixture OpenAI server on
127.0.0.1 (tests/support/bench_server.py) with a client python that has no vLLM (this
interpreter): the model is asked of the server, the run fails at its first client start, and
the task says so in one line with exit 12, keeping a record that says why. Refusals of what
cannot be a server URL, a cluster recipe given to ``inv warm`` and an image reference that is
no reference come before any engine or file."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from edgevllm.perf.record import load_record
from support.bench_server import BenchServer, ServerConfig
from support.inprocess import one_error, own_user_folders, run_cli
from support.offline import tiny_model_files


@pytest.fixture
def work(tmp_path, monkeypatch) -> Path:
    own_user_folders(tmp_path, monkeypatch)
    return tmp_path


def _record_of(out: Path) -> dict:
    (path,) = out.glob("*.json")
    return dict(load_record(path), path=str(path))


def test_a_url_whose_client_cannot_run_is_one_line_and_a_record_naming_the_served_model(
        work, capsys, monkeypatch):
    out = work / "bench"
    with BenchServer(ServerConfig(model="org/served-model")) as server:
        code, err = run_cli(capsys, monkeypatch, "bench", server.url, "--client-python",
                            sys.executable, "--concurrency", "1,2", "--lengths", "16:4",
                            "--repeats", "1", "--warmup", "0", "--out", str(out))
    assert code == 12, err
    line = one_error(err)
    record = _record_of(out)
    assert line.startswith("error: bench errors: vllm bench serve (local python) wrote no "
                           "result (exit 1): ")
    assert line.endswith(f"; finished points kept in {record['path']}")
    assert record["model"] == "org/served-model"  # asked of /v1/models: no --model given
    assert record["status"] == "errors" and record["points"] == []
    assert record["plan"]["concurrency"] == [1, 2] and record["plan"]["lengths"] == [[16, 4]]
    assert "No module named 'vllm'" in record["error"]


def test_a_given_model_target_and_roofline_land_in_the_record(work, capsys, monkeypatch):
    model = work / "tiny"
    for name, data in tiny_model_files().items():
        (model / name).parent.mkdir(parents=True, exist_ok=True)
        (model / name).write_bytes(data)
    out = work / "bench"
    with BenchServer(ServerConfig()) as server:
        code, err = run_cli(capsys, monkeypatch, "bench", server.url + "/", "--model", "mine",
                            "--client-python", sys.executable, "--target", "spark",
                            "--roofline", str(model), "--out", str(out))
    assert code == 12, err
    record = _record_of(out)
    assert record["model"] == "mine" and record["target"] == "spark"
    assert record["roofline"]["bytes_per_token"] == 2048
    assert record["roofline"]["ceiling_tok_s"] > 0  # spark's bandwidth over those bytes


def test_a_client_python_that_is_not_there_is_one_line_saying_what_to_pass(work, capsys,
                                                                           monkeypatch):
    out = work / "bench"
    with BenchServer(ServerConfig()) as server:
        code, err = run_cli(capsys, monkeypatch, "bench", server.url, "--client-python",
                            str(work / "nopython"), "--out", str(out))
    assert code == 12, err
    assert f"benchmark client python '{work / 'nopython'}' not found: pass --client-python" \
        in one_error(err)
    assert not out.exists()  # asked for its vLLM version before a record is begun


@pytest.mark.parametrize("url", ["http://:8000", "http://127.0.0.1:0", "http://127.0.0.1:80 /x",
                                 "http://127.0.0.1:port", "https://"],
                         ids=["no-host", "port-0", "space", "named-port", "nothing"])
def test_what_cannot_be_a_server_url_is_refused_before_anything_is_written(work, capsys,
                                                                           monkeypatch, url):
    code, err = run_cli(capsys, monkeypatch, "bench", url, "--out", str(work / "bench"))
    assert code == 2, err
    line = one_error(err)
    assert "port" in line or "is not a server URL: give http://HOST:PORT" in line
    assert not (work / "bench").exists()


def test_warm_refuses_a_cluster_recipe_naming_its_solo_form(work, capsys, monkeypatch):
    code, err = run_cli(capsys, monkeypatch, "warm", "nemotron-3-super-nvfp4-2x-spark",
                        "--engine", "ssh://nobody@127.0.0.1:1")
    assert code == 11, err
    assert one_error(err) == ("error: recipe nemotron-3-super-nvfp4-2x-spark is a cluster "
                              "recipe: warm it on one node with its solo form")


@pytest.mark.parametrize("image", ["Not A Ref", "repo@sha256:short", "a/b:tag with space"])
def test_warm_refuses_an_image_that_is_no_reference_before_the_engine(work, capsys,
                                                                     monkeypatch, image):
    code, err = run_cli(capsys, monkeypatch, "warm", "qwen3-8b-nvfp4", "--image", image,
                        "--target", "spark", "--engine",
                        "ssh://nobody@127.0.0.1:1")
    assert code == 2, err
    assert "--image" in one_error(err)


def test_an_unknown_target_is_one_line_and_no_record_is_begun(work, capsys, monkeypatch):
    out = work / "bench"
    with BenchServer(ServerConfig()) as server:
        code, err = run_cli(capsys, monkeypatch, "bench", server.url, "--client-python",
                            sys.executable, "--target", "orin", "--out", str(out))
    assert code == 2, err
    assert "orin" in one_error(err)
    assert not out.exists()


def test_a_roofline_that_cannot_be_counted_is_recorded_as_unknown_not_guessed(work, capsys,
                                                                             monkeypatch):
    empty = work / "empty-model"
    empty.mkdir()
    out = work / "bench"
    with BenchServer(ServerConfig()) as server:
        code, err = run_cli(capsys, monkeypatch, "bench", server.url, "--client-python",
                            sys.executable, "--roofline", str(empty), "--out", str(out))
    assert code == 12, err  # the run itself fails at its client, as above
    record = _record_of(out)
    assert record["roofline"] == {"unknown": f"roofline unknown: {empty} has no config.json"}
