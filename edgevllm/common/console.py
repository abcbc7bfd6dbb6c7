"""User-facing output: progress and messages on stderr, results on stdout.

Keep machine-readable results (JSON, tables a script parses) on stdout via ``print``; everything
meant for a person goes through these helpers so that it can be silenced or coloured in one place,
and so that no credential-shaped text (common/secrets) reaches a terminal or a CI log.
"""

from __future__ import annotations

import functools
import os
import sys

from rich.console import Console

from edgevllm.common.escape import terminal
from edgevllm.common.secrets import redact as _redact


@functools.lru_cache(maxsize=None)
def err_console() -> Console:
    # No colour when not a terminal (CI logs), nor when NO_COLOR is set.
    return Console(stderr=True, highlight=False, no_color=bool(os.environ.get("NO_COLOR")),
                   width=None if sys.stderr.isatty() else 200)


@functools.lru_cache(maxsize=None)
def out_console() -> Console:
    # Piped or logged output: wide enough that tables are not cut at 80 columns.
    return Console(highlight=False, no_color=bool(os.environ.get("NO_COLOR")),
                   width=None if sys.stdout.isatty() else 200)


def redact(message: str) -> str:
    """A message for a person: credentials redacted, control sequences escaped."""
    return terminal(_redact(message))


def info(message: str) -> None:
    err_console().print(redact(message), markup=False, soft_wrap=True)


def step(message: str) -> None:
    err_console().print(f"==> {redact(message)}", markup=False, style="bold", soft_wrap=True)


def warn(message: str) -> None:
    err_console().print(f"warning: {redact(message)}", markup=False, style="yellow", soft_wrap=True)


def error(message: str) -> None:
    err_console().print(f"error: {redact(message)}", markup=False, style="red", soft_wrap=True)


def is_tty() -> bool:
    return sys.stderr.isatty()


def reader_left() -> None:
    """stdout's reader closed the pipe (``| head``): point stdout at /dev/null, so that neither
    a later print nor the flush at exit raises again; the caller exits 1 without a word."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
