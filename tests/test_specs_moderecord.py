"""A build mode is one record (specs/moderecord.py reads ``builder/modes/<name>.yaml``): every
registered mode has its record and every record its mode; nothing outside the mode rule and
``builder/modes/`` compares a mode's name to a literal; each mode's plan passes exactly what its
record says; and a throwaway fourth mode (a copy of prebuilt named ``nightly``: one module, one
record, one template, one registry line, all in this test) renders the image prebuilt renders."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest

from edgevllm.builder import modes
from edgevllm.builder.modes import MODES
from edgevllm.builder.render import template_name
from edgevllm.builder.renderout import render_to
from edgevllm.builder.runner import disk_gb
from edgevllm.common.errors import SpecError
from edgevllm.common.paths import project_root, templates_dir
from edgevllm.specs import moderecord
from edgevllm.specs.buildspec import load_spec, resolve
from edgevllm.specs.lock import Lock
from edgevllm.specs.moderecord import ModeRecord, mode_record, mode_records
from edgevllm.verify.policy import STOCK_POLICY, mode_policy

PACKAGE = Path(__file__).resolve().parents[1] / "edgevllm"
# The mode rule: where a mode's name is what is decided (specs/buildspec.py).
MODE_RULE = {"wants_tree_check", "choose_mode", "decided_spec", "_check_mode_fields",
             "_default_mode"}
# Comparisons with a mode's word that are not about a build mode, each with its reason.
NOT_A_MODE = {("verify/firststart.py", "caches"): "FlashInfer's own state ('prebuilt' kernels)"}
TOOLCHAIN = ("git", "ccache", "build-essential", "cmake", "ninja-build")
SHARED = {"edgevllm-mods", "edgevllm-meta", "wheels"}        # every plan's, not a mode's own
# a tree's, a road's, a partial build's or a target's leave-out (builder/subset.py)
TREE = {"vllm-src", "cmake-deps", "flashinfer-src", "edgevllm-cross", "edgevllm-extensions"}


def test_every_mode_has_its_record_and_every_record_its_mode():
    assert set(MODES) == set(mode_records()), "a mode in MODES needs builder/modes/<name>.yaml"
    for name in MODES:
        assert (templates_dir() / template_name(name)).is_file(), name
    with pytest.raises(SpecError, match="mode 'nosuch': no such build mode"):
        mode_record("nosuch")


def test_a_record_that_contradicts_itself_is_refused():
    record = mode_record("prebuilt").model_dump()
    with pytest.raises(ValueError, match="vllm_from"):
        ModeRecord.model_validate({**record, "vllm_from": "wheels"})
    with pytest.raises(ValueError, match="runtime"):
        ModeRecord.model_validate({**record, "stages": ["runtime", "wheels"]})


def mode_literal(node: ast.AST, names: set[str]) -> bool:
    """A comparison (or a ``case``) of anything with a mode's name spelt as a literal."""
    def literal(n: ast.AST) -> bool:
        if isinstance(n, ast.Constant):
            return n.value in names
        return isinstance(n, (ast.Tuple, ast.List, ast.Set)) and any(literal(e) for e in n.elts)
    if isinstance(node, ast.Compare):
        return any(literal(side) for side in [node.left, *node.comparators])
    return isinstance(node, ast.MatchValue) and literal(node.value)


def comparisons(names: set[str]) -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("builder/modes/"):
            continue
        tree = ast.parse(path.read_text())
        owners = {id(n): f.name for f in ast.walk(tree)
                  if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in ast.walk(f)}
        for node in ast.walk(tree):
            where = owners.get(id(node), "<module>")
            if rel == "specs/buildspec.py" and where in MODE_RULE:
                continue
            if mode_literal(node, names) and (rel, where) not in NOT_A_MODE:
                found.append(f"{rel}:{getattr(node, 'lineno', 0)} {where}: {ast.unparse(node)}")
    return found


def test_no_module_compares_a_mode_to_a_literal():
    """Outside the mode rule and builder/modes/, a mode is asked its record, never its name:
    a literal comparison is how a new mode silently became compile (or prebuilt) elsewhere."""
    assert comparisons(set(MODES)) == [], "ask mode_record(name) instead"
    names = set(MODES)
    for text in ('eff.mode == "prebuilt"', 'mode in ("prebuilt", "precompiled")',
                 'data.get("mode") != "compile"'):
        assert mode_literal(ast.parse(text, mode="eval").body, names), text
    match = ast.parse('match mode:\n    case "compile":\n        pass').body[0]
    assert any(mode_literal(n, names) for n in ast.walk(match))


