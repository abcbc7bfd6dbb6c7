"""One table of labels and in-image paths (edgevllm/common/labels.py), and the copies it cannot
reach: the stdlib-only applier and probe script run in the image without edgevllm, so they keep
literals, which must equal the table."""

from __future__ import annotations

import re
from pathlib import Path

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

    exempt = {"common/labels.py", "mods/applier.py", "probe/inimage_check.py"}
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
