"""What every CLI task shares: one-line errors with their exit codes, no tracebacks."""

from __future__ import annotations

import errno
import functools
import inspect
import os
from typing import Callable

from invoke import Exit, task

from edgevllm.common import console
from edgevllm.common.errors import ConfigError, EdgeVllmError, MissingInputError
from edgevllm.common.escape import one_line


def cli_task(*task_args, **task_kwargs) -> Callable:
    """``@invoke.task`` that turns an ``EdgeVllmError`` into ``error: <line>`` and its exit code.

    Use exactly like ``@task(help=..., iterable=[...])``. Task modules only parse arguments and
    call the package; the work lives in the package.
    """

    def decorate(fn: Callable) -> Callable:
        positional = list(task_kwargs.get("positional") or [])
        signature, required = _flags_not_positionals(fn, positional)
        name = task_kwargs.get("name") or fn.__name__  # what the user typed: ``copy``

        @functools.wraps(fn)
        def wrapper(c, *args, **kwargs):
            try:
                bound = signature.bind(c, *args, **kwargs)
                values = [bound.arguments.get(n) for n in positional]
                _help_if_asked(name, values)
                _no_flag_as_positional(name, values)
                _check_required(name, required, bound)
                _no_nul(name, positional, bound)
                return fn(c, *args, **kwargs)
            except EdgeVllmError as exc:
                console.error(one_line(str(exc).strip()))  # a value's newline stays on its line
                raise Exit(code=exc.exit_code) from None
            except KeyboardInterrupt:
                console.error("interrupted; nothing was left under a final name")
                raise Exit(code=130) from None
            except BrokenPipeError:  # ``inv mods | head``: the reader left; say nothing more
                console.reader_left()
                raise Exit(code=1) from None
            except OSError as exc:  # a path the user gave that the system refuses
                line = path_refused(exc)
                if line is None:
                    raise
                console.error(line)
                raise Exit(code=MissingInputError.exit_code) from None

        wrapper.__signature__ = signature  # type: ignore[attr-defined]
        task_kwargs["positional"] = positional
        return task(*task_args, **task_kwargs)(wrapper)

    if len(task_args) == 1 and callable(task_args[0]) and not task_kwargs:
        fn, task_args = task_args[0], ()
        return decorate(fn)
    return decorate


def flag_task(flags, *extra: inspect.Parameter, help_extra: dict[str, str],
              iterable_extra: tuple[str, ...] = ()) -> Callable:
    """A ``cli_task`` whose options are ``flags`` from the flag table (plus ``extra``
    parameters, the repeatable ones named in ``iterable_extra``): the task body receives them
    as ``**values``."""
    from edgevllm.cli.flags import help_for, iterable_for, signature

    def decorate(fn: Callable) -> Callable:
        fn.__signature__ = signature(flags, *extra)  # type: ignore[attr-defined]
        return cli_task(
            help={**help_for(flags), **help_extra},
            iterable=iterable_for(flags) + list(iterable_extra),
            auto_shortflags=False,
        )(fn)

    return decorate


def _flags_not_positionals(fn: Callable, positional: list[str]
                           ) -> tuple[inspect.Signature, list[str]]:
    """The task's signature where each required argument not named ``positional`` is a flag
    with a None default, and those arguments' names.

    Invoke reads ``--help`` after a task only once the task's positional arguments are filled,
    so ``inv probe --help`` used to fail asking for the image; required flags are checked by the
    task wrapper instead, with one line naming them.
    """
    signature = inspect.signature(fn)
    params = list(signature.parameters.values())
    required = [p.name for p in params[1:] if p.default is inspect.Parameter.empty
                and p.kind is p.POSITIONAL_OR_KEYWORD and p.name not in positional]
    params = params[:1] + [p.replace(default=None) if p.name in required else p
                           for p in params[1:]]
    return signature.replace(parameters=params), required


def _check_required(task_name: str, required: list[str], bound: inspect.BoundArguments) -> None:
    missing = [name for name in required if bound.arguments.get(name) is None]
    if missing:
        flags = ", ".join("--" + name.replace("_", "-") for name in missing)
        raise ConfigError(f"{task_name.replace('_', '-')}: {flags} required; "
                          f"see 'inv --help {task_name.replace('_', '-')}'")


def _no_flag_as_positional(task_name: str, positional_values: list) -> None:
    """Invoke hands an unknown ``--flag`` to a positional argument (``inv load --bogus`` reads
    '--bogus' as the path): refuse it as the unknown flag it is."""
    for value in positional_values:
        if isinstance(value, str) and value.startswith("-") and value != "-":
            task = task_name.replace("_", "-")
            raise ConfigError(f"unknown task or flag '{value}'; see 'inv --help {task}'")


def _help_if_asked(task_name: str, positional_values: list) -> None:
    """``inv load --help``: Invoke hands ``--help`` to the positional argument; show the help."""
    if any(value in ("--help", "-h") for value in positional_values):
        from edgevllm.cli import help_for_task

        help_for_task(task_name.replace("_", "-"))


def _no_nul(task_name: str, positional: list[str], bound: inspect.BoundArguments) -> None:
    """A NUL byte can be no part of a path, a name or a command's argument: refused by its flag
    before any of them is built (a real shell cannot pass one; a caller in Python can)."""
    for name, value in bound.arguments.items():
        items = value if isinstance(value, (list, tuple)) else [value]
        if any(isinstance(item, str) and "\x00" in item for item in items):
            flag = name if name in positional else "--" + name.rstrip("_").replace("_", "-")
            raise ConfigError(f"{task_name.replace('_', '-')} {flag}: holds a NUL byte; give "
                              "text without one")


# What the system says of a path the user gave (too long, a file where a folder must be, a
# loop of links, a device, no permission): one line naming the path, not a traceback.
_PATH_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.ENOTDIR, errno.ELOOP, errno.EISDIR,
                          errno.ENOENT, errno.EACCES, errno.EPERM, errno.ENXIO, errno.ENODEV,
                          errno.EROFS, errno.EEXIST, errno.ENOTEMPTY})


def path_refused(exc: OSError) -> str | None:
    """``exc`` as one line when it is the system refusing a named path, else None."""
    if exc.errno not in _PATH_ERRNOS or exc.filename is None:
        return None
    name = one_line(os.fsdecode(exc.filename))
    if len(name) > 120:
        name = f"{name[:60]}... ({len(name)} characters)"
    reason = exc.strerror or os.strerror(exc.errno or 0)
    return f"{name}: {reason.lower()}; give another path"
