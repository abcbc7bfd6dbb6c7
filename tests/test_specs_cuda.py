"""The one owner of CUDA compatibility rules (edgevllm.specs.cuda), pinned for every arch variant
from sm_75 to sm_121f against every target in targets/*.yaml, plus the arch spellings accepted."""

from __future__ import annotations

import pytest

from edgevllm.common.errors import UnknownTargetError
from edgevllm.specs import cuda
from edgevllm.specs.targets import all_targets, resolve_cuda_target

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
    assert cuda.level(cuda.parse_code(code), device) == PINNED[target].get(code, "none")


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
