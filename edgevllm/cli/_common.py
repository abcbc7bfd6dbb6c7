"""What every CLI task shares: one-line errors with their exit codes, no tracebacks."""

from __future__ import annotations

import functools
from typing import Callable

from invoke import Exit, task

from edgevllm.kernel import console
from edgevllm.kernel.errors import EdgeVllmError


def cli_task(*task_args, **task_kwargs) -> Callable:
    """``@invoke.task`` that turns an ``EdgeVllmError`` into ``error: <line>`` and its exit code.

    Use exactly like ``@task(help=..., iterable=[...])``. Task modules only parse arguments and
    call the package; the work lives in the package.
    """

    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(c, *args, **kwargs):
            try:
                return fn(c, *args, **kwargs)
            except EdgeVllmError as exc:
                console.error(str(exc))
                raise Exit(code=exc.exit_code) from None
            except KeyboardInterrupt:
                console.error("interrupted; nothing was left under a final name")
                raise Exit(code=130) from None

        return task(*task_args, **task_kwargs)(wrapper)

    if len(task_args) == 1 and callable(task_args[0]) and not task_kwargs:
        fn, task_args = task_args[0], ()
        return decorate(fn)
    return decorate
