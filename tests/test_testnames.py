"""Tests mirror the rooms: every ``tests/test_<room>_*.py`` (and ``tests/test_<room>.py``) names a
package room of ``edgevllm/`` (a folder with an ``__init__.py``), or one of the few documented
exceptions below, which test something that is no room of the package. A test of a new room is
named after it; a file named after a room that was renamed or removed fails here."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# What a test file may be named after besides a room, and why.
EXCEPTIONS = {
    "ci": "the CI scripts under .ci/",
    "docs": "the documents under docs/ against the tree",
    "layers": "the import layers of the whole package",
    "packaging": "the installed distribution (pyproject.toml, the entry points)",
    "support": "the tests' own helpers under tests/support/",
    "testnames": "this rule",
}


def rooms() -> set[str]:
    return {p.name for p in (REPO / "edgevllm").iterdir() if (p / "__init__.py").is_file()}


def named_after(test: Path) -> str:
    """The word after ``test_``: the room a test file says it tests."""
    found = re.match(r"test_([a-z0-9]+)(?:_|\.py$)", test.name)
    assert found, f"{test.name}: not test_<room>_<what>.py"
    return found.group(1)


def test_every_test_file_names_a_room_or_a_documented_exception():
    known = rooms()
    assert {"builder", "cli", "serve"} <= known, known  # the rooms were found
    strays = sorted(t.name for t in (REPO / "tests").glob("test_*.py")
                    if named_after(t) not in known | set(EXCEPTIONS))
    assert strays == [], (f"named after no room of edgevllm/ ({sorted(known)}): {strays}; name "
                          "the test after the room it tests, or document why in EXCEPTIONS")


def test_no_exception_shadows_a_room_and_each_is_used():
    """An exception that became a room is no exception; one no file uses is stale."""
    assert set(EXCEPTIONS) & rooms() == set()
    used = {named_after(t) for t in (REPO / "tests").glob("test_*.py")}
    assert set(EXCEPTIONS) - used == set(), f"unused exceptions: {set(EXCEPTIONS) - used}"


def test_the_rule_reads_names_as_it_says():
    assert named_after(Path("test_serve_offlinebundle.py")) == "serve"
    assert named_after(Path("test_layers.py")) == "layers"
    assert named_after(Path("test_cli.py")) == "cli"
