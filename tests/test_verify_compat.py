"""Compatibility verdicts on real nvcc-built libraries, both ways, for Thor (11.0) and GB10 (12.1).

Also the policy file (gating by path, one-line errors) and target resolution from targets/*.yaml.
"""

from __future__ import annotations

import pytest

from edgevllm.common.errors import ConfigError, PolicyError, UnknownTargetError
from edgevllm.specs.targets import resolve_cuda_target as resolve_target
from edgevllm.verify import judge, load_policy, parse_arch, scan_file
from edgevllm.verify.compat import library_level
from edgevllm.verify.library import LibraryReport
from support.cuda_libs import aarch64_cuda_lib, nvcc_libs

THOR, SPARK = parse_arch("11.0a"), parse_arch("12.1a")


@pytest.mark.parametrize("name,thor,spark", [
    ("sm_110", "native", "none"),
    ("sm_110a", "native", "none"),
    ("sm_110f", "native", "none"),
    ("sm_121", "none", "native"),
    ("sm_121a", "none", "native"),
    ("sm_121f", "none", "native"),
    ("sm_120a", "none", "none"),  # arch-specific SASS: exactly 12.0 only, never GB10
    ("sm_120f", "none", "compatible"),  # family SASS runs on 12.1
    ("ptx_compute_110", "ptx-jit", "ptx-jit"),  # plain PTX JITs on any later device
    ("ptx_compute_121a", "none", "ptx-jit"),  # 'a' PTX only on exactly 12.1
    ("multi_gencode", "native", "native"),
    ("lz4", "native", "none"),
    ("uncompressed", "none", "native"),
    ("rdc.o", "native", "native"),
    ("mixed_tu", "none", "none"),  # one translation unit has only sm_90: it cannot run
])
def test_library_levels(name, thor, spark):
    entries = scan_file(nvcc_libs()[name]).entries
    assert (library_level(entries, THOR), library_level(entries, SPARK)) == (thor, spark)


def test_real_aarch64_library_levels():
    entries = scan_file(aarch64_cuda_lib()).entries
    assert library_level(entries, THOR) == "native"
    assert library_level(entries, SPARK) == "native"
    assert library_level(entries, parse_arch("12.2")) == "compatible"


def _as(path: str, name: str) -> LibraryReport:
    report = scan_file(nvcc_libs()[name])
    report.path = path
    return report


VLLM = "opt/venv/lib/python3.12/site-packages/vllm/_C.abi3.so"
TORCH = "opt/venv/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so"
FLASHINFER = "opt/venv/lib/python3.12/site-packages/flashinfer/data/libfi.so"


def test_gate_passes_native_and_compatible():
    reports = [_as(VLLM, "sm_121a"), _as(TORCH, "sm_120f"), _as(FLASHINFER, "sm_121f"),
               _as("usr/lib/libother.so", "sm_110a")]
    verdict = judge(reports, SPARK, load_policy(), source="test", target="spark")
    assert verdict.passed, verdict.summary()
    levels = {lib.report.path: (lib.rule, lib.level, lib.gated) for lib in verdict.libraries}
    assert levels[VLLM] == ("vllm", "native", True)
    assert levels[TORCH] == ("torch", "compatible", True)
    assert levels["usr/lib/libother.so"] == ("-", "none", False)  # reported only


def test_gate_fails_on_wrong_arch_both_ways():
    assert not judge([_as(VLLM, "sm_121a")], THOR, load_policy()).passed
    assert not judge([_as(VLLM, "sm_110a")], SPARK, load_policy()).passed
    assert not judge([_as(TORCH, "sm_120a")], SPARK, load_policy()).passed
    assert not judge([_as(VLLM, "sm_120f")], SPARK, load_policy()).passed  # vllm needs native


def test_corrupt_gated_library_fails_the_gate():
    report = LibraryReport(path=VLLM, size=10, status="corrupt: truncated ELF header")
    verdict = judge([report], SPARK, load_policy())
    assert not verdict.passed and verdict.libraries[0].level == "corrupt"


def test_policy_file_errors_are_one_line(tmp_path):
    bad = tmp_path / "policy.yaml"
    bad.write_text("rules:\n  - name: x\n    match: ['*.so']\n    require: fast\n")
    with pytest.raises(PolicyError, match=r"policy.yaml: field 'rules.0.require'") as info:
        load_policy(bad)
    assert "\n" not in str(info.value)
    bad.write_text("rules: [\n")
    with pytest.raises(PolicyError, match="not valid YAML"):
        load_policy(bad)


def test_custom_policy_gates_everything(tmp_path):
    strict = tmp_path / "strict.yaml"
    strict.write_text("rules: []\ndefault: native\n")
    verdict = judge([_as("usr/lib/libother.so", "sm_120f")], SPARK, load_policy(strict))
    assert not verdict.passed


def test_targets_resolve_from_yaml_and_arch_text():
    assert resolve_target("thor")[1] == THOR
    assert resolve_target("spark")[1] == SPARK
    assert resolve_target("12.1a") == ("12.1a", SPARK)
    with pytest.raises(UnknownTargetError):
        resolve_target("no-such-target")
    with pytest.raises(ConfigError):
        parse_arch("twelve")


def test_summary_dict_for_build_records():
    verdict = judge([_as(VLLM, "sm_110a")], SPARK, load_policy(), target="spark")
    record = verdict.summary_dict()
    assert record["passed"] is False and record["gated"] == 1
    assert record["failures"] == [{"path": VLLM, "level": "none", "note": ""}]


def test_default_policy_gates_vllm_natively_and_its_flash_attn_by_jit():
    from edgevllm.verify.policy import load_policy

    policy = load_policy()
    site = "usr/local/lib/python3.12/dist-packages"
    assert policy.rule_for(f"{site}/vllm/_C_stable_libtorch.abi3.so") == ("vllm", "native")
    assert policy.rule_for(f"{site}/vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so") == \
        ("vllm-flash-attn", "ptx-jit")
    assert policy.rule_for(f"{site}/torch/lib/libtorch_cuda.so") == ("torch", "compatible")
    assert policy.rule_for("usr/lib/libnvjpeg.so.13")[1] == "report"
