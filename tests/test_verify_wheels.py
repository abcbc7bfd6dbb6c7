"""Verify on the real aarch64 wheels from PyPI (downloaded once, cached; a failed download fails
the test and says what to fetch): vLLM 0.33.0 / 0.23.0, torch 2.14.0, flashinfer-cubin 0.6.13,
bitsandbytes 0.50.2 (CUDA 11.8-12.8 builds: cubin ELF ABI 7; relocatable device code).

Whole-wheel verdicts come from ``wheel_verdict`` (cached on disk by wheel and verify sources),
so these tests stay fast after the first run; the cuobjdump cross-check over the vLLM wheel is
in tests/e2e/test_verify_wheels_e2e.py.
"""

from __future__ import annotations

import os
import shutil
import zipfile
from pathlib import Path

import pytest

from edgevllm.specs.cuda import CudaArch
from edgevllm.verify import verify
from edgevllm.verify.cuobjdump import expected_listing, run_cuobjdump
from edgevllm.verify.diff import compare
from edgevllm.verify.elf import cubin_sm
from edgevllm.verify.library import inspect_buffer
from edgevllm.verify.report import level_cell
from support.cuda_libs import (
    BITSANDBYTES,
    FLASHINFER_CUBIN,
    TORCH_214,
    VLLM_023,
    VLLM_033,
    cuobjdump_binary,
    real_wheel,
    wheel_verdict,
)
from support.downloads import file_lock
from support.downloads import test_cache_dir as cache_dir


def _by_path(verdict) -> dict:
    return {lib.report.path: lib for lib in verdict.libraries}


def _counts(lib) -> dict:
    return {level: n for level, n in lib.coverage.counts.items() if n}


VLLM_033_UNITS = {  # (target, library) → units by level, as parsed and agreed with cuobjdump
    ("spark", "vllm/_C_stable_libtorch.abi3.so"): {"compatible": 85, "ptx-jit": 6, "none": 18},
    ("spark", "vllm/_moe_C_stable_libtorch.abi3.so"): {"compatible": 27, "ptx-jit": 1},
    ("spark", "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so"): {"ptx-jit": 76},
    ("spark", "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so"): {"none": 192},
    ("thor", "vllm/_C_stable_libtorch.abi3.so"): {"native": 70, "ptx-jit": 20, "none": 19},
    ("thor", "vllm/_moe_C_stable_libtorch.abi3.so"): {"native": 8, "ptx-jit": 15, "none": 5},
    ("thor", "vllm/_flashmla_C.abi3.so"): {"none": 53},
}


@pytest.mark.parametrize("target,path", sorted(VLLM_033_UNITS))
def test_vllm_033_units_per_library(target, path):
    lib = _by_path(wheel_verdict(VLLM_033, target))[path]
    assert _counts(lib) == VLLM_033_UNITS[(target, path)]


def test_vllm_033_on_spark_says_why_each_library_falls_short():
    verdict = wheel_verdict(VLLM_033, "spark")
    libs = _by_path(verdict)
    core = libs["vllm/_C_stable_libtorch.abi3.so"]
    cell = level_cell(core)
    assert cell.startswith("compatible (85/109; 24 sm_90a/"), cell
    assert "cutlass_3x_gemm_sm90" in cell, cell
    assert core.coverage.empty == 2  # 111 containers; 2 hold no kernel at all
    assert not core.passed and core.reason == "109/109 units below native"
    sm90 = [unit for unit in core.coverage.short if unit.arches == ["sm_90a"]]
    assert sm90 and any("sm90" in kernel for unit in sm90 for kernel in unit.kernels)
    named = [k for unit in core.coverage.short for k in unit.kernels]
    assert any(k.startswith("void ") and "(" in k for k in named), "kernel names are demangled"
    assert libs["vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so"].passed  # PTX JIT is enough for FA2
    assert libs["vllm/_flashmla_C.abi3.so"].mode == "report"  # optional, arch-specific by design
    assert verdict.scanned == 13 and not verdict.passed


def test_diff_vllm_023_to_033_for_spark():
    diff = compare("spark", wheel_verdict(VLLM_023, "spark"), wheel_verdict(VLLM_033, "spark"))
    changes = {c.path: (c.old is None, c.new is None) for c in diff.changes}
    assert changes["vllm/_C.abi3.so"] == (False, True)  # removed: _C became _C_stable_libtorch
    assert changes["vllm/_moe_C_stable_libtorch.abi3.so"] == (True, False)  # added
    assert changes["vllm/_C_stable_libtorch.abi3.so"] == (False, False)  # 65 → 111 units
    assert "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so" not in changes  # sm_90a-only both times


