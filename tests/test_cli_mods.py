"""``inv mods``, ``inv targets`` and ``inv mods-apply``'s refusals (cli/mods.py, cli/build.py) as a
user runs them, in this process through the CLI's own entry: the lists hold what mods/ and
targets/ hold (and the user's own mods folder), and a mods-apply that cannot be what the user
meant is one ``error:`` line, exit 2, before anything is installed or written (a
``--site-packages`` that is not there got a new environment installed into it)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from edgevllm.common.errors import ConfigError
from support.inprocess import exit_code, one_error, own_user_folders, run_cli

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def own_config(tmp_path, monkeypatch):
    own_user_folders(tmp_path, monkeypatch)


def as_json(capsys, *argv: str) -> list[dict]:
    capsys.readouterr()
    assert exit_code(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def shipped_mods() -> dict[str, list[str]]:
    return {p.parent.name: yaml.safe_load(p.read_text())["targets"]
            for p in (REPO / "mods").glob("*/manifest.yaml")}


def test_the_mod_list_is_what_mods_holds(capsys):
    listed = {m["name"]: m for m in as_json(capsys, "mods", "--json")}
    assert {name: m["targets"] for name, m in listed.items()} == shipped_mods()
    assert all(m["description"] and m["steps"] for m in listed.values()), listed


@pytest.mark.parametrize("target", ["spark", "thor"])
def test_a_target_lists_only_its_mods(capsys, target):
    names = {m["name"] for m in as_json(capsys, "mods", "--json", "--target", target)}
    assert names == {name for name, targets in shipped_mods().items() if target in targets}
    capsys.readouterr()
    assert exit_code(["mods", "--target", target]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:2] == ["NAME", "TARGETS"] and len(table) == len(names) + 1


def test_a_mod_in_the_users_folder_is_listed(tmp_path, capsys):
    folder = tmp_path / "config" / "edgevllm" / "mods" / "my-mod"
    shutil.copytree(REPO / "mods" / "earlyoom", folder)
    manifest = yaml.safe_load((folder / "manifest.yaml").read_text())
    manifest["name"] = "my-mod"
    (folder / "manifest.yaml").write_text(yaml.safe_dump(manifest))
    names = {m["name"] for m in as_json(capsys, "mods", "--json")}
    assert names == set(shipped_mods()) | {"my-mod"}


def test_the_target_list_is_what_targets_holds(capsys):
    listed = {t["name"]: t for t in as_json(capsys, "targets", "--as-json")}
    shipped = {p.stem: yaml.safe_load(p.read_text()) for p in (REPO / "targets").glob("*.yaml")}
    assert set(listed) == set(shipped)
    for name, target in listed.items():
        assert target["cuda_arch"] == str(shipped[name]["cuda_arch"]), name
        assert target["platform"] == shipped[name]["platform"], name


@pytest.mark.parametrize(("argv", "said"), [
    (["mods", "--target", "nope"], "unknown target 'nope' (known: spark, thor)"),
    (["mods-apply", "--target", "spark", "--site-packages", "nowhere"],
     "--site-packages nowhere: no such folder"),
    (["mods-apply", "--target", "spark", "--site-packages", "afile"],
     "--site-packages afile: no such folder"),
    (["mods-apply", "--target", "spark"], "give --site-packages DIR or --python PATH"),
    (["mods-apply", "--target", "spark", "--mod", "nosuch", "--site-packages", "site"],
     "unknown mod 'nosuch'"),
    (["mods-apply", "--target", "thor", "--mod", "flashinfer-sm121", "--site-packages", "site"],
     "mod flashinfer-sm121 does not support target 'thor'"),
    (["mods-apply", "--mod", "earlyoom", "--site-packages", "site"], "--target required"),
], ids=["mods-unknown-target", "missing-site", "site-is-a-file", "no-environment",
        "unknown-mod", "mod-of-another-target", "no-target"])
def test_a_mods_task_that_cannot_do_what_was_meant_is_one_line_and_writes_nothing(
        tmp_path, capsys, monkeypatch, argv, said):
    (tmp_path / "site").mkdir()
    (tmp_path / "afile").write_text("not a folder\n")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    code, err = run_cli(capsys, monkeypatch, *argv)
    line = one_error(err)
    assert code == ConfigError.exit_code and said in line, (code, line)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
