"""``inv sources`` as a user runs it (cli/sources.py), in this process through the CLI's entry,
before anything is fetched: ``--dry-run`` prints one line per step of what would be prepared
(the base, each pick in order, the doc-conflict allowance; FlashInfer only when one of its
flags is given), a ``--lock`` prints its sources pinned to their commits and takes no source
flag, and a real ``--out`` that holds someone else's files is refused before any fetch. Nothing
here reaches the network: a fetch would need a repository the test never names."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgevllm.specs.lock import write_lock
from support.inprocess import exit_code, one_error, own_user_folders, run_cli
from support.inside_locks import lock_data, make_lock, sha


@pytest.fixture
def work(tmp_path, monkeypatch) -> Path:
    own_user_folders(tmp_path, monkeypatch)
    monkeypatch.setenv("EDGEVLLM_CACHE", str(tmp_path / "cache"))
    return tmp_path


def _plan(capsys, *argv: str) -> list[str]:
    capsys.readouterr()
    code = exit_code(["sources", *argv, "--dry-run"])
    got = capsys.readouterr()
    assert code == 0, got.err
    return got.out.splitlines()


def test_the_plan_names_the_base_each_pick_in_order_and_flashinfer_when_asked(work, capsys):
    assert _plan(capsys, "--vllm-pr", "123", "--cherry-pick", "5,6", "--cherry-pick", "7",
                 "--flashinfer-ref", "v0.6.1", "--flashinfer-cherry-pick", "9") == [
        "vllm: vllm-project/vllm at head of PR #123",
        "vllm: pick 1: PR #5", "vllm: pick 2: PR #6", "vllm: pick 3: PR #7",
        "flashinfer: flashinfer-ai/flashinfer at ref v0.6.1", "flashinfer: pick 1: PR #9"]


def test_no_flag_plans_the_builds_default_release_and_no_flashinfer(work, capsys):
    from edgevllm.specs.buildspec import DEFAULT_VLLM_REF

    assert _plan(capsys) == [f"vllm: vllm-project/vllm at ref {DEFAULT_VLLM_REF}"]
    assert _plan(capsys, "--target", "thor") == [
        f"vllm: vllm-project/vllm at ref {DEFAULT_VLLM_REF}"]


def test_a_fork_builds_its_default_branch_and_the_allowance_is_said(work, capsys):
    assert _plan(capsys, "--vllm-repo", "someone/vllm", "--allow-doc-conflicts") == [
        "vllm: someone/vllm at the default branch",
        "vllm: conflicts only in docs/tests keep the base's side"]
    assert _plan(capsys, "--vllm-pr", "https://github.com/someone/vllm/pull/8") == [
        "vllm: someone/vllm at head of PR #8"]


def test_a_lock_plans_its_sources_at_their_recorded_commits(work, capsys):
    lock = write_lock(make_lock(), work / "spark.lock.json")
    lines = _plan(capsys, "--lock", str(lock), "--target", "spark")
    assert lines[0] == f"vllm: vllm-project/vllm at commit {sha('base-sha')} (from the lock)"
    assert lines[1].startswith("vllm: pick 1: ") and "40082" in lines[1]
    assert len(lines) == 2


def test_a_lock_without_a_source_is_one_line(work, capsys, monkeypatch):
    data = lock_data()
    del data["vllm"]
    lock = write_lock(make_lock().model_validate(data), work / "nosrc.lock.json")
    code, err = run_cli(capsys, monkeypatch, "sources", "--lock", str(lock), "--dry-run")
    assert code != 0, err
    assert "the lock records no source; regenerate it with inv sources" in one_error(err)


@pytest.mark.parametrize("flag", [["--vllm-ref", "v0.33.0"], ["--cherry-pick", "5"],
                                  ["--flashinfer-pr", "3"], ["--vllm-repo", "a/b"]])
def test_a_lock_takes_no_source_flag(work, capsys, monkeypatch, flag):
    lock = write_lock(make_lock(), work / "spark.lock.json")
    code, err = run_cli(capsys, monkeypatch, "sources", "--lock", str(lock), *flag,
                        "--dry-run")
    assert code == 2, err
    assert one_error(err) == ("error: --lock rebuilds exactly what the lock records; drop the "
                              "--vllm-*/--flashinfer-*/--cherry-pick flags")


def test_without_out_or_dry_run_it_says_what_to_give(work, capsys, monkeypatch):
    code, err = run_cli(capsys, monkeypatch, "sources", "--vllm-ref", "v0.33.0")
    assert code == 2, err
    assert one_error(err) == ("error: sources: give --out DIR for the prepared trees and the "
                              "lock (or --dry-run)")


def test_an_out_folder_of_someone_elses_files_is_refused_before_any_fetch(work, capsys,
                                                                         monkeypatch):
    out = work / "theirs"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    code, err = run_cli(capsys, monkeypatch, "sources", "--vllm-repo",
                        "https://127.0.0.1:1/nobody/vllm.git", "--out", str(out))
    assert code == 2, err
    assert "the folder holds files edgevllm did not write ('notes.txt')" in one_error(err)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    assert not (work / "cache").exists()  # no mirror was begun


def test_an_unknown_target_is_refused_naming_the_known_ones(work, capsys, monkeypatch):
    code, err = run_cli(capsys, monkeypatch, "sources", "--target", "orin", "--dry-run")
    assert code == 2, err
    line = one_error(err)
    assert "orin" in line and "spark" in line and "thor" in line


def test_a_lock_with_flashinfer_from_source_plans_both_vllm_first(work, capsys):
    data = lock_data()
    data["flashinfer"] = {"name": "flashinfer", "repo": "https://github.com/me/flashinfer",
                          "ref": "v0.6.1", "base_sha": sha("fi-base"), "commit": sha("fi"),
                          "tree": sha("fi-tree"), "version": "0.6.1", "picks": []}
    lock = write_lock(make_lock().model_validate(data), work / "both.lock.json")
    lines = _plan(capsys, "--lock", str(lock))
    assert lines[0].startswith(f"vllm: vllm-project/vllm at commit {sha('base-sha')}")
    assert lines[-1] == f"flashinfer: me/flashinfer at commit {sha('fi-base')} (from the lock)"
    assert [line.split(":")[0] for line in lines] == ["vllm", "vllm", "flashinfer"]


def test_a_dry_run_with_an_out_folder_writes_nothing_there(work, capsys):
    out = work / "trees"
    assert _plan(capsys, "--vllm-ref", "v0.33.0", "--out", str(out)) == [
        "vllm: vllm-project/vllm at ref v0.33.0"]
    assert not out.exists() and not (work / "cache").exists()
