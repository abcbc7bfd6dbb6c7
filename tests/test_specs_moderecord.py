"""A build mode is one record (specs/moderecord.py reads ``builder/modes/<name>.yaml``): every
registered mode has its record and every record its mode; no module compares a mode's name to
a literal (the mode rule, specs/moderule.py, and the modes themselves ask the record too); each
mode's plan passes exactly what its record says; and two throwaway fourth modes (``nightly``, a
copy of prebuilt, and ``forge``, a copy of compile: one module, one record, one template, one
registry line each, all in this test) render the images their models render, list themselves in
``--mode``'s help, and accept or refuse each flag as their records say."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from edgevllm.builder import modes
from edgevllm.builder.modes import MODES
from edgevllm.builder.render import template_name
from edgevllm.builder.renderout import render_to
from edgevllm.builder.runner import disk_gb
from edgevllm.cli.flags import BUILD_FLAGS, help_for
from edgevllm.common.errors import SpecError
from edgevllm.common.paths import project_root, templates_dir
from edgevllm.specs import moderecord
from edgevllm.specs.buildspec import load_spec, resolve
from edgevllm.specs.lock import Lock
from edgevllm.specs.moderecord import ModeRecord, mode_record, mode_records
from edgevllm.specs.moderule import MODE_FIELDS, ModeField
from edgevllm.verify.policy import STOCK_POLICY, mode_policy

PACKAGE = Path(__file__).resolve().parents[1] / "edgevllm"
# Comparisons with a mode's word that are not about a build mode, each with its reason.
NOT_A_MODE = {("verify/firststart.py", "caches"): "FlashInfer's own state ('prebuilt' kernels)"}
TOOLCHAIN = ("git", "ccache", "build-essential", "cmake", "ninja-build")
SHARED = {"edgevllm-mods", "edgevllm-meta", "wheels"}        # every plan's, not a mode's own
# a tree's, a road's, a partial build's or a target's leave-out (builder/subset/plan.py)
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
        tree = ast.parse(path.read_text())
        owners = {id(n): f.name for f in ast.walk(tree)
                  if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in ast.walk(f)}
        for node in ast.walk(tree):
            where = owners.get(id(node), "<module>")
            if mode_literal(node, names) and (rel, where) not in NOT_A_MODE:
                found.append(f"{rel}:{getattr(node, 'lineno', 0)} {where}: {ast.unparse(node)}")
    return found


def test_no_module_compares_a_mode_to_a_literal():
    """Everywhere, the mode rule and the modes included, a mode is asked its record, never its
    name: a literal comparison is how a new mode silently became compile (or prebuilt)
    elsewhere, and how the rule refused --extensions to a compiling fourth mode."""
    assert comparisons(set(MODES)) == [], "ask the record (eff.record, mode_record(name)) instead"
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
    gates = {"stock": STOCK_POLICY, "default": None}  # the record's word -> the policy
    assert {mode: mode_policy(mode) for mode in MODES} == {
        name: gates[record.gate] for name, record in mode_records().items()}
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


# The throwaway modes: each a copy of a shipped one under a new name.
THROWAWAY = {"nightly": "prebuilt", "forge": "compile"}
# A value for each field that only some modes honour, and what shows in the render that it did.
GIVEN: dict[str, tuple[dict, str]] = {
    "vllm_wheel": ({"vllm_wheel": "0.20.2"}, "the locked closure of vllm 0.20.2"),
    "extensions": ({"extensions": ["cumem_allocator"]}, "EDGEVLLM_EXTENSIONS=cumem_allocator"),
    "flashinfer.source": ({"flashinfer": {"source": {"repo": "flashinfer-ai/flashinfer",
                                                     "ref": "v0.7.2"}}}, "AS flashinfer-build"),
}


@pytest.fixture
def throwaways(tmp_path, monkeypatch):
    """Two fourth modes (THROWAWAY), registered here only: each one's module and record in a
    folder of this test's, its template in a copy of the project's data (symlinks and one new
    file each), its line in MODES."""
    folder = tmp_path / "modes"
    folder.mkdir()
    home = tmp_path / "home"
    (home / "dockerfiles").mkdir(parents=True)
    for entry in project_root().iterdir():
        if entry.name != "dockerfiles" and not entry.name.startswith("."):
            (home / entry.name).symlink_to(entry)
    for template in templates_dir().iterdir():
        (home / "dockerfiles" / template.name).symlink_to(template)
    monkeypatch.setenv("EDGEVLLM_HOME", str(home))
    monkeypatch.setattr(moderecord, "RECORD_DIRS", (*moderecord.RECORD_DIRS, folder))
    made = {}
    for name, model in THROWAWAY.items():
        source = (PACKAGE / "builder" / "modes" / f"{model}.py").read_text()
        assert source.count(f'name = "{model}"') == 1
        (folder / f"{name}.py").write_text(source.replace(f'name = "{model}"', f'name = "{name}"'))
        shutil.copy(PACKAGE / "builder" / "modes" / f"{model}.yaml", folder / f"{name}.yaml")
        shutil.copy(templates_dir() / template_name(model),
                    home / "dockerfiles" / template_name(name))
        found = importlib.util.spec_from_file_location(f"edgevllm_test_{name}",
                                                       folder / f"{name}.py")
        assert found is not None and found.loader is not None
        module = importlib.util.module_from_spec(found)
        monkeypatch.setitem(sys.modules, found.name, module)  # a dataclass looks itself up
        found.loader.exec_module(module)
        monkeypatch.setitem(MODES, name, module)
        made[name] = module
    return made


def test_a_fourth_mode_is_one_module_one_record_one_template_one_line(throwaways, tmp_path):
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
    assert modes.MODES["nightly"] is throwaways["nightly"]
    assert comparisons(set(MODES)) == []  # nothing else had to learn its name
    assert help_for(BUILD_FLAGS)["mode"].startswith("compile | forge | nightly | prebuilt")


def field(name: str) -> ModeField:
    return next(f for f in MODE_FIELDS if f.field == name)


@pytest.mark.parametrize("name", sorted(THROWAWAY))
@pytest.mark.parametrize("given", sorted(GIVEN))
def test_a_fourth_mode_takes_or_refuses_each_flag_as_its_record_says(throwaways, tmp_path,
                                                                    name, given):
    """The way it failed: the rule decided by name what a mode accepts, so a compiling fourth
    mode refused --extensions and took --vllm-wheel then ignored it without a word. Now what a
    copy of compile or of prebuilt takes, it renders as its model does (the flag's mark in the
    render); what it cannot honour is one line naming the field, and nothing is written."""
    model, (fields, mark) = THROWAWAY[name], GIVEN[given]
    honoured = field(given).honoured(mode_record(name))
    assert honoured == field(given).honoured(mode_record(model))
    assert honoured == {"forge": given != "vllm_wheel", "nightly": given == "vllm_wheel"}[name]
    if not honoured:
        with pytest.raises(SpecError) as refused:
            render({"mode": name, **fields}, tmp_path / name)
        assert str(refused.value).startswith(f"field '{given}' ")
        assert str(refused.value).endswith(f"not {name}") and "\n" not in str(refused.value)
        assert not (tmp_path / name).exists()
        return
    dockerfile, plan = render({"mode": name, **fields}, tmp_path / name)
    check_plan(name, dockerfile, plan)
    assert mark in dockerfile + json.dumps(plan["contexts"])
    model_file, model_plan = render({"mode": model, **fields}, tmp_path / model)
    assert dockerfile.replace(name, model) == model_file
    assert plan["contexts"] == model_plan["contexts"]


def test_a_mode_without_a_record_is_refused_where_it_is_named():
    with pytest.raises(SpecError, match="field 'mode'"):
        load_spec("thor", overrides={"mode": "nightly"})
