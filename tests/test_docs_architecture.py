"""docs/architecture.md's owner table, held to the code: every owner module exists and defines
what the row names, every test named exists; and the one-owner rules no other test holds."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from support.checks import present

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "edgevllm"
DOC = ROOT / "docs" / "architecture.md"


def owner_rows() -> list[tuple[str, str, str]]:
    text = DOC.read_text()
    section = text.split("## One owner per rule", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    cells = [[c.strip() for c in row.strip("|").split(" | ")] for row in rows[1:]]
    return [(c[0], c[1], c[2]) for c in cells if not set(c[0]) <= {"-"}]


def defined_names(path: Path) -> set[str]:
    """Top-level functions, classes and assignments, and ``Class.member`` for class members."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(f"{node.name}.{member.name}")
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) else []
        names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def test_the_table_has_rows():
    assert len(owner_rows()) >= 15


@pytest.mark.parametrize("rule,owner,held_by", owner_rows(), ids=lambda v: str(v)[:40])
def test_every_owner_row_names_real_code_and_a_real_test(rule, owner, held_by):
    # owner: `mod.py` `name` ...; a second owner after ';' the same way
    current = None
    for token in re.findall(r"`([^`]+)`", owner):
        if token.endswith(".py"):
            current = PACKAGE / token
            assert current.is_file(), f"{rule}: no module edgevllm/{token}"
        else:
            assert current is not None, f"{rule}: '{token}' names no module first"
            assert token in defined_names(current), f"{rule}: {current.name} defines no {token}"
    quoted = present(re.fullmatch(r"`([^`]+)`", held_by), held_by)
    test_file, _, test_name = quoted.group(1).partition("::")
    path = ROOT / test_file
    assert path.is_file(), f"{rule}: no test file {test_file}"
    assert test_name in defined_names(path), f"{rule}: {test_file} has no {test_name}"


def py_files(*exempt: str):
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(PACKAGE))
        if rel not in exempt:
            yield rel, ast.parse(path.read_text())


def test_upstream_urls_are_spelt_once():
    spelt = {rel for rel, tree in py_files("specs/refs.py") for node in ast.walk(tree)
             if isinstance(node, ast.Constant) and isinstance(node.value, str)
             and re.search(r"github\.com/(vllm-project/vllm|flashinfer-ai/flashinfer)\b",
                           node.value)}
    assert not spelt, "use edgevllm.specs.refs.UPSTREAM_REPOS"


# Readers of label JSON besides the owners, and why.
OTHER_LABEL_JSON: dict[str, str] = {}


def test_record_labels_are_parsed_in_one_place():
    found = set()
    for rel, tree in py_files("common/labels.py", "image/records.py"):
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "json.loads" \
                    and re.search(r"label", ast.unparse(node), re.I):
                found.add(rel)
    assert found - set(OTHER_LABEL_JSON) == set(), "read records with common.labels.label_record"
    assert set(OTHER_LABEL_JSON) - found == set(), "no longer parses label JSON: drop it"


RECORD_PATHS = {"MODS_RECORD", "WARM_RECORD", "LOCK_FILE", "LOCK_IMAGE_PATH", "HOME", "RECORD_DIR"}


def reads_an_image_record(tree: ast.AST, readers: set[str]) -> bool:
    """A file taken out of an image (``cat`` as a container's entrypoint), or a record's in-image
    path handed to anything but image/records.py's readers."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if any(k.arg == "entrypoint" and isinstance(k.value, ast.Constant)
               and k.value.value == "cat" for k in node.keywords):
            return True
        callee = ast.unparse(node.func).rsplit(".", 1)[-1]
        args = [*node.args, *(k.value for k in node.keywords)]
        if callee not in readers and any(
                isinstance(a, (ast.Name, ast.Attribute)) and ast.unparse(a).rsplit(".", 1)[-1]
                in RECORD_PATHS for a in args):
            return True
    return False


def test_image_records_are_read_in_one_place():
    """Reading a record out of an image (a container run to ``cat`` it, or its path handed to a
    reader) happens in image/records.py; the in-image scripts read their own files."""
    from edgevllm.common.labels import IN_IMAGE_SCRIPTS

    readers = defined_names(PACKAGE / "image" / "records.py")
    found = {rel for rel, tree in py_files("image/records.py", *IN_IMAGE_SCRIPTS)
             if reads_an_image_record(tree, readers)}
    assert not found, f"read image records with edgevllm.image.records: {sorted(found)}"
    stray = ast.parse("engine.run(RunOptions(image=ref, entrypoint='cat', command=[p]))\n"
                      "def f(): return engine.copy_from(c, labels.MODS_RECORD, dest)")
    assert reads_an_image_record(stray, readers)


IMAGE_LABELS = {"TARGET", "PLATFORM", "ARCH_LIST", "MODS_SELECTED", "MODE", "VLLM_SHA", "VLLM_PR",
                "PRS", "MODS_VERSIONS", "TAG", "KERNEL_PLAN", "VLLM_RS", "VLLM_WHEEL_SHA", "LOCK",
                "LOCK_SHA", "MODS", "VERIFY", "PROBE"}


def test_image_labels_are_written_in_one_place():
    """Dicts keyed by an image label are built in builder/steps.py, and by a mode for its own."""
    writers = set()
    for rel, tree in py_files():
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict) and any(
                    isinstance(k, ast.Attribute) and ast.unparse(k).startswith("labels.")
                    and k.attr in IMAGE_LABELS for k in node.keys if k is not None):
                writers.add(rel)
    assert {w for w in writers if not w.startswith("builder/modes/")} == {"builder/steps.py"}


def test_engines_are_named_in_one_place():
    made = {rel for rel, tree in py_files("containers/docker.py") for node in ast.walk(tree)
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "DockerEngine"
            and any(k.arg in ("host", "context") for k in node.keywords)}
    assert not made, "get an engine from a flag with DockerEngine.named"


def test_image_layers_are_read_in_one_place():
    """Whiteouts are the mark of reading an image's layers: only verify/archive.py spells them."""
    spelt = {rel for rel, tree in py_files("verify/archive.py") for node in ast.walk(tree)
             if isinstance(node, ast.Constant) and isinstance(node.value, str)
             and ".wh." in node.value}
    assert not spelt, "read an image's layers with edgevllm.verify.archive.read_image"
