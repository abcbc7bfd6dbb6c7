"""The one KEY=VALUE parser: ``--env`` (build and probe), ``--build-arg``, ``--package``, ``--set``,
``--node-env``, ``--sweep``.

A malformed item raises the caller's error class with one line naming the flag and the item, so
each command keeps its own exit code.
"""

from __future__ import annotations

from typing import Iterable


def pair_error(item: object, flag: str, error: type[Exception], example: str = "KEY=VALUE"
               ) -> Exception:
    """The one error of a malformed pair: ``--env 'X': expected KEY=VALUE``."""
    return error(f"{flag} '{item}': expected {example}")


def split_pair(item: object, flag: str, error: type[Exception], example: str = "KEY=VALUE"
               ) -> tuple[str, str]:
    """``"A=1"`` → ``("A", "1")``; no ``=`` or an empty key raises ``error``."""
    key, sep, value = str(item).partition("=")
    key = key.strip()
    if not sep or not key:
        raise pair_error(item, flag, error, example)
    return key, value


def parse_pairs(items: Iterable[object] | None, flag: str, error: type[Exception],
                example: str = "KEY=VALUE") -> dict[str, str]:
    """``["A=1", "B=2"]`` → ``{"A": "1", "B": "2"}`` (later items win)."""
    return dict(split_pair(item, flag, error, example) for item in items or [])


def split_csv(values: Iterable[object] | None) -> list[str]:
    """Repeated flags and comma-separated lists alike: ``--mod a,b --mod c`` → ``[a, b, c]``."""
    out: list[str] = []
    for value in values or []:
        out += [v.strip() for v in str(value).split(",") if v.strip()]
    return out
