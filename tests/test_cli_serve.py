"""``inv serve`` / ``inv stop`` as a user runs them (cli/recipes.py), in this process through the
CLI's entry, with ``--dry-run`` or refused before any engine: the printed ``docker run`` carries
the container name, the port a ``--set`` chose and the server's command; a cluster recipe
without nodes, caches for a cluster and a cluster stop without its name are each one line (exit
11). The launch itself is tests/test_serve_launch.py and tests/test_serve_run.py."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from support.inprocess import exit_code, one_error, own_user_folders, run_cli

SOLO = "qwen3-8b-nvfp4"
CLUSTER = "nemotron-3-super-nvfp4-2x-spark"
NODES = "ssh://nobody@127.0.0.1:1,ssh://nobody@127.0.0.1:2"  # never reached: refused first


@pytest.fixture
def work(tmp_path, monkeypatch) -> Path:
    own_user_folders(tmp_path, monkeypatch)
    monkeypatch.setenv("EDGEVLLM_CACHE", str(tmp_path / "cache"))
    return tmp_path


def _dry_run(capsys, monkeypatch, *argv: str) -> list[str]:
    monkeypatch.setenv("NO_COLOR", "1")
    capsys.readouterr()
    code = exit_code(["serve", *argv, "--dry-run"])
    got = capsys.readouterr()
    assert code == 0, got.err
    (line,) = [text for text in got.out.splitlines() if text.startswith("docker run ")]
    return shlex.split(line)


def _after(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_the_dry_run_names_the_container_and_publishes_the_port_a_set_chose(work, capsys,
                                                                          monkeypatch):
    argv = _dry_run(capsys, monkeypatch, SOLO, "--target", "spark", "--name", "mine", "--set",
                    "port=9001")
    assert _after(argv, "--name") == "mine"
    assert _after(argv, "-p") == "9001:9001"
    assert "--port=9001" in argv[argv.index("serve"):]
    assert "io.edgevllm.recipe=" + SOLO in argv


def test_the_default_dry_run_uses_the_recipe_name_and_its_own_port(work, capsys, monkeypatch):
    argv = _dry_run(capsys, monkeypatch, SOLO, "--target", "spark")
    assert _after(argv, "--name") == f"edgevllm-{SOLO}"
    assert _after(argv, "-p") == "8000:8000"
    assert "-e" in argv and "HF_TOKEN" in argv  # the token goes by name, its value never here


def test_no_recipe_prints_the_help_and_one_line(work, capsys, monkeypatch):
    code, err = run_cli(capsys, monkeypatch, "serve")
    assert code != 0, err
    assert "'recipe' required" in one_error(err)


def test_a_cluster_recipe_without_nodes_says_how_many_and_how_to_give_them(work, capsys,
                                                                          monkeypatch):
    code, err = run_cli(capsys, monkeypatch, "serve", CLUSTER, "--dry-run")
    assert code == 11, err
    assert one_error(err) == (f"error: recipe {CLUSTER} is a 2-node ray cluster: pass --nodes "
                              "ENGINE,ENGINE,... (head first)")


def test_caches_for_a_cluster_are_refused_before_any_node(work, capsys, monkeypatch):
    bundle = work / "b.jitcache.tar"
    bundle.write_bytes(b"not read")
    code, err = run_cli(capsys, monkeypatch, "serve", CLUSTER, "--nodes", NODES, "--caches",
                        str(bundle), "--dry-run")
    assert code == 11, err
    assert one_error(err) == ("error: --caches fills one container: warm and serve each node "
                              "on its own")


def test_a_cluster_stop_needs_the_clusters_name(work, capsys, monkeypatch):
    code, err = run_cli(capsys, monkeypatch, "stop", "--nodes", NODES)
    assert code == 11, err
    assert one_error(err) == "error: say which cluster: --cluster NAME or --recipe NAME"


def test_an_unknown_recipe_is_one_line_naming_it(work, capsys, monkeypatch):
    code, err = run_cli(capsys, monkeypatch, "serve", "no-such-recipe", "--dry-run")
    assert code == 11, err
    assert "no-such-recipe" in one_error(err)
