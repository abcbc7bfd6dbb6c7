"""The flashinfer-sm121 mod against the real flashinfer-python wheels from PyPI.

0.6.9 (dense_blockscaled_gemm_sm120.py, gate ``!= "sm_120"``), 0.6.11 (renamed
dense_blockscaled_gemm_sm120_b12x.py, same gate), 0.6.12 (upstream admits sm_121) and 0.6.14
(no gate). Importing the kernel module needs torch and a GPU, so "does what the fix intends" is
checked by evaluating the installed file's real gate condition (its AST) with sm_121.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from support.modenv import outcome, site_with, stage_and_apply, step_outcomes, wheel, working_copy


def flashinfer_site(version: str) -> Path:
    return site_with(f"flashinfer-{version}", [wheel(f"flashinfer-python=={version}",
                                                    platform=False)])


def kernel_file(site: Path) -> Path:
    return next(site.glob("flashinfer/gemm/kernels/dense_blockscaled_gemm_sm120*.py"))


def gate_rejects(path: Path, sm_version: str) -> bool:
    """Evaluate every ``if <sm_version test>: raise ValueError`` in the file for ``sm_version``."""
    gates = [n.test for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.If)
             and "sm_version" in ast.unparse(n.test) and "ValueError" in ast.unparse(n)]
    assert gates, f"no sm_version gate in {path}"
    return any(eval(compile(ast.Expression(g), str(path), "eval"), {}, {"sm_version": sm_version})
               for g in gates)


@pytest.mark.parametrize("version,name", [
    ("0.6.9", "dense_blockscaled_gemm_sm120.py"),
    ("0.6.11", "dense_blockscaled_gemm_sm120_b12x.py"),
])
def test_applied_then_unchanged_and_gate_admits_sm121(version, name, tmp_path):
    site = working_copy(flashinfer_site(version), tmp_path / "site")
    path = kernel_file(site)
    assert path.name == name and gate_rejects(path, "sm_121")
    rc, record, _, _ = stage_and_apply(["flashinfer-sm121"], "spark", site, tmp_path)
    assert record is not None
    mod = outcome(record, "flashinfer-sm121")
    assert rc == 0 and mod["outcome"] == "applied", mod
    # exactly one of the two file-name steps applies, the other names the version it skips
    assert sorted(step_outcomes(mod)[:2]) == ["applied", "not-applicable"]
    assert mod["steps"][2]["detail"] == f"{name}: sm_version gate admits sm_121"
    assert not gate_rejects(path, "sm_121") and gate_rejects(path, "sm_100")
    before = path.read_bytes()
    rc, record, _, _ = stage_and_apply(["flashinfer-sm121"], "spark", site, tmp_path)
    assert record is not None
    assert outcome(record, "flashinfer-sm121")["outcome"] == "already-applied"
    assert path.read_bytes() == before


@pytest.mark.parametrize("version", ["0.6.12", "0.6.14"])
def test_not_applicable_where_upstream_fixed(version, tmp_path):
    site = working_copy(flashinfer_site(version), tmp_path / "site")
    path = kernel_file(site)
    if version == "0.6.12":
        assert not gate_rejects(path, "sm_121")  # upstream admits sm_121 itself
    rc, record, _, _ = stage_and_apply(["flashinfer-sm121"], "spark", site, tmp_path)
    assert record is not None
    mod = outcome(record, "flashinfer-sm121")
    assert rc == 0 and mod["outcome"] == "not-applicable"
    assert mod["detail"] == f"flashinfer-python {version} is outside >=0.6.9,<0.6.12"


def test_altered_file_fails(tmp_path):
    site = working_copy(flashinfer_site("0.6.11"), tmp_path / "site")
    path = kernel_file(site)
    text = path.read_text().replace('if sm_version != "sm_120":', 'if sm_version not in SM12X:')
    path.unlink()
    path.write_text(text)
    rc, record, _, stderr = stage_and_apply(["flashinfer-sm121"], "spark", site, tmp_path)
    assert record is not None
    mod = outcome(record, "flashinfer-sm121")
    assert rc == 1 and mod["outcome"] == "failed"
    assert mod["detail"].startswith("mod flashinfer-sm121: flashinfer-python 0.6.11: file ")
    assert "dense_blockscaled_gemm_sm120_b12x.py: missing anchor" in mod["detail"]
    assert "if sm_version != \"sm_120\":" in mod["detail"]
