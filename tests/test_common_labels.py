"""One table of labels and in-image paths (edgevllm/common/labels.py), and the copies it cannot
reach: the stdlib-only applier and probe script run in the image without edgevllm, so they keep
literals, which must equal the table."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from edgevllm.builder.render import render_dockerfile
from edgevllm.common import labels
from edgevllm.specs.buildspec import load_spec, resolve
from edgevllm.specs.lock import LOCK_HASH_LABEL, LOCK_IMAGE_PATH, LOCK_LABEL

PACKAGE = Path(labels.__file__).resolve().parents[1]


def test_in_image_script_defaults_equal_the_table():
    check = (PACKAGE / "probe" / "inimage_check.py").read_text()
    assert f'"--mods-record", default="{labels.MODS_RECORD}"' in check
    assert f'"--lock", default="{labels.LOCK_FILE}"' in check


def test_lock_names_come_from_the_table():
    assert (LOCK_LABEL, LOCK_HASH_LABEL, LOCK_IMAGE_PATH) == \
        (labels.LOCK, labels.LOCK_SHA, labels.LOCK_FILE)


def test_the_templates_spell_no_label_or_path_themselves():
    templates = sorted((PACKAGE.parent / "dockerfiles").glob("*.j2"))
    assert {t.name for t in templates} >= {"base.Dockerfile.j2", "compile.Dockerfile.j2"}
    for path in templates:
        template = path.read_text()
        code = "\n".join(line for line in template.splitlines()
                         if not line.lstrip().startswith("#"))
        code = re.sub(r"\{#.*?#\}", "", code, flags=re.S)
        for spelt in (labels.PREFIX, labels.HOME, labels.VENV, labels.WHEELHOUSE_MOUNT + " "):
            assert spelt not in code, f"{path.name} spells {spelt}: use labels.* / paths.*"


def test_the_rendered_dockerfile_carries_the_table_values():
    text = render_dockerfile(resolve(load_spec("spark")))
    for value in (labels.TARGET, labels.ARCH_LIST, labels.CONSTRAINTS, labels.MODS_RECORD):
        assert value in text


def test_no_module_spells_a_label_or_in_image_path_itself():
    """Label names and in-image paths are written once, in common/labels.py (the in-image
    scripts excepted: they run without edgevllm and are held to the table above)."""
    import ast

    exempt = {"common/labels.py", "mods/inimage_applier.py", "probe/inimage_check.py"}
    spelled = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(PACKAGE))
        if rel in exempt or "_data" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    node.value.startswith((labels.PREFIX, labels.HOME)):
                spelled.append(f"{rel}:{node.lineno}: {node.value!r}")
    assert not spelled, "use edgevllm.common.labels instead:\n" + "\n".join(spelled)


# What an in-image script may import besides the standard library: the image's own packages.
IMAGE_PACKAGES = {"torch", "flashinfer"}
REPO = PACKAGE.parent


def oldest_python() -> tuple[int, int]:
    """The oldest Python that runs an in-image script: the targets' (``python:``), the test
    bases' (named in tests/support and the e2e specs) and the host's floor (CONTRIBUTING.md)."""
    found = [re.search(r"^python: *python(3\.\d+)", p.read_text(), re.M)
             for p in (REPO / "targets").glob("*.yaml")]
    versions = {m.group(1) for m in found if m}
    for path in [*(REPO / "tests" / "support").glob("*.py"), REPO / "tests/e2e/conftest.py"]:
        versions |= set(re.findall(r"python(3\.\d+)\b", path.read_text()))
    host = re.search(r"keep code (3\.\d+)-compatible", (REPO / "docs/CONTRIBUTING.md").read_text())
    assert host and len(versions) >= 2, "no Python versions found for targets and test bases"
    versions.add(host.group(1))
    return min(tuple(int(n) for n in v.split(".")) for v in versions)  # type: ignore[return-value]


def imported_roots(tree: ast.AST) -> set[str]:
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            roots.add("." if node.level else (node.module or "").split(".")[0])
    return roots - {"__future__"}


def foreign_imports(source: str, name: str) -> set[str]:
    tree = ast.parse(source, filename=name, feature_version=oldest_python())
    return imported_roots(tree) - set(sys.stdlib_module_names) - IMAGE_PACKAGES


@pytest.mark.parametrize("script", labels.IN_IMAGE_SCRIPTS)
def test_each_in_image_script_is_stdlib_only_for_the_oldest_python(script):
    source = (PACKAGE / script).read_text()
    assert foreign_imports(source, script) == set(), \
        f"{script} runs where edgevllm is not installed: standard library only"


def test_an_edgevllm_import_in_an_in_image_script_is_caught():
    source = (PACKAGE / labels.IN_IMAGE_SCRIPTS[1]).read_text()
    lazy = source + "\n\ndef later():\n    from edgevllm.common import labels\n"
    assert foreign_imports(lazy, "x.py") == {"edgevllm"}
    assert foreign_imports(source + "\nimport yaml\n", "x.py") == {"yaml"}
    with pytest.raises(SyntaxError):  # a match statement is 3.10: caught under an older floor
        ast.parse("match x:\n    case 1:\n        pass\n", feature_version=(3, 9))


def test_the_list_of_in_image_scripts_is_complete():
    """A module whose own source is handed to an image (a sibling ``.py`` named in code: copied
    into a build context, fed to python3, read as text) is in the list."""
    named = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and re.fullmatch(r"\w+\.py", node.value) \
                    and (path.parent / node.value).is_file():
                named.add(str((path.parent / node.value).relative_to(PACKAGE)))
    assert named == set(labels.IN_IMAGE_SCRIPTS), "keep common/labels.IN_IMAGE_SCRIPTS complete"


def test_every_in_image_script_is_named_inimage_and_only_they_are():
    """One rule for the name: a file that runs inside an image is ``inimage_<what>.py``, so a
    reader knows at the file name that it is stdlib only and copied into an image, and a module
    so named is one."""
    named = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("inimage_*.py")}
    assert named == set(labels.IN_IMAGE_SCRIPTS), "name an in-image script inimage_<what>.py"
    assert all(Path(script).name.startswith("inimage_") for script in labels.IN_IMAGE_SCRIPTS)
