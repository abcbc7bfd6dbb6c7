"""The cutlass-dsl mods against the real nvidia-cutlass-dsl wheels from PyPI.

Versions on both sides of each fix: 4.4.2 (GB10 gate, libs-base/libs-cu13 overlap, old layout),
4.5.0 (GB10 fixed, Thor gates not), 4.6.0 (Thor fixed, new ``dsl_packages`` layout). The patched
package is really imported (cutlass-dsl imports without a GPU when cuda-bindings is present) and
the gated ops are constructed with ``CUTE_DSL_ARCH`` set to the device's arch: the same check
that raised ``OpError`` on the devices. 4.6.0's native IR library cannot load without a CUDA
driver, so there upstream's own gates are read statically from the installed files.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from support.modenv import (
    cuda_bindings_wheels,
    outcome,
    site_with,
    stage_and_apply,
    step_outcomes,
    wheel,
    working_copy,
)

GB10_PROBE = """
import cutlass
from cutlass.cute.nvgpu import warp
warp.MmaMXF4NVF4Op(cutlass.Float4E2M1FN, cutlass.Float32, cutlass.Float8E4M3FN)
print("accepted")
"""
THOR_PROBE = """
import cutlass
from cutlass.cute.nvgpu import tcgen05
tcgen05.MmaMXF4NVF4Op(cutlass.Float8E4M3FN, (128, 128, 64), tcgen05.CtaGroup.ONE,
                      tcgen05.OperandSource.SMEM)
