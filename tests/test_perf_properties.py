"""Property-based tests (Hypothesis) of what ``inv bench`` / ``inv roofline`` read from outside:
safetensors headers (a model repository's), ``config.json`` and the weight index, the result
JSON of ``vllm bench serve`` and a server's ``/v1/models`` answer. Seeds are real shapes (a
Qwen3-MoE-style header and config, vLLM 0.33's result keys, OpenAI's model list); each mutated
input gives a result or one of edgevllm's own errors, within the memory and time bounds."""

from __future__ import annotations

import json
import struct

from hypothesis import example, given

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


def _saved_record() -> dict:
    """A real record's shape: one point with its repeats summarised, a timed start, a roofline."""
    from edgevllm.perf.record import new_record

    runs = [{"itl_ms": v, "tok_s_stream": 1000 / v, "ttft_ms": 30.0, "failed": 0}
            for v in (20.0, 21.0, 22.0)]
    record = new_record("fuzz", target="spark", roofline={"ceiling_tok_s": 60.0})
    record["points"] = [{"concurrency": 1, "input_len": 32, "output_len": 16,
                         "labels": {"max_num_seqs": 8}, "runs": runs, "summary": summarise(runs)}]
    record["runs"] = [{"labels": {"max_num_seqs": 8},
                       "start": {"health_s": 41.5, "first_token_s": 43.0, "error": None}}]
    record["status"] = "complete"
    return record


def _report_of(base: dict, other_path) -> str:
    from edgevllm.perf.record import load_record
    from edgevllm.perf.report import compare_markdown, markdown, start_markdown

    other = load_record(other_path)
    return markdown([base, other]) + compare_markdown(base, other) + start_markdown([other])


def _with(path: tuple, value) -> dict:
    record = _saved_record()
    node = record
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return record


@PROPERTY
@given(replaced_field(_saved_record()), mutated(json.dumps(_saved_record()).encode()))
@example(_with(("points", 0, "summary"), None), b"{}")
@example(_with(("runs", 0, "start"), "soon"), b"[]")
@example(_with(("points", 0, "summary", "itl_ms", "median"), "fast"), b"null")
def test_a_record_given_to_compare(tmp_path_factory, document, data):
    """``inv bench --report A --compare B``: a record with any field replaced, or its bytes
    mutated, is reported or refused in one line naming the file."""
    folder = tmp_path_factory.mktemp("records")
    for index, raw in enumerate((json.dumps(document).encode(), data)):
        path = folder / f"other-{index}.json"
        path.write_bytes(raw)
        out = bounded(_report_of, _saved_record(), path)
        assert isinstance(out, str) or str(path) in str(out), out
