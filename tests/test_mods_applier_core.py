"""The applier's own machinery: stdlib-only operation, version ranges without ``packaging``,
unified diffs, file/symlink steps, the record, and that the plan folder is never written to.

A tiny real distribution (a folder with a dist-info RECORD, as pip writes it) stands in for an
installed package here; the real packages are exercised in tests/test_applier_*.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from edgevllm.mods import inimage_applier as applier

MODULE = """class Gate:
    allowed = ["a"]

    def check(self, x):
        if x != "a":
            raise ValueError(x)
"""


def make_dist(site: Path, name: str = "demo-pkg", version: str = "1.2.0") -> Path:
    pkg = site / "demo_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "gate.py").write_text(MODULE)
    info = site / f"demo_pkg-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text(
        f"demo_pkg/__init__.py,,\ndemo_pkg/gate.py,,\ndemo_pkg-{version}.dist-info/METADATA,,\n"
    )
    return pkg / "gate.py"


DIFF = """--- a/demo_pkg/gate.py
+++ b/demo_pkg/gate.py
@@ -1,2 +1,2 @@
 class Gate:
-    allowed = ["a"]
+    allowed = ["a", "b"]
@@ -4,3 +4,3 @@
     def check(self, x):
-        if x != "a":
+        if x not in ("a", "b"):
             raise ValueError(x)
