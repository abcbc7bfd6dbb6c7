"""Targets are data: the shipped files validate, carry the device facts, and bad files fail in
one line."""

from __future__ import annotations

import pytest

from edgevllm.common.errors import UnknownTargetError
from edgevllm.common.paths import data_dirs
from edgevllm.specs.targets import all_targets, load_target


def test_shipped_targets_carry_device_facts():
    thor, spark = load_target("thor"), load_target("spark")
    assert (thor.torch_cuda_arch_list, thor.sm, thor.device_name) == (
        "11.0a",
        "sm_110a",
        "NVIDIA Thor",
    )
    assert (spark.torch_cuda_arch_list, spark.sm, spark.device_name) == (
        "12.1a",
        "sm_121a",
        "NVIDIA GB10",
    )
    for target in (thor, spark):
        assert target.platform == "linux/arm64"
        assert target.cuda_version.startswith("13.0")
        assert target.images.build.startswith("nvcr.io/nvidia/cuda:13.0")
        assert target.torch.index_url is not None
        assert target.torch.index_url.endswith("/cu130")
    assert "flashinfer-cubin" in thor.forbidden_packages
    assert {t.name for t in all_targets()} >= {"thor", "spark"}


def test_unknown_target_names_the_known_ones():
    with pytest.raises(UnknownTargetError, match=r"unknown target 'orin' \(known: .*spark.*thor"):
        load_target("orin")


def test_a_user_adds_a_target_by_adding_a_file(tmp_path, monkeypatch):
    text = (data_dirs("targets")[0] / "spark.yaml").read_text()
    (tmp_path / "spark2.yaml").write_text(text.replace("name: spark", "name: spark2"))
    monkeypatch.setenv("EDGEVLLM_TARGETS_PATH", str(tmp_path))
    assert load_target("spark2").torch_cuda_arch_list == "12.1a"
    assert load_target("spark2").size_budget_gb is None   # no budget unless the file sets one
    (tmp_path / "spark3.yaml").write_text(text.replace("name: spark", "name: spark3")
                                          + "size_budget_gb: 10.5\n")
    assert load_target("spark3").size_budget_gb == 10.5


@pytest.mark.parametrize(
    "change, message",
    [
        (('cuda_arch: "12.1a"', 'cuda_arch: "twelve"'), "field 'cuda_arch'"),
        (
            ("max_jobs: 12", "max_jobs: 12\nmax_jbos: 3"),
            "unknown field 'max_jbos' (did you mean 'max_jobs'?)",
        ),
        (("platform: linux/arm64", "platform: linux/riscv"), "field 'platform'"),
        (("device_name: NVIDIA GB10", "device_name: [NVIDIA"), "bad.yaml: line"),
        (("min_disk_gb: 60", "min_disk_gb: 60\nsize_budget_gb: -1"), "field 'size_budget_gb'"),
        (("_vllm_fa3_C: \"FlashAttention 3:", "_vllm_fa3_C; rm: \"FlashAttention 3:"),
         "field 'leave_out"),
        (("_vllm_fa3_C: \"FlashAttention 3: sm_90a only", "_vllm_fa3_C: \"$(id)"),
         "field 'leave_out"),
        (("_vllm_fa3_C: \"FlashAttention 3: sm_90a only, no code for 12.1a (vLLM uses "
          "FlashAttention 2 without it)\"", "_vllm_fa3_C: \" \""), "say why the target leaves"),
    ],
)
def test_bad_target_file_fails_in_one_line(tmp_path, monkeypatch, change, message):
    text = (data_dirs("targets")[0] / "spark.yaml").read_text()
    (tmp_path / "bad.yaml").write_text(text.replace("name: spark", "name: bad").replace(*change))
    monkeypatch.setenv("EDGEVLLM_TARGETS_PATH", str(tmp_path))
    with pytest.raises(UnknownTargetError) as failure:
        load_target("bad")
    assert message in str(failure.value)
    assert "\n" not in str(failure.value)


def test_spark_and_thor_leave_flashattention_3_out_and_no_9_0a_target_does():
    """FlashAttention 3 is sm_90a code (its CMake's FA3_ARCHS: 9.0a within the arch list): a
    target whose arch list holds no 9.0 leaves it out, one that holds 9.0a must not (the data
    follows the arches; builder/subset/plan.py applies it)."""
    for name in ("spark", "thor"):
        reason = load_target(name).leave_out["_vllm_fa3_C"]
        assert reason.startswith("FlashAttention 3: sm_90a only")
    for target in all_targets():
        hopper = any(a.startswith("9.0") for a in target.torch_cuda_arch_list.replace(
            " ", ";").split(";"))
        assert ("_vllm_fa3_C" in target.leave_out) is not hopper, target.name


def test_a_target_without_leave_out_leaves_nothing_out(tmp_path, monkeypatch):
    text = (data_dirs("targets")[0] / "spark.yaml").read_text()
    kept = "\n".join(line for line in text.splitlines()
                     if not line.startswith(("leave_out:", "  _vllm_fa3_C:")))
    (tmp_path / "hopper.yaml").write_text(kept.replace("name: spark", "name: hopper")
                                          .replace('"12.1a"', '"9.0a"'))
    monkeypatch.setenv("EDGEVLLM_TARGETS_PATH", str(tmp_path))
    assert load_target("hopper").leave_out == {}
