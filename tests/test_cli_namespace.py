"""The command line's own rules (cli/__init__.py, cli/_common.py), held for every task at once:
every task module of edgevllm/cli is gathered (a task in a module left out of TASK_MODULES would
silently not exist), no flag defaults to a number (Invoke would int() a value before the task's
``flag_int`` reads it, and a word would be Invoke's error, not ours), every task has a one-line
summary that ``--list`` shows, and ``--version`` is the package's."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
from invoke import Task

import edgevllm.cli as cli_package
from edgevllm import __version__
from edgevllm.cli import TASK_MODULES, namespace
from support.inprocess import exit_code


def _task_modules() -> dict[str, list[str]]:
    """Each module of edgevllm/cli and the tasks it defines itself."""
    found: dict[str, list[str]] = {}
    for info in pkgutil.iter_modules(cli_package.__path__):
        module = importlib.import_module(f"edgevllm.cli.{info.name}")
        tasks = [value.name.replace("_", "-") for value in vars(module).values()
                 if isinstance(value, Task) and value.__module__ == module.__name__]
        if tasks:
            found[info.name] = tasks
    return found


def test_every_module_that_defines_a_task_is_gathered():
    modules = _task_modules()
    assert set(modules) == set(TASK_MODULES), (
        "a cli module with tasks is missing from TASK_MODULES (or one listed has none)",
        set(modules) ^ set(TASK_MODULES))
    gathered = set(namespace().task_names)
    assert {name for names in modules.values() for name in names} == gathered


@pytest.mark.parametrize("task", sorted(namespace().task_names))
def test_no_flag_defaults_to_a_number(task):
    body = namespace()[task].body
    numbers = [p.name for p in inspect.signature(body).parameters.values()
               if isinstance(p.default, (int, float)) and not isinstance(p.default, bool)]
    assert numbers == [], (f"{task}: give {numbers} a string or None default and read it "
                           "with flag_int/flag_float (docs/CONTRIBUTING.md)")


@pytest.mark.parametrize("task", sorted(namespace().task_names))
def test_every_task_says_what_it_does_in_its_first_line(task):
    doc = inspect.getdoc(namespace()[task].body) or ""
    first = doc.splitlines()[0] if doc else ""
    assert first.strip() and len(first) <= 100, f"{task}: a one-line summary for --list"


def test_the_list_shows_every_task_with_its_summary(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    capsys.readouterr()
    assert exit_code(["--list"]) == 0
    listed = capsys.readouterr().out
    ns = namespace()
    for task in ns.task_names:
        summary = (inspect.getdoc(ns[task].body) or "").splitlines()[0]
        line = next((text for text in listed.splitlines() if text.split()[:1] == [task]), "")
        assert line, f"{task} is not in --list"
        assert summary[:40] in line, (task, line)


def test_the_version_is_the_packages(capsys):
    capsys.readouterr()
    assert exit_code(["--version"]) == 0
    assert __version__ in capsys.readouterr().out
