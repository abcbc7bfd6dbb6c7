"""The one owner of CUDA compatibility rules (edgevllm.specs.cuda), pinned for every arch variant
from sm_75 to sm_121f against every target in targets/*.yaml, plus the arch spellings accepted."""

from __future__ import annotations

import pytest

from edgevllm.common.errors import UnknownTargetError
from edgevllm.specs import cuda
from edgevllm.specs.targets import all_targets, resolve_cuda_target
from support.checks import present
from support.cuda_libs import nvcc_lib

SMS = (75, 80, 86, 87, 89, 90, 100, 103, 110, 120, 121)
# Every code arch that runs on each device; all others must be "none".
PINNED = {
    "thor": {  # 11.0: only its own family; plain PTX up to 11.0 JIT-compiles
        **{f"sm_110{v}": "native" for v in ("", "a", "f")},
        **{f"compute_{sm}": "ptx-jit" for sm in SMS if sm <= 110},
        "compute_110a": "ptx-jit", "compute_110f": "ptx-jit",
    },
    "spark": {  # 12.1: 12.0 plain/family SASS runs, 12.0a does not
        **{f"sm_121{v}": "native" for v in ("", "a", "f")},
        "sm_120": "compatible", "sm_120f": "compatible",
        **{f"compute_{sm}": "ptx-jit" for sm in SMS},
        "compute_121a": "ptx-jit", "compute_120f": "ptx-jit", "compute_121f": "ptx-jit",
    },
}
ALL_CODES = [f"{prefix}_{sm}{v}" for prefix in ("sm", "compute") for sm in SMS
             for v in ("", "a", "f")]


def test_every_target_is_pinned():
    assert sorted(t.name for t in all_targets()) == sorted(PINNED)


@pytest.mark.parametrize("target", sorted(PINNED))
@pytest.mark.parametrize("code", ALL_CODES)
def test_level_of_every_variant_on_every_target(target, code):
    _, device = resolve_cuda_target(target)
    level = cuda.level(present(cuda.parse_code(code), code), device)
    assert level == PINNED[target].get(code, "none")


@pytest.mark.parametrize("text", ["sm_121a", "121a", "12.1a", "12.1", "SM_121", "compute_121f"])
def test_spark_spellings(text):
    assert cuda.parse_device(text) == cuda.CudaArch(12, 1)
    assert resolve_cuda_target(text) == (text, cuda.CudaArch(12, 1))


def test_thor_spellings_and_names():
    assert cuda.parse_device("sm_110") == cuda.parse_device("11.0a") == cuda.CudaArch(11, 0)
    assert resolve_cuda_target("thor")[1] == resolve_cuda_target("spark")[1].__class__(11, 0)


@pytest.mark.parametrize("text", ["twelve", "sm_", "1.2.3", "sm_121x"])
def test_bad_arch_text_is_an_unknown_target(text):
    with pytest.raises(cuda.ArchParseError):
        cuda.parse_device(text)
    with pytest.raises(UnknownTargetError):
        resolve_cuda_target(text)


def test_arch_list_coverage_picks_the_best_level():
    spark = cuda.CudaArch(12, 1)
    assert cuda.arch_list_coverage(spark, ["sm_90", "sm_120f", "compute_90"]) == \
        ("compatible", ["sm_120f"])
    assert cuda.arch_list_coverage(spark, ["sm_120a", "sm_100"]) == ("none", [])
    assert cuda.meets("compatible", "ptx-jit") and not cuda.meets("ptx-jit", "compatible")


# --- the kernel plan's words (CMake arch lists) -------------------------------------------------
@pytest.mark.parametrize("arch,device,kind", [
    ("12.1a", "12.1a", "native"),
    ("12.1f", "12.1a", "native"),   # SASS for exactly 12.1, family features only
    ("12.1", "12.1a", "native"),
    ("12.0a", "12.1a", "none"),     # sm_120a SASS does not run on GB10
    ("12.0f", "12.1a", "family"),
    ("12.0", "12.1a", "family"),
    ("11.0a", "11.0a", "native"),
    ("11.0f", "11.0a", "native"),
    ("8.0+PTX", "11.0a", "ptx"),
    ("12.1a+PTX", "12.0a", "none"),  # 'a' PTX is for exactly 12.1
    ("9.0a", "11.0a", "none"),
    ("twelve", "12.1a", "none"),
])
def test_arch_kind(arch, device, kind):
    assert cuda.arch_kind(arch, device) == kind


def test_best_kind_and_minimums():
    assert cuda.best_kind(["none", "ptx", "family"]) == "family"
    assert cuda.best_kind(["cpu", "none"]) == "none"
    assert cuda.best_kind([]) == "none"
    assert cuda.kind_meets("native", "family") and cuda.kind_meets("family", "family")
    assert not cuda.kind_meets("ptx", "family") and not cuda.kind_meets("cpu", "ptx")


# What the plan calls each arch, against what nvcc 13 emits for it and inv verify reads back from
# the built library: the plan and verify judge by one table.
PLAN_ARCHES = ["12.1f", "12.1a", "12.1", "12.0f", "12.0a", "12.0", "11.0f", "11.0a", "8.0+PTX",
               "12.1a+PTX"]


@pytest.mark.parametrize("arch", PLAN_ARCHES)
def test_plan_kind_is_verify_level_of_what_nvcc_emits(arch):
    from edgevllm.sources.plan import torch_gencode_flags
    from edgevllm.verify import scan_file
    from edgevllm.verify.compat import unit_levels

    entries = scan_file(nvcc_lib(tuple(torch_gencode_flags(arch).split()))).entries
    assert entries, f"nvcc emitted no device code for {arch}"
    for device in ("12.1a", "11.0a", "12.0a"):
        # the kernels' own unit: nvcc -shared adds a device-link unit holding SASS alone
        found = cuda.best(unit_levels(entries, cuda.parse_device(device)).values())
        assert cuda.arch_kind(arch, device) == cuda.KIND_OF_LEVEL[found], (arch, device)


def test_nvcc_13_writes_sm_121f_as_sass_for_exactly_12_1():
    """The 12.1f question, settled by the binary: the fatbin nvcc 13 writes for sm_121f holds
    SASS for SM 121 marked family-specific, so on GB10 it is native, on a later 12.x compatible
    (as the CUDA docs say of family-specific code) and on 12.0 none."""
    from edgevllm.verify import scan_file

    entries = scan_file(nvcc_lib(("-gencode", "arch=compute_121f,code=sm_121f"))).entries
    sass = [(e.sm, e.variant) for e in entries if e.kind == "sass"]
    assert sass and set(sass) == {(121, "f")}, sass
    codes = [cuda.CodeArch("sass", *cuda.split_sm(sm), variant) for sm, variant in sass]
    assert {cuda.level(c, cuda.CudaArch(12, 1)) for c in codes} == {"native"}
    assert {cuda.level(c, cuda.CudaArch(12, 3)) for c in codes} == {"compatible"}
    assert {cuda.level(c, cuda.CudaArch(12, 0)) for c in codes} == {"none"}
