"""The package's layers, enforced: a module imports only from its own layer or the layers below,
and no two modules import each other (directly or through others). See docs/architecture.md."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "edgevllm"

# Bottom to top. A package's modules may import any package in its own layer or below.
LAYERS: list[tuple[str, ...]] = [
    ("common",),
    ("containers",),
    ("specs",),
    ("sources", "mods", "verify", "probe", "image", "inspect"),
    ("builder",),
    ("track",),  # inv track: reads the stages and the mode rule over two released trees
    ("serve",),
    ("perf",),
    ("cli",),
]
# Stages sit side by side; these are the uses of one stage by another that the design allows,
# each one used today (a test fails on an allowed use that no longer exists: drop it here).
STAGE_USES = {
    ("probe", "verify"),    # level 1 tells the first start's compile work in verify's words
    ("verify", "image"),    # verify reads a published tarball set
    ("inspect", "image"),   # inspect reads a published set and the local layer store
    ("inspect", "verify"),  # and the layer streams verify unpacks
}
MAX_MODULE_LINES = 500
LONG_MODULES = {
    "mods/inimage_applier.py": "the in-image applier: one self-contained file, stdlib only"}
MAX_FUNCTION_LINES = 60
# A module within 10 % of the cap says why in its caption (a paragraph starting "Its length:"),
# so the cap stays a limit, not a target. PENDING: near the cap, its reason still to be written.
NEAR_CAP_LINES = MAX_MODULE_LINES * 9 // 10
NEAR_CAP_PENDING: dict[str, str] = {}  # a module whose reason is being written (none now)


def layer_of(package: str) -> int:
    for index, members in enumerate(LAYERS):
        if package in members:
            return index
    raise AssertionError(f"edgevllm/{package}/ is in no layer: add it to LAYERS in {__file__}")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """Every edgevllm module this file imports (at any depth: lazy imports count too).
    ``from edgevllm.pkg import mod`` is an edge to ``edgevllm.pkg.mod`` alone."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path}: relative import; write 'from edgevllm.… import …'")
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("edgevllm"):
            module = node.module or ""
            names = {f"{module}.{a.name}" for a in node.names}
            found |= (names & modules) or {module}
            if names - modules:
                found.add(module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("edgevllm"))
    return found


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: {m for m in imports_of(path, set(files)) if m in files
                   and m not in (name, "edgevllm")}
            for name, path in files.items()}


def test_every_package_is_in_a_layer():
    for folder in sorted(p for p in PACKAGE.iterdir() if (p / "__init__.py").exists()):
        layer_of(folder.name)


def test_every_folder_of_modules_is_a_package():
    """A folder of modules without ``__init__.py`` is a namespace package: no docstring says what
    it holds, and the layer walk above would not see it."""
    bare = sorted(str(folder.relative_to(PACKAGE)) for folder in {p.parent for p in
                  PACKAGE.rglob("*.py")} if not (folder / "__init__.py").exists())
    assert not bare, f"folders of modules without __init__.py: {bare}"


def test_lower_layers_never_import_upper_ones():
    wrong = []
    for module, targets in graph().items():
        mine = module.split(".")[1] if module.count(".") >= 1 else None
        if mine is None or mine == "__init__":
            continue
        for target in (t for t in targets if t.count(".") >= 1):
            theirs = target.split(".")[1]
            if mine == theirs or theirs == "__init__":
                continue
            if layer_of(theirs) > layer_of(mine):
                wrong.append(f"{module} → {target}")
            elif layer_of(theirs) == layer_of(mine) and (mine, theirs) not in STAGE_USES:
                wrong.append(f"{module} → {target} (stage to stage: add to STAGE_USES if meant)")
    assert not wrong, "imports against the layers:\n" + "\n".join(sorted(wrong))


