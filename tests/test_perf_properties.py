"""Property-based tests (Hypothesis) of what ``inv bench`` / ``inv roofline`` read from outside:
safetensors headers (a model repository's), ``config.json`` and the weight index, the result
JSON of ``vllm bench serve`` and a server's ``/v1/models`` answer. Seeds are real shapes (a
Qwen3-MoE-style header and config, vLLM 0.33's result keys, OpenAI's model list); each mutated
input gives a result or one of edgevllm's own errors, within the memory and time bounds."""

from __future__ import annotations

import json
import struct

from hypothesis import given

from edgevllm.perf.client import parse_result
from edgevllm.perf.metrics import figures, summarise
from edgevllm.perf.roofline import count_tensors, parse_config, parse_header, weight_files_of
from edgevllm.perf.sweep import first_model_id
from support.properties import PROPERTY, bounded, json_values, mutated, replaced_field

HEADER = {
    "__metadata__": {"format": "pt"},
    "model.embed_tokens.weight": {"dtype": "BF16", "shape": [1000, 64],
                                  "data_offsets": [0, 128000]},
    "model.layers.0.self_attn.q_proj.weight": {"dtype": "BF16", "shape": [64, 64],
                                               "data_offsets": [128000, 136192]},
    "model.layers.0.mlp.experts.0.up_proj.weight": {"dtype": "F8_E4M3", "shape": [32, 64],
                                                    "data_offsets": [136192, 138240]},
    "model.layers.0.mlp.experts.1.up_proj.weight": {"dtype": "F8_E4M3", "shape": [32, 64],
                                                    "data_offsets": [138240, 140288]},
    "lm_head.weight": {"dtype": "BF16", "shape": [1000, 64], "data_offsets": [140288, 268288]},
}
CONFIG = {"num_experts": 2, "num_experts_per_tok": 1, "tie_word_embeddings": False,
          "text_config": {"num_local_experts": 2}}
RESULT = {"median_ttft_ms": 12.5, "p90_ttft_ms": 20.0, "median_tpot_ms": 8.0,
          "output_throughput": 500.0, "request_throughput": 2.0, "duration": 10.0,
          "completed": 20, "failed": 0, "errors": ["", ""], "version": "0.33.0"}
MODELS = {"object": "list", "data": [{"id": "Qwen/Qwen3-8B", "object": "model"}]}


def _safetensors(header: dict) -> bytes:
    body = json.dumps(header).encode()
    return struct.pack("<Q", len(body)) + body


def _roofline(head: bytes, config: dict):
    return count_tensors(parse_header(head, "fuzz.safetensors"), config, "fuzz")


@PROPERTY
@given(mutated(_safetensors(HEADER), range(0, 8)))
def test_a_safetensors_header_with_its_bytes_mutated(head):
    bounded(_roofline, head, CONFIG)


@PROPERTY
@given(replaced_field(HEADER), replaced_field(CONFIG))
def test_a_header_and_config_with_any_field_replaced(header, config):
    bounded(_roofline, _safetensors(header), config)


@PROPERTY
@given(json_values())
def test_config_and_index_of_any_json(document):
    text = json.dumps(document)
    bounded(parse_config, text, "fuzz")
    bounded(weight_files_of, text, "fuzz")
    bounded(_roofline, _safetensors(document) if isinstance(document, dict) else b"", CONFIG)


def _figures(data: bytes) -> dict:
    out = figures(parse_result(data, "fuzz.json"))
    summarise([out, out])
    return out


@PROPERTY
@given(mutated(json.dumps(RESULT).encode()))
def test_a_bench_result_with_its_bytes_mutated(data):
    bounded(_figures, data)


@PROPERTY
@given(replaced_field(RESULT))
def test_a_bench_result_with_any_field_replaced(result):
    out = bounded(_figures, json.dumps(result).encode())
    if isinstance(out, dict):
        assert all(value is None or value >= 0 for key, value in out.items()
                   if key.endswith(("_ms", "_s", "tok_s_total")))


@PROPERTY
@given(replaced_field(MODELS), mutated(json.dumps(MODELS).encode()))
def test_a_models_answer(document, data):
    for answer in (json.dumps(document).encode(), data):
        model = bounded(first_model_id, answer, "http://fuzz:8000")
        assert not isinstance(model, str) or (model.strip() and model.isprintable())
