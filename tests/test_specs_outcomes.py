"""One constant of mod outcomes (edgevllm.specs.outcomes): the in-image applier's copy equals it,
and no other module spells an outcome itself."""

from __future__ import annotations

import ast
from pathlib import Path

from edgevllm.mods import inimage_applier as applier
from edgevllm.specs import outcomes

PACKAGE = Path(outcomes.__file__).resolve().parents[1]


def test_the_in_image_applier_keeps_an_equal_copy():
    assert applier.OUTCOMES == outcomes.OUTCOMES
    assert set(outcomes.GOOD_OUTCOMES) == set(outcomes.OUTCOMES) - {outcomes.FAILED}


def test_no_other_module_spells_an_outcome():
    spelled = set()
    for path in PACKAGE.rglob("*.py"):
        rel = str(path.relative_to(PACKAGE))
        if rel in ("specs/outcomes.py", "mods/inimage_applier.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in ("already-applied",
                                                                  "not-applicable"):
                spelled.add(rel)
    assert not spelled, "import the outcome from edgevllm.specs.outcomes"