tcgen05.Cp4x32x128bOp(tcgen05.CtaGroup.ONE)
print("accepted")
"""


@pytest.fixture(scope="module")
def cutlass_442() -> Path:
    """4.4.2 with libs-base and libs-cu13 both installed: the overlap users hit."""
    return site_with(
        "cutlass-4.4.2-base-cu13",
        [
            wheel("nvidia-cutlass-dsl==4.4.2", platform=False),
            wheel("nvidia-cutlass-dsl-libs-cu13==4.4.2"),
            wheel("nvidia-cutlass-dsl-libs-base==4.4.2"),
            *cuda_bindings_wheels(),
        ],
    )


@pytest.fixture(scope="module")
def cutlass_450() -> Path:
    return site_with(
        "cutlass-4.5.0-cu13",
        [
            wheel("nvidia-cutlass-dsl==4.5.0", platform=False),
            wheel("nvidia-cutlass-dsl-libs-cu13==4.5.0"),
            *cuda_bindings_wheels(),
        ],
    )


@pytest.fixture(scope="module")
def cutlass_460() -> Path:
    return site_with(
        "cutlass-4.6.0-core",
        [
            wheel("nvidia-cutlass-dsl==4.6.0", platform=False),
            wheel("nvidia-cutlass-dsl-libs-core==4.6.0", platform=False),
        ],
    )


def cu13_links() -> list[str]:
    """The wheelhouse the dist_files step takes the CUDA 13 copy from (hermetic, no index)."""
    return [
        "--pip-find-links",
        str(wheel("nvidia-cutlass-dsl-libs-cu13==4.4.2").parent),
        "--pip-no-index",
    ]


def probe(site: Path, code: str, arch: str) -> subprocess.CompletedProcess:
    prelude = f"import site; site.addsitedir({str(site)!r})\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + code],
        capture_output=True,
        text=True,
        env={"CUTE_DSL_ARCH": arch, "PATH": "/usr/bin:/bin"},
    )


def mma_file(site: Path, sub: str) -> Path:
    return next(site.glob(f"nvidia_cutlass_dsl/*_packages/cutlass/cute/nvgpu/{sub}"))


def test_gb10_442_applied_then_unchanged_and_op_accepts_sm121a(cutlass_442, tmp_path):
    site = working_copy(cutlass_442, tmp_path / "site")
    before = probe(site, GB10_PROBE, "sm_121a")
    assert "expects arch to be one of ['sm_120a'], but got Arch.sm_121a" in before.stderr
    assert "CuTeDSL" in mma_file(site, "warp/mma.py").read_text()  # libs-base's copy won

    rc, record, stdout, _ = stage_and_apply(
        ["cutlass-dsl-gb10"], "spark", site, tmp_path, cu13_links()
    )
    assert record is not None
    mod = outcome(record, "cutlass-dsl-gb10")
    assert rc == 0 and mod["outcome"] == "applied", mod
    assert step_outcomes(mod) == ["applied", "applied", "applied", "passed"]
    assert mod["packages"] == {
        "nvidia-cutlass-dsl": "4.4.2",
        "nvidia-cutlass-dsl-libs-base": "4.4.2",
        "nvidia-cutlass-dsl-libs-cu13": "4.4.2",
    }
    assert "cutlass-dsl-gb10  applied" in stdout
    text = mma_file(site, "warp/mma.py").read_text()
    assert "BaseDSL" in text and "CuTeDSL" not in text  # the CUDA 13 copy is installed now
    assert probe(site, GB10_PROBE, "sm_121a").stdout.strip() == "accepted"
    assert probe(site, GB10_PROBE, "sm_100a").returncode != 0  # still a gate
    assert (tmp_path / "out" / "mods.env").read_text() == "CUTE_DSL_ARCH=sm_121a\n"

    snapshot = {p: p.stat().st_mtime_ns for p in site.rglob("*.py")}
    rc, record, _, _ = stage_and_apply(["cutlass-dsl-gb10"], "spark", site, tmp_path, cu13_links())
    assert rc == 0 and record is not None
    assert outcome(record, "cutlass-dsl-gb10")["outcome"] == "already-applied"
    assert snapshot == {p: p.stat().st_mtime_ns for p in site.rglob("*.py")}


def test_gb10_442_altered_file_fails_naming_mod_version_file_anchor(cutlass_442, tmp_path):
    site = working_copy(cutlass_442, tmp_path / "site")
    stage_and_apply(["cutlass-dsl-gb10"], "spark", site, tmp_path, cu13_links())  # cu13 copy in
    target = mma_file(site, "warp/mma.py")
    text = target.read_text()
    fresh = text.replace('        "sm_121a",  # edgevllm mod cutlass-dsl-gb10\n', "")
    fresh = fresh.replace(
        "if arch not in (Arch.sm_120a, Arch.sm_121a):  # edgevllm mod cutlass-dsl-gb10",
        "if arch != Arch.sm_120a:",
    )
    target.unlink()
    target.write_text(fresh)  # "upstream moved": the equality test was rewritten
    rc, record, _, stderr = stage_and_apply(
        ["cutlass-dsl-gb10"], "spark", site, tmp_path, cu13_links()
    )
    assert record is not None
    mod = outcome(record, "cutlass-dsl-gb10")
    assert rc == 1 and mod["outcome"] == "failed"
    line = stderr.strip().splitlines()[-1]
    assert line.startswith("error: mod cutlass-dsl-gb10: nvidia-cutlass-dsl 4.4.2: file ")
    assert "warp/mma.py: missing anchor in class MmaSM120BlockScaledOp" in line
    assert "if not arch == Arch.sm_120a:" in line
    assert record["ok"] is False


def test_gb10_450_not_applicable_names_version(cutlass_450, tmp_path):
    site = working_copy(cutlass_450, tmp_path / "site")
    assert probe(site, GB10_PROBE, "sm_121a").stdout.strip() == "accepted"  # upstream fixed it
    rc, record, _, _ = stage_and_apply(["cutlass-dsl-gb10"], "spark", site, tmp_path)
    assert record is not None
    mod = outcome(record, "cutlass-dsl-gb10")
    assert rc == 0 and mod["outcome"] == "not-applicable"
    assert "nvidia-cutlass-dsl 4.5.0 is outside <4.5" in mod["detail"]


def test_thor_450_applied_unchanged_and_ops_accept_sm110a(cutlass_450, tmp_path):
    site = working_copy(cutlass_450, tmp_path / "site")
    assert "expects arch to be one of" in probe(site, THOR_PROBE, "sm_110a").stderr
    rc, record, _, _ = stage_and_apply(["cutlass-dsl-thor"], "thor", site, tmp_path)
    assert record is not None
    mod = outcome(record, "cutlass-dsl-thor")
    assert rc == 0 and mod["outcome"] == "applied", mod
    # no libs-base installed: the overlap step does not apply, and says why
    assert mod["steps"][0]["outcome"] == "not-applicable"
    assert "nvidia-cutlass-dsl-libs-base is not installed" in mod["steps"][0]["detail"]
    assert probe(site, THOR_PROBE, "sm_110a").stdout.strip() == "accepted"
    rc, record, _, _ = stage_and_apply(["cutlass-dsl-thor"], "thor", site, tmp_path)
    assert record is not None
    assert outcome(record, "cutlass-dsl-thor")["outcome"] == "already-applied"


def test_thor_442_applied_with_overlap(cutlass_442, tmp_path):
    """With libs-base's copy winning, Thor even reads as sm_101a; the mod fixes both."""
    site = working_copy(cutlass_442, tmp_path / "site")
    assert "got Arch.sm_101a" in probe(site, THOR_PROBE, "sm_110a").stderr
    rc, record, _, _ = stage_and_apply(["cutlass-dsl-thor"], "thor", site, tmp_path, cu13_links())
    assert record is not None
    mod = outcome(record, "cutlass-dsl-thor")
    assert rc == 0 and step_outcomes(mod)[:3] == ["applied", "applied", "applied"], mod
    assert probe(site, THOR_PROBE, "sm_110a").stdout.strip() == "accepted"