"""


def write_plan(stage: Path, mods: list[dict]) -> Path:
    stage.mkdir(parents=True, exist_ok=True)
    (stage / "inimage_applier.py").write_bytes(Path(applier.__file__).read_bytes())
    (stage / "plan.json").write_text(json.dumps({"format": 1, "target": "thor", "mods": mods}))
    return stage / "plan.json"


def run(plan: Path, site: Path, *extra: str, isolated: bool = False):
    flags = ["-I", "-S"] if isolated else []  # -S: no site-packages, so no packaging, no pip
    argv = [
        sys.executable,
        *flags,
        str(plan.parent / "inimage_applier.py"),
        "apply",
        "--plan",
        str(plan),
        "--site-packages",
        str(site),
        *extra,
    ]
    return subprocess.run(argv, capture_output=True, text=True)


def diff_mod(spec: str = ">=1.0,<2") -> dict:
    return {
        "name": "demo",
        "version": "1",
        "applies_to": {"demo-pkg": spec},
        "steps": [
            {
                "kind": "edit",
                "packages": ["demo-pkg"],
                "path": "demo_pkg/gate.py",
                "diff": "demo/gate.diff",
            },
            {
                "kind": "verify",
                "python": "from demo_pkg.gate import Gate; Gate().check('b'); print('b admitted')",
            },
        ],
    }


@pytest.mark.parametrize(
    "spec,version,expected",
    [
        (">=4.4,<4.5", "4.4.2", True),
        (">=4.4,<4.5", "4.5.0", False),
        ("<4.6", "4.5.3", True),
        ("==0.6.*", "0.6.11", True),
        ("!=0.6.9", "0.6.9", False),
        ("~=0.6.9", "0.6.12", True),
        ("~=0.6.9", "0.7.0", False),
        (">=0.6.9,<0.6.12", "0.6.11.post1", True),
        ("", "1", True),
    ],
)
def test_fallback_specifiers_agree_with_packaging(spec, version, expected):
    assert applier._fallback_contains(spec, version) is expected
    assert applier.version_in(spec, version) is expected


def test_stdlib_only_diff_applied_then_unchanged_and_plan_untouched(tmp_path):
    site = tmp_path / "site"
    gate = make_dist(site)
    plan = write_plan(tmp_path / "stage", [diff_mod()])
    (tmp_path / "stage" / "demo").mkdir()
    (tmp_path / "stage" / "demo" / "gate.diff").write_text(DIFF)
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "stage").rglob("*")}
    record = tmp_path / "out" / "mods.json"
    proc = run(plan, site, "--record", str(record), isolated=True)
    assert proc.returncode == 0, proc.stderr
    assert 'allowed = ["a", "b"]' in gate.read_text()
    data = json.loads(record.read_text())
    assert data["mods"][0]["outcome"] == "applied" and data["ok"] is True
    assert data["mods"][0]["steps"][1]["detail"] == "b admitted"
    assert "edgevllm.mods=demo=applied" in proc.stdout
    assert sorted(p.name for p in record.parent.iterdir()) == ["mods.json"]  # atomic, no temps
    again = run(plan, site, "--record", str(record), isolated=True)
    assert json.loads(record.read_text())["mods"][0]["outcome"] == "already-applied", again.stderr
    after = {p: p.stat().st_mtime_ns for p in (tmp_path / "stage").rglob("*")}
    assert before == after  # the (read-only in a build) plan folder was never written


def test_diff_that_does_not_fit_fails_and_range_miss_names_version(tmp_path):
    site = tmp_path / "site"
    gate = make_dist(site)
    gate.write_text(MODULE.replace('["a"]', '["a", "z"]'))
    plan = write_plan(tmp_path / "stage", [diff_mod(), dict(diff_mod(">=2"), name="later")])
    (tmp_path / "stage" / "demo").mkdir()
    (tmp_path / "stage" / "demo" / "gate.diff").write_text(DIFF)
    proc = run(plan, site, "--record", str(tmp_path / "r.json"))
    data = json.loads((tmp_path / "r.json").read_text())
    assert proc.returncode == 1
    assert data["mods"][0]["outcome"] == "failed"
    assert data["mods"][0]["detail"].startswith("mod demo: demo-pkg 1.2.0: file ")
    assert (
        "gate.py: diff hunk does not match: 'class Gate: allowed = [\"a\"]'"
        in data["mods"][0]["detail"]
    )
    assert data["mods"][1]["outcome"] == "not-applicable"
    assert data["mods"][1]["detail"] == "demo-pkg 1.2.0 is outside >=2"
    assert proc.stderr.strip().splitlines()[-1].startswith("error: mod demo: demo-pkg 1.2.0")


def test_unknown_mod_in_plan_is_one_line(tmp_path):
    plan = write_plan(tmp_path / "stage", [diff_mod()])
    proc = run(plan, tmp_path, "--mod", "nope")
    assert proc.returncode != 0
    assert proc.stderr.strip() == "error: unknown mod 'nope' (the plan has: demo)"


def test_files_symlink_and_in_class_anchor(tmp_path):
    site = tmp_path / "site"
    gate = make_dist(site)
    stage = tmp_path / "stage"
    (stage / "m" / "data").mkdir(parents=True)
    (stage / "m" / "data" / "x.json").write_text("{}")
    mod = {
        "name": "m",
        "version": "1",
        "steps": [
            {
                "kind": "files",
                "source": "m/data",
                "package": "demo-pkg",
                "package_path": "demo_pkg/cfg",
            },
            {"kind": "symlink", "link": str(tmp_path / "links" / "gate.py"), "target": str(gate)},
            {
                "kind": "edit",
                "packages": ["demo-pkg"],
                "path": "gate.py",
                "replacements": [
                    {
                        "in_class": "Gate",
                        "anchor": '    allowed = ["a"]\n',
                        "replacement": '    allowed = ["a", "c"]\n',
                    }
                ],
            },
        ],
    }
    plan = write_plan(stage, [mod])
    proc = run(plan, site, "--record", str(tmp_path / "r.json"))
    assert proc.returncode == 0, proc.stderr
    assert (site / "demo_pkg" / "cfg" / "x.json").read_text() == "{}"
    assert os.readlink(tmp_path / "links" / "gate.py") == str(gate)
    assert '["a", "c"]' in gate.read_text()
    run(plan, site, "--record", str(tmp_path / "r.json"))
    assert json.loads((tmp_path / "r.json").read_text())["mods"][0]["outcome"] == "already-applied"


def test_anchor_found_twice_is_ambiguous():
    with pytest.raises(applier.StepFailed, match="anchor found 2 times, expected 1"):
        applier.plan_replacements("x\nx\n", [{"anchor": "x\n", "replacement": "y\n"}], "f.py")


def test_applier_is_python_310_stdlib_only(tmp_path):
    """The applier promises Python 3.10+ with the stdlib only (older images). No 3.10 interpreter
    is installable here, so the grammar is checked against 3.10 and the script is run isolated
    (-I -S: no site-packages, so only the stdlib can be imported)."""
    import ast

    source = Path(applier.__file__).read_text()
    ast.parse(source, feature_version=(3, 10))
    site = tmp_path / "site"
    gate = make_dist(site)
    plan = write_plan(tmp_path / "stage", [diff_mod()])
    (tmp_path / "stage" / "demo").mkdir()
    (tmp_path / "stage" / "demo" / "gate.diff").write_text(DIFF)
    proc = run(plan, site, isolated=True)
    assert proc.returncode == 0, proc.stderr
    assert "demo  applied" in proc.stdout and '"b"' in gate.read_text()