def test_the_gate_by_mode_has_one_owner():
    """Build time (builder/steps.run_checks) and ``inv verify`` of an image (cli/verify, by its
    lock's mode) ask verify/policy.mode_policy; nobody else names the stock-kernel policy."""
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        names = {n.id for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Name)}
        names |= {a.name for n in ast.walk(ast.parse(path.read_text()))
                  if isinstance(n, ast.ImportFrom) for a in n.names}
        assert rel == "verify/policy.py" or "STOCK_POLICY" not in names, rel
    assert {mode: mode_policy(mode) for mode in MODES} == {
        "compile": None, "prebuilt": STOCK_POLICY, "precompiled": STOCK_POLICY}
    assert mode_policy("from-a-newer-edgevllm") is None and mode_policy(None) is None


def render(spec_overrides: dict, out: Path) -> tuple[str, dict]:
    render_to(load_spec("thor", overrides=spec_overrides), out)
    return (out / "Dockerfile").read_text(), json.loads((out / "build-plan.json").read_text())


def check_plan(name: str, dockerfile: str, plan: dict) -> None:
    """What the plan passes is what its record says, and every stage finds what it names."""
    record = mode_record(name)
    assert plan["mode"] == name and tuple(plan["stages"]) == record.stages
    assert set(plan["contexts"]) - SHARED - TREE == set(record.contexts), name
    assert ("vllm-src" in plan["contexts"]) == record.tree, name
    stages = set(re.findall(r"(?m)^FROM .* AS (\S+)$", dockerfile))
    named = set(re.findall(r"--from=([\w.-]+)", dockerfile))
    assert named <= stages | set(plan["contexts"]), f"{name}: {named - stages - set(plan)}"


@pytest.mark.parametrize("name", sorted(MODES))
def test_each_modes_plan_passes_what_its_record_says(name, tmp_path):
    dockerfile, plan = render({"mode": name}, tmp_path / "out")
    check_plan(name, dockerfile, plan)


@pytest.fixture
def nightly(tmp_path, monkeypatch):
    """A fourth mode, a copy of prebuilt named nightly, registered here only: its module and its
    record in a folder of this test's, its template in a copy of the project's data (symlinks
    and one new file), its line in MODES."""
    folder = tmp_path / "modes"
    folder.mkdir()
    source = (PACKAGE / "builder" / "modes" / "prebuilt.py").read_text()
    assert source.count('name = "prebuilt"') == 1
    (folder / "nightly.py").write_text(source.replace('name = "prebuilt"', 'name = "nightly"'))
    shutil.copy(PACKAGE / "builder" / "modes" / "prebuilt.yaml", folder / "nightly.yaml")
    home = tmp_path / "home"
    (home / "dockerfiles").mkdir(parents=True)
    for entry in project_root().iterdir():
        if entry.name != "dockerfiles" and not entry.name.startswith("."):
            (home / entry.name).symlink_to(entry)
    for template in templates_dir().iterdir():
        (home / "dockerfiles" / template.name).symlink_to(template)
    shutil.copy(templates_dir() / "prebuilt.Dockerfile.j2",
                home / "dockerfiles" / "nightly.Dockerfile.j2")
    monkeypatch.setenv("EDGEVLLM_HOME", str(home))
    monkeypatch.setattr(moderecord, "RECORD_DIRS", (*moderecord.RECORD_DIRS, folder))
    found = importlib.util.spec_from_file_location("edgevllm_test_nightly", folder / "nightly.py")
    assert found is not None and found.loader is not None
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    monkeypatch.setitem(MODES, "nightly", module)
    return module


def test_a_fourth_mode_is_one_module_one_record_one_template_one_line(nightly, tmp_path):
    """The way it failed: a copy of prebuilt registered in the documented places rendered the
    compile toolchain into its runtime image, asked 60 GB instead of 25, passed a ``wheels``
    context its plan never made, and was gated differently at build time than in inv verify."""
    dockerfile, plan = render({"mode": "nightly"}, tmp_path / "nightly")
    check_plan("nightly", dockerfile, plan)
    installs = " ".join(re.findall(r"apt-get install[^\n]*", dockerfile))
    assert installs and not [p for p in TOOLCHAIN if re.search(rf"(?<![\w.-]){p}\b", installs)]
    assert "from=wheels" not in dockerfile and "wheels" not in plan["contexts"]
    prebuilt_file, prebuilt_plan = render({"mode": "prebuilt"}, tmp_path / "prebuilt")
    assert dockerfile.replace("nightly", "prebuilt") == prebuilt_file  # the image prebuilt makes
    assert set(plan["contexts"]) == set(prebuilt_plan["contexts"])
    eff = resolve(load_spec("thor", overrides={"mode": "nightly"}))
    assert disk_gb(eff) == eff.target.prebuilt.min_disk_gb == 25
    assert mode_policy("nightly") == mode_policy("prebuilt") == STOCK_POLICY  # build = verify
    assert Lock(target="thor", mode="nightly").mode == "nightly"  # a lock may record it
    assert modes.MODES["nightly"] is nightly
    assert comparisons(set(MODES)) == []  # nothing else had to learn its name


def test_a_mode_without_a_record_is_refused_where_it_is_named():
    with pytest.raises(SpecError, match="field 'mode'"):
        load_spec("thor", overrides={"mode": "nightly"})