def _class_list(path: Path, cls: str, attr: str) -> list[str]:
    tree = ast.parse(path.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    assign = next(
        n
        for n in node.body
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == attr
    )
    assert isinstance(assign.value, (ast.List, ast.Tuple)), f"{cls}.{attr} is no list"
    return [ast.unparse(e) for e in assign.value.elts]


def test_thor_460_not_applicable_and_upstream_admits_sm110a(cutlass_460, tmp_path):
    site = working_copy(cutlass_460, tmp_path / "site")
    mma = mma_file(site, "tcgen05/mma.py")
    assert "dsl_packages" in str(mma)  # the 4.6.0 layout
    assert "Arch.sm_110a" in _class_list(mma, "BlockScaledMmaOp", "admissible_archs")
    assert "Arch.sm_110f" in mma_file(site, "tcgen05/copy.py").read_text()
    rc, record, _, _ = stage_and_apply(["cutlass-dsl-thor"], "thor", site, tmp_path)
    assert record is not None
    mod = outcome(record, "cutlass-dsl-thor")
    assert rc == 0 and mod["outcome"] == "not-applicable"
    assert mod["detail"] == "nvidia-cutlass-dsl 4.6.0 is outside >=4.4,<4.6"


def test_gb10_460_not_applicable_and_files_found_in_new_layout(cutlass_460, tmp_path):
    """4.6.0 moved the sources to libs-core under dsl_packages/: found through the RECORD."""
    from edgevllm.mods.inimage_applier import Env

    site = working_copy(cutlass_460, tmp_path / "site")
    env = Env([str(site)], sys.executable, [], False, None)
    path, dist = env.locate(
        [
            "nvidia-cutlass-dsl-libs-cu13",
            "nvidia-cutlass-dsl-libs-base",
            "nvidia-cutlass-dsl-libs-core",
        ],
        "cutlass/cute/nvgpu/warp/mma.py",
    )
    assert dist.metadata["Name"] == "nvidia-cutlass-dsl-libs-core"
    assert path == site / "nvidia_cutlass_dsl/dsl_packages/cutlass/cute/nvgpu/warp/mma.py"
    assert "Arch.sm_121a" in _class_list(path, "MmaSM120BlockScaledOp", "admissible_archs")
    rc, record, _, _ = stage_and_apply(["cutlass-dsl-gb10"], "spark", site, tmp_path)
    assert record is not None
    mod = outcome(record, "cutlass-dsl-gb10")
    assert rc == 0 and mod["outcome"] == "not-applicable"
    assert mod["detail"] == "nvidia-cutlass-dsl 4.6.0 is outside >=4.4,<4.6"
