"""The command line: ``inv <task>`` (via tasks.py) and the ``edgevllm`` console script.

Each concern has its own task module in this package; ``namespace()`` gathers every task into one
flat collection so that ``inv build`` and ``edgevllm build`` are the same thing.
"""

from __future__ import annotations

import contextlib
import importlib
import re
import sys
from typing import Iterator

from invoke import Collection, Exit, ParseError, Program, Task

from edgevllm import __version__
from edgevllm.common.console import reader_left

# One task module per concern.
TASK_MODULES = ("build", "plan", "sources", "mods", "verify", "probe", "publish", "recipes",
                "distribute", "bench", "inspect", "warm", "track",
                "offline", "distpool")


def namespace() -> Collection:
    ns = Collection()
    for name in TASK_MODULES:
        module = importlib.import_module(f"{__name__}.{name}")
        for value in vars(module).values():
            if isinstance(value, Task) and value.__module__ == module.__name__:
                ns.add_task(value)
    return ns


@contextlib.contextmanager
def parse_errors_as_lines(binary: str) -> Iterator[None]:
    """Invoke's own parse errors (unknown task or flag, missing positional, a number flag given
    words) as one ``error:`` line and exit 2, like every other bad input."""
    try:
        yield
    except ParseError as exc:
        context = getattr(exc, "context", None)
        task = getattr(context, "name", None) or ""
        text = _flag_taken_as_positional(context) or _plain(str(exc).rstrip("!"))
        where = f"'{binary} --help {task}'" if task else f"'{binary} --list'"
        raise Exit(f"error: {text}; see {where}", code=2) from None
    except ValueError as exc:  # Invoke's int() of a flag whose default is a number
        raise Exit(f"error: a number flag was given something else ({exc}); "
                   f"see '{binary} --help TASK'", code=2) from None


def _flag_taken_as_positional(context) -> str | None:
    """Invoke gives an unknown ``--flag`` to the next positional argument and then reports the
    positional after it as missing: name the flag, which is the real mistake."""
    for argument in getattr(context, "positional_args", None) or []:
        value = argument.value
        if isinstance(value, str) and value.startswith("-") and value != "-":
            return f"unknown task or flag '{value}'"
    return None


def _plain(text: str) -> str:
    """Invoke's wording, said as the rest of edgevllm says it."""
    for pattern, plain in (
        (r"No idea what '(.*)' is", "unknown task or flag '{0}'"),
        (r"'(.*)' did not receive required positional arguments: (.*)", "{0}: {1} required"),
        (r"Flag <Argument: (?:([^ ,>]+)[^>]*)> needed value and was not given one",
         "--{0} needs a value"),
    ):
        found = re.fullmatch(pattern, text, re.S)
        if found:
            groups = [g.replace("_", "-") for g in found.groups()]
            return plain.format(*groups)
    return text


class EdgeProgram(Program):
    """Invoke's Program with one-line parse errors (exit 2)."""

    def run(self, argv=None, exit: bool = True) -> None:
        """``TASK --help`` as ``--help TASK``: Invoke would feed ``--help`` to a task's first
        positional argument and then stop on the second (``inv diff OLD NEW``) as missing."""
        args = list(argv) if argv is not None else list(sys.argv)
        if len(args) == 3 and args[2] in ("--help", "-h"):
            args = [args[0], "--help", args[1]]
        super().run(args, exit)

    def parse_core(self, argv) -> None:
        with parse_errors_as_lines(self.binary or "edgevllm"):
            super().parse_core(argv)

    def parse_tasks(self) -> None:
        with parse_errors_as_lines(self.binary or "edgevllm"):
            super().parse_tasks()

    def parse_cleanup(self) -> None:
        with parse_errors_as_lines(self.binary or "edgevllm"):
            super().parse_cleanup()


def adopt_inv_parse_errors() -> None:
    """For ``inv`` (tasks.py): Invoke's own Program parses the task flags after it has loaded
    tasks.py, so its later parse steps get the same one-line errors. Only tasks.py calls this."""
    if getattr(Program, "_edgevllm_one_line", False):
        return
    for step in ("parse_tasks", "parse_cleanup"):
        original = getattr(Program, step)

        def wrapped(self, _original=original) -> None:
            with parse_errors_as_lines("inv"):
                _original(self)

        setattr(Program, step, wrapped)
    Program._edgevllm_one_line = True  # type: ignore[attr-defined]
    sys.excepthook = _quiet_on_a_closed_pipe(sys.excepthook)


def _quiet_on_a_closed_pipe(hook):
    """Invoke's own help and task list (``inv --help build | head``) are printed outside any
    task; a reader that left ends them without a traceback (exit 1, as under ``edgevllm``)."""
    def excepthook(kind, value, traceback) -> None:
        if issubclass(kind, BrokenPipeError):
            reader_left()
            return
        hook(kind, value, traceback)
    return excepthook


def program() -> Program:
    return EdgeProgram(namespace=namespace(), version=__version__, name="edgevllm",
                       binary="edgevllm")


def help_for_task(name: str) -> None:
    """Print one task's help and exit 0 (what ``--help TASK`` prints)."""
    program().run(["edgevllm", "--help", name])
    raise SystemExit(0)


def main() -> None:
    try:
        program().run()
    except BrokenPipeError:  # ``edgevllm --list | head``: the reader left; say nothing more
        reader_left()
        raise SystemExit(1) from None