def test_torch_wheel_itself():
    for target, level in (("thor", "native"), ("spark", "compatible")):
        lib = _by_path(wheel_verdict(TORCH_214, target))["torch/lib/libtorch_cuda.so"]
        assert (lib.rule, lib.level, lib.passed) == ("torch", level, True)
        assert lib.coverage.total == 475


def _libtorch_cuda() -> Path:
    """torch/lib/libtorch_cuda.so taken out of the wheel once (461 MB), cached."""
    wheel = real_wheel(TORCH_214)
    folder = cache_dir("verify-members", wheel.name)
    out = folder / "libtorch_cuda.so"
    with file_lock(folder / ".lock"):
        if not out.is_file():
            tmp = folder / ".libtorch_cuda.so.tmp"
            with zipfile.ZipFile(wheel) as archive, archive.open("torch/lib/libtorch_cuda.so") \
                    as src, open(tmp, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            os.replace(tmp, out)
    return out


def _place(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:  # another filesystem: a copy is the same file for the scanner
        shutil.copyfile(source, target)


@pytest.mark.parametrize("layout", [
    "torch/lib",  # the unzipped wheel
    "lib/python3.12/site-packages/torch/lib",  # a venv, --path at its root
    "vllm/.venv/lib/python3.12/site-packages/torch/lib",  # a venv inside a vLLM checkout
])
def test_libtorch_cuda_is_gated_in_every_layout(tmp_path, layout):
    _place(_libtorch_cuda(), tmp_path / layout / "libtorch_cuda.so")
    verdict = verify("thor", path=tmp_path)
    (lib,) = verdict.libraries
    assert (lib.rule, lib.mode, lib.level, lib.passed) == ("torch", "coverage", "native", True)
    assert verdict.passed


def test_flashinfer_cubins_are_scanned_and_fail_on_thor():
    verdict = wheel_verdict(FLASHINFER_CUBIN, "thor")
    (lib,) = verdict.libraries
    assert lib.report.path == "flashinfer_cubin/**/*.cubin" and lib.rule == "flashinfer"
    assert verdict.scanned == lib.coverage.total == lib.coverage.counts["none"] == 15970
    assert not verdict.passed and lib.reason == "0/15970 units reach compatible"
    assert set(lib.report.arches("sass")) <= {"sm_100", "sm_100a", "sm_100f", "sm_103",
                                              "sm_103a", "sm_103f"}


def _bnb_member(name: str) -> bytes:
    with zipfile.ZipFile(real_wheel(BITSANDBYTES)) as archive:
        return archive.read(f"bitsandbytes/{name}")


def test_cuda12_cubins_read_with_elf_abi_7():
    """CUDA <= 12.x cubins keep the SM in e_flags' low byte (ABI 7); they are not 'corrupt'."""
    data = _bnb_member("libbitsandbytes_cuda121.so")
    report = inspect_buffer("libbitsandbytes_cuda121.so", data, CudaArch(12, 1))
    assert report.status == "ok" and report.arches("sass") == ["sm_75", "sm_80", "sm_90"]
    plain = [e for e in report.entries if e.kind == "sass" and e.compression == "none"]
    assert plain, "expected uncompressed cubins in the CUDA 12.1 build"
    for entry in plain:
        cubin = data[entry.offset:entry.offset + entry.stored_size]
        assert cubin[8] == 7 and cubin_sm(cubin) == entry.sm


def test_relocatable_fatbins_agree_with_cuobjdump_all(tmp_path, monkeypatch):
    library = tmp_path / "libbitsandbytes_cuda130.so"
    library.write_bytes(_bnb_member(library.name))
    report = inspect_buffer(library.name, library.read_bytes())
    assert any(e.section == "__nv_relfatbin" for e in report.entries)
    binary = cuobjdump_binary()
    assert run_cuobjdump(binary, library, relocatable=True) == expected_listing(report.entries)
    assert run_cuobjdump(binary, library) != expected_listing(report.entries)  # why -all matters
    monkeypatch.setenv("EDGEVLLM_CUOBJDUMP", str(binary))
    verdict = verify("thor", path=library, cuobjdump=True)
    assert verdict.cuobjdump_checked and not [lib.note for lib in verdict.libraries if lib.note]
