#!/usr/bin/env python3
"""Test lines per code line, overall and per package room (edgevllm/<room>/).

Code: every line of edgevllm/**/*.py. Tests: every line of tests/**/*.py (helpers under
tests/support/, conftest files and tests/e2e/ included), so the overall figure is all test lines
over all code lines. A test file counts for one room: the one its name says
(``test_<room>_*.py``, in tests/ or tests/e2e/), else the room it imports most
(``from edgevllm.<room>...``; a tie goes to the first name); a file that imports none (helpers,
fixtures) counts only overall. Prints one row a room, thinnest first, then the overall ratio.
The issue's goals: at least 1.1 overall and no room under 0.6.

    python bench/testratio.py [--json] [--repo TREE]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
IMPORT = re.compile(r"^\s*(?:from|import)\s+edgevllm\.(\w+)", re.M)


def rooms(package: Path) -> list[str]:
    return sorted(p.name for p in package.iterdir() if (p / "__init__.py").is_file())


def line_count(path: Path) -> int:
    return len(path.read_text(errors="replace").splitlines())


def room_of(test: Path, known: list[str]) -> str | None:
    """The room a test file counts for: its name's, else the one it imports most."""
    named = re.match(r"test_([a-z]+)_", test.name)
    if named and named.group(1) in known:
        return named.group(1)
    used = Counter(r for r in IMPORT.findall(test.read_text(errors="replace")) if r in known)
    if not used:
        return None
    return sorted(used.items(), key=lambda item: (-item[1], item[0]))[0][0]


def ratios(repo: Path = REPO) -> dict:
    """{"rooms": {room: {"code": n, "tests": n, "ratio": r}}, "code": n, "tests": n,
    "ratio": r} for the tree at ``repo``."""
    known = rooms(repo / "edgevllm")
    code = {room: sum(line_count(f) for f in (repo / "edgevllm" / room).rglob("*.py"))
            for room in known}
    tests: Counter[str] = Counter()
    total_tests = 0
    for test in sorted((repo / "tests").rglob("*.py")):
        if "fixtures" in test.relative_to(repo / "tests").parts:
            continue  # packages and trees the tests build, not tests
        lines = line_count(test)
        total_tests += lines
        room = room_of(test, known)
        if room is not None:
            tests[room] += lines
    total_code = sum(line_count(f) for f in (repo / "edgevllm").rglob("*.py"))
    return {"rooms": {room: {"code": code[room], "tests": tests[room],
                             "ratio": round(tests[room] / code[room], 2)} for room in known},
            "code": total_code, "tests": total_tests,
            "ratio": round(total_tests / total_code, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="the figures as JSON")
    parser.add_argument("--repo", type=Path, default=REPO, help="the tree to measure")
    args = parser.parse_args()
    figures = ratios(args.repo)
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    for room, row in sorted(figures["rooms"].items(), key=lambda item: item[1]["ratio"]):
        print(f"{room:12} {row['tests']:6} / {row['code']:6} = {row['ratio']:.2f}")
    print(f"{'overall':12} {figures['tests']:6} / {figures['code']:6} = {figures['ratio']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
