"""Which FlashInfer JIT modules vLLM 0.33.0 asks for when it serves a model (docs/first-start.md).

The list is derived from vLLM 0.33.0's own code (the sdist on PyPI) and named the way FlashInfer
0.7.2 names its JIT modules (``flashinfer/jit/attention/modules.py``, ``flashinfer/jit/*.py``), so
that the AOT step (``inv build --aot``) can build exactly these into the image's FlashInfer cache:

- **attention** (``vllm/v1/attention/backends/flashinfer.py``): prefill plans
  ``BatchPrefillWithPagedKVCacheWrapper`` / ``...RaggedKVCacheWrapper`` with ``backend="auto"``
  (FA2 off Hopper) and decode plans ``BatchDecodeWithPagedKVCacheWrapper(use_tensor_cores=True)``,
  which runs the same batch-prefill kernels. FlashInfer 0.7.2's FA2 path
  (``prefill.get_batch_prefill_module``) loads the equal-K/V-stride primary of that module
  (``_gen_batch_prefill_primary_module``, URI suffix ``_kv_stride_equal``), the one FlashInfer's
  own AOT build ships (``flashinfer/aot.py``, ``gen_fa2``); vLLM's K and V are two halves of one
  packed tensor (``kv_cache_permute.split(head_size, dim=-1)``), so their strides are equal and
  the lazily built independent-stride module is never asked for. One module per (q dtype, KV
  dtype, head dim, sliding window, logits soft cap): q and output in the model's dtype, KV in it
  too unless
  ``--kv-cache-dtype fp8`` (``e4m3``), int32 indices, no positional encoding in the kernel
  (``pos_encoding_mode="NONE"``: vLLM applies RoPE itself), no fp16 QK reduction. The backend
  takes head sizes 64, 128, 256 and 512 only (``get_supported_head_sizes``).
- **sampling** (``vllm/v1/sample/ops/topk_topp_sampler.py``): FlashInfer's top-k/top-p sampler,
  on unless ``VLLM_USE_FLASHINFER_SAMPLER=0``.

Left out, and why: TRT-LLM/XQA decode kernels (prebuilt cubins, not JIT modules; vLLM takes them on
SM90/SM10x/SM12x only, never on Thor's SM110), MLA models (other backends), RoPE (FlashInfer's only
for DeepSeek scaling RoPE), RMSNorm and activations (vLLM's own kernels), MoE (depends on the
quantization and ``VLLM_USE_FLASHINFER_MOE_*``; a later round).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from edgevllm.common.dataload import load_json
from edgevllm.common.errors import ConfigError

SUPPORTED_HEAD_SIZES = (64, 128, 256, 512)
CONFIG_LIMIT = 4 << 20
_DTYPES = {"bfloat16": "bf16", "float16": "f16", "half": "f16"}
_KV_CACHE = {"auto": None, "fp8": "e4m3", "fp8_e4m3": "e4m3", "fp8_e5m2": "e5m2"}
# FlashInfer's short dtype names (``filename_safe_dtype_map``) → torch's attribute names.
TORCH_DTYPES = {"bf16": "bfloat16", "f16": "float16", "e4m3": "float8_e4m3fn",
                "e5m2": "float8_e5m2"}
EQUAL_STRIDE_SUFFIX = "_kv_stride_equal"


@dataclass(frozen=True)
class AttentionShape:
    """What of a model's config.json decides its FlashInfer attention module."""

    dtype: str  # bf16 | f16
    head_dim: int
    sliding_window: bool
    logits_soft_cap: bool


@dataclass(frozen=True)
class AotModule:
    """One FlashInfer JIT module and the arguments of the FlashInfer function that makes its
    JitSpec (``kind``: ``batch_prefill`` → ``_gen_batch_prefill_primary_module``, ``sampling``
    → ``gen_sampling_module``); the AOT step checks that FlashInfer names it ``name``."""

    name: str
    kind: str
    dtype_q: str = ""   # torch dtype attribute names (bfloat16, float8_e4m3fn)
    dtype_kv: str = ""
    head_dim: int = 0
    sliding_window: bool = False
    logits_soft_cap: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


def _text_config(config: dict) -> dict:
    """Multimodal configs keep the language model's fields under ``text_config``."""
    inner = config.get("text_config")
    return {**config, **inner} if isinstance(inner, dict) else config


