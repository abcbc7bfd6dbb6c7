"""One table of labels and in-image paths (edgevllm/kernel/labels.py), and the copies it cannot
reach: the stdlib-only applier and probe script run in the image without edgevllm, so they keep
literals, which must equal the table."""

from __future__ import annotations

import re
from pathlib import Path

from edgevllm.build.render import render_dockerfile
from edgevllm.kernel import labels
from edgevllm.model.lock import LOCK_HASH_LABEL, LOCK_IMAGE_PATH, LOCK_LABEL
from edgevllm.model.spec import load_spec, resolve

PACKAGE = Path(labels.__file__).resolve().parents[1]


def test_in_image_script_defaults_equal_the_table():
    check = (PACKAGE / "probe" / "inimage_check.py").read_text()
    assert f'"--mods-record", default="{labels.MODS_RECORD}"' in check
    assert f'"--lock", default="{labels.LOCK_FILE}"' in check


def test_lock_names_come_from_the_table():
    assert (LOCK_LABEL, LOCK_HASH_LABEL, LOCK_IMAGE_PATH) == \
        (labels.LOCK, labels.LOCK_SHA, labels.LOCK_FILE)


def test_the_template_spells_no_label_or_path_itself():
    template = (PACKAGE.parent / "dockerfiles" / "vllm.Dockerfile.j2").read_text()
    code = "\n".join(line for line in template.splitlines() if not line.lstrip().startswith("#"))
    code = re.sub(r"\{#.*?#\}", "", code, flags=re.S)
    assert labels.PREFIX not in code
    assert labels.HOME not in code


def test_the_rendered_dockerfile_carries_the_table_values():
    text = render_dockerfile(resolve(load_spec("spark")))
    for value in (labels.TARGET, labels.ARCH_LIST, labels.CONSTRAINTS, labels.MODS_RECORD):
        assert value in text
