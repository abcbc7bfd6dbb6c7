"""The command line: ``inv <task>`` (via tasks.py) and the ``edgevllm`` console script.

Each concern has its own task module in this package; ``namespace()`` gathers every task into one
flat collection so that ``inv build`` and ``edgevllm build`` are the same thing.
"""

from __future__ import annotations

import importlib

from invoke import Collection, Program, Task

from edgevllm import __version__

# One task module per concern.
TASK_MODULES = ("build", "plan", "sources", "mods", "verify", "probe", "publish", "recipes",
                "distribute", "bench")


def namespace() -> Collection:
    ns = Collection()
    for name in TASK_MODULES:
        module = importlib.import_module(f"{__name__}.{name}")
        for value in vars(module).values():
            if isinstance(value, Task) and value.__module__ == module.__name__:
                ns.add_task(value)
    return ns


def program() -> Program:
    return Program(namespace=namespace(), version=__version__, name="edgevllm",
                   binary="edgevllm")


def help_for_task(name: str) -> None:
    """Print one task's help and exit 0 (what ``--help TASK`` prints)."""
    program().run(["edgevllm", "--help", name])
    raise SystemExit(0)


def main() -> None:
    program().run()