def attention_shape(config: dict, source: str = "config.json") -> AttentionShape:
    config = _text_config(config)
    raw = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    dtype = _DTYPES.get(raw)
    if dtype is None:
        raise ConfigError(f"{source}: torch_dtype {raw!r}: vLLM's FlashInfer backend serves "
                          "bfloat16 or float16 models")
    head_dim = config.get("head_dim")
    if head_dim is None or head_dim == 0:
        if "hidden_size" not in config or "num_attention_heads" not in config:
            raise ConfigError(f"{source}: neither head_dim nor hidden_size and "
                              "num_attention_heads: is this a model's config.json?")
        heads = _whole(config["num_attention_heads"], "num_attention_heads", source)
        if heads == 0:
            raise ConfigError(f"{source}: num_attention_heads is 0; give the model's config.json")
        head_dim = _whole(config["hidden_size"], "hidden_size", source) // heads
    window = config.get("sliding_window")
    uses_window = bool(window) and config.get("use_sliding_window", True) is not False
    soft_cap = config.get("attn_logit_softcapping") or 0
    return AttentionShape(dtype, _whole(head_dim, "head_dim", source), uses_window,
                          bool(soft_cap))


def _whole(value: object, field: str, source: str) -> int:
    """A count from another's config.json: a whole number (``64`` or ``64.0``), else one line."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 20:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "…"
        raise ConfigError(f"{source}: {field} {shown} is not a whole number of a model's "
                          "config.json; give the model's config.json")
    return value


def batch_prefill_uri(shape: AttentionShape, kv_dtype: str) -> str:
    """FlashInfer 0.7.2's ``get_batch_prefill_uri`` for vLLM's arguments (FA2 backend)."""
    return (f"batch_prefill_with_kv_cache_dtype_q_{shape.dtype}_dtype_kv_{kv_dtype}_"
            f"dtype_o_{shape.dtype}_dtype_idx_i32_head_dim_qk_{shape.head_dim}_"
            f"head_dim_vo_{shape.head_dim}_posenc_0_use_swa_{shape.sliding_window}_"
            f"use_logits_cap_{shape.logits_soft_cap}_f16qk_False")


def aot_modules(config: dict, kv_cache_dtype: str = "auto", sampler: bool = True,
                 source: str = "config.json") -> list[AotModule]:
    """The FlashInfer JIT modules vLLM 0.33.0 loads for this model (see the module doc)."""
    if kv_cache_dtype not in _KV_CACHE:
        raise ConfigError(f"kv_cache_dtype {kv_cache_dtype!r}: one of {', '.join(_KV_CACHE)}")
    shape = attention_shape(config, source)
    if shape.head_dim not in SUPPORTED_HEAD_SIZES:
        raise ConfigError(f"{source}: head_dim {shape.head_dim}: vLLM's FlashInfer backend takes "
                          f"{', '.join(map(str, SUPPORTED_HEAD_SIZES))}; vLLM picks another "
                          "attention backend for this model")
    kv = _KV_CACHE[kv_cache_dtype] or shape.dtype
    attention = AotModule(
        name=batch_prefill_uri(shape, kv) + EQUAL_STRIDE_SUFFIX, kind="batch_prefill",
        dtype_q=TORCH_DTYPES[shape.dtype], dtype_kv=TORCH_DTYPES[kv], head_dim=shape.head_dim,
        sliding_window=shape.sliding_window, logits_soft_cap=shape.logits_soft_cap)
    return [attention] + ([AotModule(name="sampling", kind="sampling")] if sampler else [])


def flashinfer_modules(config: dict, kv_cache_dtype: str = "auto", sampler: bool = True,
                       source: str = "config.json") -> list[str]:
    """The names of ``aot_modules``: FlashInfer's folder and library names for them."""
    return [m.name for m in aot_modules(config, kv_cache_dtype, sampler, source)]


def read_config(path: Path | str) -> dict:
    """A model's config.json; a missing or broken file is one error."""
    path = Path(path)
    try:
        if path.stat().st_size > CONFIG_LIMIT:  # a model's config.json is kilobytes
            raise ConfigError(f"{path}: {path.stat().st_size} bytes is no model's config.json "
                              f"(at most {CONFIG_LIMIT}); give the model's config.json")
        config = load_json(path.read_bytes(), str(path), ConfigError)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror})") from None
    except ValueError as exc:
        raise ConfigError(f"{path}: not JSON ({exc})") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: a model's config.json is a JSON object")
    return config


def modules_for_file(path: Path | str, **options) -> list[str]:
    """``flashinfer_modules`` of a config.json file."""
    return flashinfer_modules(read_config(path), source=str(path), **options)
