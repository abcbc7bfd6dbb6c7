"""A tree's CMake is code from others: the kernel plan evaluates it with real cmake, and no hostile
CMakeLists.txt runs a program, writes a file or reads the host into the plan's output."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgevllm.common.errors import PlanError
from edgevllm.sources.cmakeguard import ALLOWED, cmake_builtins, scan_calls
from edgevllm.sources.plan import evaluate_plan
from support.gitfixtures import run_cli

SECRET = "hf_cmakeguardsecretvalue0123456789"
BENIGN = 'cmake_minimum_required(VERSION 3.26)\nset(CUDA_ARCHS "12.1a")\n'


@pytest.fixture(scope="module", autouse=True)
def real_cmake():
    if shutil.which("cmake") is None:
        pytest.fail("cmake is missing: install cmake >= 3.25 (apt-get install cmake, or "
                    "pip install cmake into the venv)")


def make_tree(root: Path, cmakelists: str, extra: dict[str, str] | None = None) -> Path:
    tree = root / "tree"
    (tree / "cmake").mkdir(parents=True)
    (tree / "CMakeLists.txt").write_text(cmakelists)
    for rel, text in (extra or {}).items():
        (tree / rel).write_text(text)
    return tree


def evaluate(tree: Path):
    return evaluate_plan(tree, "12.1a", cuda_version="13.0", device_arch="12.1a")


def owned(root: Path) -> list[Path]:
    return [p for p in root.rglob("owned")] + list(Path.cwd().glob("owned"))


HOSTILE = {
    "underscore original": "_execute_process(COMMAND touch {owned})",
    "upper case, space": "_EXECUTE_PROCESS (COMMAND touch {owned})",
    "cmake_language CALL": "cmake_language(CALL _execute_process COMMAND touch {owned})",
    "cmake_language EVAL": 'cmake_language(EVAL CODE "_execute_process(COMMAND touch {owned})")',
    "file original": "_file(WRITE {owned} x)",
    "exec_program": "exec_program(touch ARGS {owned})",
    "write_file": "write_file({owned} x)",
    "make_directory": "make_directory({owned})",
    "variable_watch": "variable_watch(X _execute_process)\nset(X 1)",
    "site_name": "set(HOSTNAME touch)\nsite_name(X)",
    "ExternalProject": "include(ExternalProject)\n"
                       "ExternalProject_Add(x DOWNLOAD_COMMAND touch {owned})",
    "redefine file": "function(file)\n_execute_process(COMMAND touch {owned})\nendfunction()",
    "redefine a prelude helper": "function(_ev_rec)\nendfunction()",
    "after a bracket comment": "#[[ harmless ]] _execute_process(COMMAND touch {owned})",
    "load_command": "load_command(X {owned})",
    # CMake reads "a[[" as text, so ")" closes set() and the next line is a call.
    "bracket inside an argument": "set(X a[[ )\n_execute_process(COMMAND touch {owned})\n#]])",
    "comment inside an argument": "set(X a#b )\n)\n_execute_process(COMMAND touch {owned})",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_cmakelists_is_refused_before_anything_runs(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "owned"
    tree = make_tree(tmp_path, BENIGN + HOSTILE[name].format(owned=target) + "\n")
    with pytest.raises(PlanError) as info:
        evaluate(tree)
    assert "\n" not in str(info.value)
    assert not owned(tmp_path)


def test_an_included_file_is_checked_too(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tree = make_tree(tmp_path, BENIGN + "include(cmake/utils.cmake)\n",
                     {"cmake/utils.cmake": f"_execute_process(COMMAND touch {tmp_path}/owned)\n"})
    with pytest.raises(PlanError, match=r"cmake/utils.cmake:1: '_execute_process' is not allowed"):
        evaluate(tree)
    assert not owned(tmp_path)


def test_include_of_a_host_file_is_refused_at_run_time(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    outside = tmp_path / "outside.cmake"
    outside.write_text(f"_execute_process(COMMAND touch {tmp_path}/owned)\n")
    tree = make_tree(tmp_path, BENIGN + f'set(P "{outside}")\ninclude(${{P}})\n')
    with pytest.raises(PlanError, match="refused while evaluating the kernel plan"):
        evaluate(tree)
    assert not owned(tmp_path)


def test_a_cmake_module_that_runs_a_program_is_refused_at_run_time(tmp_path, monkeypatch):
    # CTest's module calls site_name, which runs the program named by HOSTNAME.
    monkeypatch.chdir(tmp_path)
    tree = make_tree(tmp_path, BENIGN + f'set(HOSTNAME "{tmp_path}/owned.sh")\ninclude(CTest)\n')
    (tmp_path / "owned.sh").write_text(f"#!/bin/sh\ntouch {tmp_path}/owned\n")
    (tmp_path / "owned.sh").chmod(0o755)
    with pytest.raises(PlanError) as info:
        evaluate(tree)
    assert "\n" not in str(info.value)
    assert not owned(tmp_path)


def test_a_link_in_the_cmake_folder_is_refused(tmp_path):
    tree = make_tree(tmp_path, BENIGN)
    os.symlink("/etc/hostname", tree / "cmake" / "host.cmake")
    with pytest.raises(PlanError, match="symbolic link"):
        evaluate(tree)
    (tree / "cmake" / "host.cmake").unlink()
    (tree / "cmake").rmdir()
    os.symlink("/usr/share", tree / "cmake")
    with pytest.raises(PlanError, match="symbolic link"):
        evaluate(tree)


def test_neither_host_files_nor_the_environment_reach_the_output(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", SECRET)
    monkeypatch.setenv("VLLM_SNEAKY", SECRET)  # a build variable with a token's shape
    private = tmp_path / "private.txt"
    private.write_text(SECRET)
    tree = make_tree(tmp_path, BENIGN + f'file(READ "{private}" X)\n'
                     'message(FATAL_ERROR "leak:${X}:$ENV{HF_TOKEN}:$ENV{VLLM_SNEAKY}")\n')
    try:
        plan = evaluate(tree)
    except PlanError as exc:
        assert SECRET not in str(exc)
    else:
        assert SECRET not in str(plan.to_dict())
        assert any("leak:::" in str(e) for e in plan.errors) or plan.errors == []


def test_file_download_and_try_run_do_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tree = make_tree(tmp_path, BENIGN + f"file(DOWNLOAD http://127.0.0.1:9/x {tmp_path}/owned)\n"
                     f"file(WRITE {tmp_path}/owned x)\n"
                     f"try_run(R C {tmp_path} {tmp_path}/x.c)\n")
    try:
        evaluate(tree)
    except PlanError as exc:
        assert "\n" not in str(exc)
    assert not owned(tmp_path)


def test_inv_plan_on_a_hostile_tree_is_one_error_line(tmp_path):
    tree = make_tree(tmp_path, BENIGN + f"_execute_process(COMMAND touch {tmp_path}/owned)\n")
    proc = run_cli("plan", "--target", "thor", "--tree", str(tree))
    code, err = proc.returncode, proc.stderr
    assert code == 5, err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert "'_execute_process' is not allowed" in err
    assert not owned(tmp_path)


def test_the_scanner_sees_every_call_and_no_argument_as_a_call():
    text = ('set(A "_execute_process(x)")  # _file(WRITE x)\n#[=[ exec_program(x) ]=]\n'
            'if(A)\n  message([[ cmake_language(x) ]])\nendif()\nFoo (a (b) c)\n')
    assert [c.name for c in scan_calls(text)] == ["set", "if", "message", "endif", "foo"]


def test_the_allow_list_holds_no_command_that_runs_or_writes():
    known = cmake_builtins(shutil.which("cmake") or "cmake")
    dangerous = {"execute_process", "file", "exec_program", "cmake_language", "variable_watch",
                 "site_name", "load_command", "write_file", "make_directory", "try_run",
                 "try_compile", "install", "export", "configure_file"}
    assert dangerous <= known
    # Those in ALLOWED are the prelude's recorders/no-ops, never the builtins themselves.
    assert {"cmake_language", "variable_watch", "exec_program", "site_name", "load_command",
            "write_file", "make_directory"}.isdisjoint(ALLOWED)


# -- the scanner against CMake itself ------------------------------------------------------------
# Pieces that change how CMake splits a file into commands: quotes, escapes, brackets, comments,
# parentheses, newlines. A call the scanner misses would be a call the allow-list never checked.
PIECES = ["set(X ", "a", " ", "\n", "#", "[[", "]]", "[=[", "]=]", '"', "\\", "(", ")",
          "\nhit()\n"]
PREFIX = "function(hit)\n  message(STATUS EDGEVLLM-HIT)\nendfunction()\n"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(PIECES), min_size=1, max_size=10))
def test_every_call_cmake_runs_is_one_the_scanner_saw(tmp_path_factory, pieces):
    text = "".join(pieces)
    try:
        seen = {call.name for call in scan_calls(text)}
    except ValueError:
        return  # the plan refuses a file it cannot read: nothing of it runs
    script = tmp_path_factory.mktemp("lex") / "t.cmake"
    script.write_text(PREFIX + text + "\n")
    proc = subprocess.run([shutil.which("cmake") or "cmake", "-P", str(script)],
                          capture_output=True, text=True, timeout=30)
    if "EDGEVLLM-HIT" in proc.stdout + proc.stderr:
        assert "hit" in seen, f"cmake ran hit() in {text!r}; the scanner saw {sorted(seen)}"


def test_cmake_system_information_leaves_the_working_folder_alone(tmp_path, monkeypatch):
    """``cmake --system-information`` writes __cmake_systeminformation/ where it runs: asked from
    the checkout's root, it left that folder there (and it was committed once)."""
    from edgevllm.sources.cmakeguard import cmake_root
    monkeypatch.chdir(tmp_path)
    assert (cmake_root(shutil.which("cmake") or "cmake") / "Modules").is_dir()
    assert list(tmp_path.iterdir()) == []


def test_a_cmake_file_past_the_bound_is_refused_before_it_is_read(tmp_path):
    from edgevllm.sources.cmakeguard import CMAKE_FILE_MAX_BYTES, tree_cmake_files

    (tmp_path / "CMakeLists.txt").write_text("project(x)\n")
    (tmp_path / "cmake").mkdir()
    (tmp_path / "cmake" / "big.cmake").write_text("#" * (CMAKE_FILE_MAX_BYTES + 1))
    with pytest.raises(PlanError, match=r"big.cmake: \d+ bytes, more than such a file may hold"):
        tree_cmake_files(tmp_path)
    (tmp_path / "cmake" / "big.cmake").write_text("set(A 1)\n")
    assert sorted(tree_cmake_files(tmp_path)) == ["CMakeLists.txt", "cmake/big.cmake"]
