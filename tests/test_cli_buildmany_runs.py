"""``inv build --target thor,spark`` (cli/buildmany.py) run for real: one ``edgevllm build``
child process per target, in parallel. The children here are refused before they meet an
engine (a spec file that is not there), so nothing is built: what is tested is what the parent
does with them: a progress line and a log per target, one summary, the JSON of every target's
outcome, one error line naming each failed target with exit 6 (BuildError), and no staging
folder left. A list that names a target twice, or a double build of several, is refused
before any child starts. ``inv targets`` lists what targets/ holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from edgevllm.common.paths import project_root
from support.inprocess import exit_code, one_error, own_user_folders, run_cli


@pytest.fixture
def work(tmp_path, monkeypatch) -> Path:
    own_user_folders(tmp_path, monkeypatch)
    return tmp_path


def test_two_targets_that_both_fail_give_one_line_a_log_each_and_their_json(work, capsys,
                                                                           monkeypatch):
    """``--engine thor=ENGINE`` goes to thor's child alone; spark builds here. The children are
    refused at the spec, so neither engine is reached."""
    missing = work / "missing.yaml"
    engine = "ssh://nobody@127.0.0.1:1"
    code, err = run_cli(capsys, monkeypatch, "build", "--target", "thor,spark", "--spec",
                        str(missing), "--engine", f"thor={engine}", "--out", str(work / "out"),
                        "--json", str(work / "many.json"))
    assert code == 6, err
    line = one_error(err)
    assert line.startswith(f"error: 2 of 2 builds failed: thor on {engine} (")
    assert f"spark on default ({missing}: no such file; check the path)" in line
    results = json.loads((work / "many.json").read_text())
    assert set(results) == {"thor", "spark"}
    for target in ("thor", "spark"):
        assert results[target] == {"error": f"{missing}: no such file; check the path",
                                   "exit_code": 2}
        (log,) = (work / "out" / target / "logs").glob("console-*.log")
        assert f"error: {missing}: no such file" in log.read_text()
    assert "summary" in err and "FAILED (exit 2)" in err  # the line each target ended with
    assert [p.name for p in (work / "out").iterdir() if p.name.startswith(".build-many")] == []


def test_the_children_are_given_each_flag_as_given(work, capsys, monkeypatch):
    """What a child said lands in its own log: here each child refuses its --max-jobs the same
    way a single build does, proving the flag reached it."""
    code, err = run_cli(capsys, monkeypatch, "build", "--target", "thor,spark", "--max-jobs",
                        "lots", "--out", str(work / "out"))
    assert code == 6, err
    for target in ("thor", "spark"):
        (log,) = (work / "out" / target / "logs").glob("console-*.log")
        assert "--max-jobs 'lots'" in log.read_text()
    assert "--max-jobs 'lots'" in one_error(err)


@pytest.mark.parametrize(("argv", "code", "said"), [
    (["--target", "thor,thor"], 2, "--target thor,thor: names a target twice; name each once"),
    (["--target", "thor,spark", "--check-reproducible"], 2,
     "--check-reproducible builds one target twice; give one --target"),
    (["--target", "thor,spark", "--engine", "orin=ssh://me@orin"], 2,
     "'orin' is not a target of this build (--target: thor, spark)"),
], ids=["twice", "check-reproducible", "engine-of-no-target"])
def test_a_build_of_several_that_cannot_be_meant_starts_no_child(work, capsys, monkeypatch,
                                                                  argv, code, said):
    got, err = run_cli(capsys, monkeypatch, "build", *argv, "--out", str(work / "out"))
    assert got == code, err
    assert said in one_error(err)
    assert not (work / "out").exists()


def test_targets_lists_each_target_file_and_its_json_is_the_files_facts(capsys, monkeypatch):
    files = sorted((project_root() / "targets").glob("*.yaml"))
    monkeypatch.setenv("NO_COLOR", "1")
    capsys.readouterr()
    assert exit_code(["targets", "--as-json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [t["name"] for t in listed] == [p.stem for p in files]
    for target, path in zip(listed, files, strict=True):
        data = yaml.safe_load(path.read_text())
        assert target["cuda_arch"] == str(data["cuda_arch"])
        assert target["platform"] == data["platform"]
    assert exit_code(["targets"]) == 0
    table = capsys.readouterr().out
    assert all(p.stem in table for p in files)

