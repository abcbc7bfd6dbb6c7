"""``inv verify`` as a user runs it (cli/verify.py), in this process through the CLI's entry, on
real files and without an engine: a folder whose shared objects hold no CUDA code fails the
gate in one line (exit 8) and still writes its JSON verdict; the supply-chain-only flags, a
``--diff`` of anything but two sources and a ``--max-library-size`` that is no size are each one
line before any scan, and a refused size leaves the setting as it was."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from edgevllm.verify.limits import SETTING
from support.inprocess import one_error, own_user_folders, run_cli


@pytest.fixture
def work(tmp_path, monkeypatch) -> Path:
    own_user_folders(tmp_path, monkeypatch)
    return tmp_path


@pytest.fixture
def host_lib(work) -> Path:
    """A folder holding one real shared object with no CUDA code (gcc-built)."""
    folder = work / "libs"
    folder.mkdir()
    source = work / "f.c"
    source.write_text("int edgevllm_fine(void) { return 1; }\n")
    proc = subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(folder / "libfine.so"),
                           str(source)], capture_output=True, text=True)
    assert proc.returncode == 0, f"gcc is needed (apt-get install gcc): {proc.stderr}"
    return folder


def test_a_folder_without_cuda_code_fails_the_gate_in_one_line_and_writes_its_verdict(
        work, host_lib, capsys, monkeypatch):
    out = work / "verdict.json"
    code, err = run_cli(capsys, monkeypatch, "verify", "--target", "thor", "--path",
                        str(host_lib), "--json", str(out))
    assert code == 8, err
    assert one_error(err) == (f"error: arch gate failed for thor: no CUDA libraries found under "
                              f"{host_lib}; is this the right path?")
    verdict = json.loads(out.read_text())
    assert verdict["passed"] is False and verdict["target"] == "thor"


@pytest.mark.parametrize(("flags", "said"), [
    (["--out", "o"], "--out: only with --supply-chain"),
    (["--name", "n"], "--name: only with --supply-chain"),
    (["--attached"], "--attached: only with --supply-chain"),
    (["--out", "o", "--name", "n"], "--out, --name: only with --supply-chain"),
], ids=["out", "name", "attached", "two"])
def test_supply_chain_flags_alone_are_one_line(work, host_lib, capsys, monkeypatch, flags,
                                               said):
    code, err = run_cli(capsys, monkeypatch, "verify", "--target", "thor", "--path",
                        str(host_lib), *flags)
    assert code == 2, err
    assert one_error(err) == f"error: {said}"
    assert not (work / "o").exists()


@pytest.mark.parametrize("diff", [["--diff", "a"], ["--diff", "a,b,c"],
                                  ["--diff", "a", "--diff", "b", "--diff", "c"],
                                  ["--diff", ","]], ids=["one", "three", "three-flags", "none"])
def test_a_diff_of_anything_but_two_sources_is_one_line(work, capsys, monkeypatch, diff):
    code, err = run_cli(capsys, monkeypatch, "verify", "--target", "thor", *diff)
    assert code == 2, err
    assert one_error(err) == "error: --diff takes two sources: --diff OLD --diff NEW"


@pytest.mark.parametrize("before", [None, "4G"], ids=["unset", "set"])
def test_a_size_that_is_no_size_is_one_line_and_leaves_the_setting_as_it_was(
        work, host_lib, capsys, monkeypatch, before):
    monkeypatch.setenv(SETTING, "8G")  # recorded, so whatever the run leaves is undone after
    if before is None:
        monkeypatch.delenv(SETTING)
    else:
        monkeypatch.setenv(SETTING, before)
    code, err = run_cli(capsys, monkeypatch, "verify", "--target", "thor", "--path",
                        str(host_lib), "--max-library-size", "lots")
    assert code == 2, err
    assert one_error(err) == ("error: --max-library-size 'lots': expected a size such as 4G, "
                              "512M or 1000000")
    assert os.environ.get(SETTING) == before


def test_a_good_size_is_what_the_scan_reads(work, host_lib, capsys, monkeypatch):
    monkeypatch.setenv(SETTING, "8G")  # recorded, so the run's setting is undone after
    code, err = run_cli(capsys, monkeypatch, "verify", "--target", "thor", "--path",
                        str(host_lib), "--max-library-size", "512M")
    assert code == 8, err  # the gate itself still fails: no CUDA code here
    assert os.environ.get(SETTING) == "512M"
