"""The FlashInfer modules vLLM 0.33.0 asks for, computed from a model's config.json: the shipped
Qwen3-0.6B config (tests/fixtures/model-configs), variants of it, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgevllm.builder.aot.modules import (
    aot_modules,
    attention_shape,
    flashinfer_modules,
    modules_for_file,
)
from edgevllm.common.errors import ConfigError

QWEN3 = Path(__file__).parent / "fixtures" / "model-configs" / "qwen3-0.6b.json"


def qwen3(**changes) -> dict:
    return {**json.loads(QWEN3.read_text()), **changes}


def test_qwen3_gets_one_bf16_attention_module_and_the_sampler():
    assert modules_for_file(QWEN3) == [
        "batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_"
        "head_dim_qk_128_head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False_f16qk_False"
        "_kv_stride_equal",
        "sampling"]


def test_kv_cache_dtype_window_soft_cap_and_sampler_change_the_list():
    fp8 = flashinfer_modules(qwen3(), kv_cache_dtype="fp8")[0]
    assert "_dtype_q_bf16_dtype_kv_e4m3_dtype_o_bf16_" in fp8
    gemma_like = flashinfer_modules(qwen3(head_dim=256, sliding_window=4096,
                                          use_sliding_window=True, attn_logit_softcapping=50.0,
                                          torch_dtype="float16"), sampler=False)
    assert gemma_like == [
        "batch_prefill_with_kv_cache_dtype_q_f16_dtype_kv_f16_dtype_o_f16_dtype_idx_i32_"
        "head_dim_qk_256_head_dim_vo_256_posenc_0_use_swa_True_use_logits_cap_True_f16qk_False"
        "_kv_stride_equal"]
    # A window in the config that the model does not use (Qwen's flag) is no window.
    assert not attention_shape(qwen3(sliding_window=4096)).sliding_window


def test_modules_carry_flashinfers_arguments():
    """The AOT step calls FlashInfer's own JitSpec makers with these (torch dtype names)."""
    attention, sampling = aot_modules(qwen3(), kv_cache_dtype="fp8")
    assert (attention.kind, attention.dtype_q, attention.dtype_kv, attention.head_dim) == (
        "batch_prefill", "bfloat16", "float8_e4m3fn", 128)
    assert sampling.to_dict()["kind"] == "sampling"


def test_head_dim_from_hidden_size_and_text_config():
    config = qwen3()
    del config["head_dim"]
    assert attention_shape(config).head_dim == 1024 // 16
    nested = {"architectures": ["X"], "text_config": qwen3(head_dim=256)}
    assert attention_shape(nested).head_dim == 256


@pytest.mark.parametrize("config,needle", [
    (qwen3(head_dim=96), "head_dim 96: vLLM's FlashInfer backend takes 64, 128, 256, 512"),
    (qwen3(torch_dtype="float32"), "torch_dtype 'float32'"),
    ({"model_type": "x"}, "neither head_dim nor hidden_size"),
    (qwen3(head_dim="abc"), "head_dim 'abc' is not a whole number"),
    (qwen3(head_dim=float("inf")), "head_dim inf is not a whole number"),
    (qwen3(head_dim=[64]), r"head_dim \[64\] is not a whole number"),
    (qwen3(head_dim=64.5), "head_dim 64.5 is not"),
    (qwen3(head_dim=None, hidden_size=float("inf")), "hidden_size inf is not"),
    (qwen3(head_dim=None, hidden_size="1e400"), "hidden_size '1e400' is not"),
    (qwen3(head_dim=None, num_attention_heads=0), "num_attention_heads is 0"),
    (qwen3(head_dim=None, num_attention_heads={"a": 1}), "num_attention_heads {'a': 1} is not"),
])
def test_bad_configs_say_why(config, needle):
    with pytest.raises(ConfigError, match=needle):
        flashinfer_modules(config)
    with pytest.raises(ConfigError, match="kv_cache_dtype 'int4'"):
        flashinfer_modules(qwen3(), kv_cache_dtype="int4")


def test_bad_files_are_one_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read it"):
        modules_for_file(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ConfigError, match="not valid JSON"):
        modules_for_file(tmp_path / "bad.json")
    for text in ('{"head_dim": 1e400}', '{"head_dim": "abc"}', '{"head_dim": [64]}',
                 "[" * 100_000):
        (tmp_path / "odd.json").write_text(text)
        with pytest.raises(ConfigError, match="odd.json: ") as info:
            modules_for_file(tmp_path / "odd.json")
        assert "\n" not in str(info.value)
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(ConfigError, match="JSON object"):
        modules_for_file(tmp_path / "list.json")
