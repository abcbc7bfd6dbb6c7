"""Every user-facing error is a class in edgevllm/common/errors.py with its exit code: a class
elsewhere that subclasses one of them, or says an exit code itself, fails here."""

from __future__ import annotations

import ast
from pathlib import Path

from edgevllm.common import errors

PACKAGE = Path(errors.__file__).resolve().parents[1]


def user_facing_classes(tree: ast.AST, known: set[str]) -> set[str]:
    """Classes in ``tree`` that are edgevllm errors: a base among ``known`` (or among the file's
    own such classes), or an ``exit_code`` of their own."""
    found: set[str] = set()
    classes = [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    while True:
        before = len(found)
        for node in classes:
            bases = {ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases}
            says_code = any(isinstance(t, ast.Name) and t.id == "exit_code"
                            for item in node.body if isinstance(item, (ast.Assign, ast.AnnAssign))
                            for t in (item.targets if isinstance(item, ast.Assign)
                                      else [item.target]))
            if bases & (known | found) or says_code:
                found.add(node.name)
        if len(found) == before:
            return found


def test_every_error_class_lives_in_common_errors():
    known = {name for name, value in vars(errors).items()
             if isinstance(value, type) and issubclass(value, errors.EdgeVllmError)}
    elsewhere = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path != Path(errors.__file__).resolve():
            found = user_facing_classes(ast.parse(path.read_text()), known)
            if found:
                elsewhere[str(path.relative_to(PACKAGE))] = sorted(found)
    assert not elsewhere, f"move these error classes to edgevllm/common/errors.py: {elsewhere}"


def test_an_error_class_elsewhere_is_caught():
    known = {"SourceError", "EdgeVllmError"}
    stray = ast.parse("class A(SourceError): pass\nclass B(A): pass\n"
                      "class C(Exception):\n    exit_code = 5\nclass D(ValueError): pass\n")
    assert user_facing_classes(stray, known) == {"A", "B", "C"}