def test_no_import_cycles():
    edges = graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                pytest.fail("import cycle: " + " → ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)


def stage_uses() -> set[tuple[str, str]]:
    found = set()
    for module, targets in graph().items():
        mine = module.split(".")[1] if module.count(".") >= 1 else None
        for target in (t for t in targets if t.count(".") >= 1):
            theirs = target.split(".")[1]
            if mine and mine != theirs and "__init__" not in (mine, theirs) \
                    and layer_of(mine) == layer_of(theirs):
                found.add((mine, theirs))
    return found


def test_every_allowed_stage_use_exists():
    assert STAGE_USES - stage_uses() == set(), "allowed but no longer used: drop from STAGE_USES"


def test_no_module_is_too_long():
    long = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines())
            for p in PACKAGE.rglob("*.py")}
    over = {name: n for name, n in long.items()
            if n > MAX_MODULE_LINES and name not in LONG_MODULES}
    assert not over, f"modules over {MAX_MODULE_LINES} lines (split them by concern): {over}"
    assert all(long[name] > MAX_MODULE_LINES for name in LONG_MODULES), "exempt but short: drop it"


def test_a_module_near_the_cap_says_why_in_its_caption():
    near = {str(p.relative_to(PACKAGE)): p for p in PACKAGE.rglob("*.py")
            if len(p.read_text().splitlines()) >= NEAR_CAP_LINES}
    silent = sorted(name for name, path in near.items()
                    if name not in LONG_MODULES and name not in NEAR_CAP_PENDING
                    and "\nIts length: " not in (ast.get_docstring(ast.parse(path.read_text()))
                                                 or ""))
    assert not silent, (f"modules of {NEAR_CAP_LINES} lines or more whose caption does not say why "
                        f"(a paragraph 'Its length: ...', or split them by concern): {silent}")
    assert set(NEAR_CAP_PENDING) <= set(near), "pending but no longer near the cap: drop it"


def long_functions() -> dict[str, int]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    found[f"{path.relative_to(PACKAGE)}:{node.name}"] = lines
    return found


def test_no_function_is_too_long():
    over = long_functions()
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines (take them apart): {over}"


# A package's wings (sub-packages) stand side by side under the package's own modules: a wing
# imports neither another wing of its package nor the package's top (those import the wings).
WINGS = {"serve": ("recipe", "cache"), "builder": ("aot", "cross", "subset")}


def test_wings_import_neither_each_other_nor_their_top():
    wrong = []
    for module, targets in graph().items():
        parts = module.split(".")
        if len(parts) < 4 or parts[2] not in WINGS.get(parts[1], ()):
            continue
        for target in targets:
            theirs = target.split(".")
            if theirs[:2] == parts[:2] and theirs[2:3] != parts[2:3]:
                wrong.append(f"{module} → {target}")
    assert not wrong, "a wing imports its neighbour or its package's top:\n" + "\n".join(wrong)


def test_every_wing_exists():
    for package, wings in WINGS.items():
        for wing in wings:
            assert (PACKAGE / package / wing / "__init__.py").exists(), f"no wing {package}/{wing}"


def test_no_module_imports_a_private_name_of_another():
    """A ``_name`` is its module's own: what two modules share is public, in a shared module."""
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("edgevllm"):
                wrong += [f"{path.relative_to(PACKAGE)}: {node.module}.{a.name}"
                          for a in node.names if a.name.startswith("_")
                          and not a.name.startswith("__")]
    assert not wrong, "private names imported from another module:\n" + "\n".join(wrong)


def layer_table() -> dict[str, str]:
    """docs/architecture.md's layer drawing: each package's folder → the words after it."""
    block = (PACKAGE.parent / "docs" / "architecture.md").read_text().split("```", 2)[1]
    entries: dict[str, str] = {}
    current = None
    for line in block.splitlines():
        found = re.search(r"edgevllm/(\w+)/", line)
        if found:
            current = found.group(1)
            entries[current] = line[found.end():]
        elif current:
            entries[current] += " " + line.strip()
    return entries


def test_the_layer_table_names_every_module_in_layer_order():
    table = layer_table()
    missing = {}
    for folder in sorted(p for p in PACKAGE.iterdir() if (p / "__init__.py").exists()):
        names = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
        names |= {f"{p.name}/" for p in folder.iterdir() if (p / "__init__.py").exists()}
        words = table.get(folder.name, "")
        gone = sorted(n for n in names if not re.search(
            r"(?<![\w/])" + re.escape(n) + ("" if n.endswith("/") else r"\b"), words))
        if gone:
            missing[folder.name] = gone
    assert not missing, f"docs/architecture.md's layer table does not name: {missing}"
    order = [layer_of(name) for name in table]
    assert order == sorted(order, reverse=True), "the table reads top layer first, as LAYERS"
