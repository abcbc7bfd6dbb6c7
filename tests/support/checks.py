"""Typed accessors for tests: a value a test needs is there, or the test fails saying what lacks.

``present`` narrows an optional (a lock's closure, a tar member's file, a regex match) where the
test's claim is that it exists; ``check_of`` is a probe result's check by id.
"""

from __future__ import annotations

from typing import TypeVar

from edgevllm.probe.result import Check, ProbeResult

T = TypeVar("T")


def present(value: T | None, what: str = "the value") -> T:
    assert value is not None, f"{what} is missing"
    return value


def check_of(result: ProbeResult, check_id: str) -> Check:
    found = result.get(check_id)
    assert found is not None, f"no check {check_id!r} in {[c.id for c in result.checks]}"
    return found
