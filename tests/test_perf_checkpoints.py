"""A checkpoint folder is others' files: ``inv roofline FOLDER`` (perf/roofline.py) given a
config or index that is not UTF-8, an index naming files that are missing, folders or paths,
safetensors headers that lie or are cut, MoE and embedding layouts it cannot count. Each is
one line (exit 12, or 2 for a name that is no model), never a traceback and never a guess; the
figures it does print are what the headers hold."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from edgevllm.common.errors import RooflineUnknown
from edgevllm.perf.roofline import (
    count_tensors,
    format_roofline,
    parse_header,
    weight_files_of,
    weights_per_token,
)
from support.inprocess import one_error, run_cli

BF16_ROW = {"dtype": "BF16", "shape": [4, 8], "data_offsets": [0, 64]}


def _folder(root: Path, config: bytes | dict, files: dict[str, bytes]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_bytes(config if isinstance(config, bytes) else
                                       json.dumps(config).encode())
    for name, data in files.items():
        (root / name).write_bytes(data)
    return root


def _safetensors(header: dict, data_bytes: int | None = None) -> bytes:
    blob = json.dumps(header).encode()
    held = data_bytes if data_bytes is not None else max(
        (e["data_offsets"][1] for e in header.values() if isinstance(e, dict)
         and "data_offsets" in e), default=0)
    return struct.pack("<Q", len(blob)) + blob + b"\0" * held


@pytest.mark.parametrize("broken", ["config.json", "model.safetensors.index.json"])
def test_a_file_that_is_not_utf8_is_one_line_naming_it(tmp_path, capsys, monkeypatch, broken):
    """Found by this test: a local config or index that was not UTF-8 was a
    UnicodeDecodeError traceback (the Hub's answer was already read bounded)."""
    files = {"model.safetensors.index.json": json.dumps(
        {"weight_map": {"w": "model.safetensors"}}).encode(),
        "model.safetensors": _safetensors({"w": BF16_ROW})}
    folder = _folder(tmp_path / "m", {"hidden_size": 8}, files)
    (folder / broken).write_bytes(b"\xff\xfe{" + b"\x00" * 10)
    code, err = run_cli(capsys, monkeypatch, "roofline", str(folder))
    assert code == 12, err
    assert one_error(err) == (f"error: {folder / broken}: not UTF-8 text (byte 0); save it as "
                              "UTF-8")


@pytest.mark.parametrize(("index", "said"), [
    ({"weight_map": {}}, "has no weight_map of plain file names"),
    ({"weight_map": {"w": "../outside.safetensors"}}, "has no weight_map of plain file names"),
    ({"weight_map": {"w": ".."}}, "has no weight_map of plain file names"),
    ({"weight_map": {"w": 5}}, "has no weight_map of plain file names"),
    ({"weight_map": ["model.safetensors"]}, "has no weight_map of plain file names"),
    ([], "has no weight_map of plain file names"),
], ids=["empty", "climbs", "dotdot", "number", "list", "not-object"])
def test_an_index_that_names_no_plain_files_is_unknown(index, said):
    with pytest.raises(RooflineUnknown, match=said):
        weight_files_of(json.dumps(index), "org/m")
    with pytest.raises(RooflineUnknown, match=said):
        weight_files_of("{not json", "org/m")


def test_an_index_names_each_file_once_sorted():
    index = {"weight_map": {"a": "b.safetensors", "b": "a.safetensors", "c": "b.safetensors"}}
    assert weight_files_of(json.dumps(index), "m") == ["a.safetensors", "b.safetensors"]


def test_a_file_the_index_names_that_is_missing_or_a_folder_is_one_line(tmp_path):
    index = json.dumps({"weight_map": {"w": "gone.safetensors"}}).encode()
    folder = _folder(tmp_path / "m", {}, {"model.safetensors.index.json": index})
    with pytest.raises(RooflineUnknown, match="cannot read the header of gone.safetensors"):
        weights_per_token(str(folder))
    (folder / "gone.safetensors").mkdir()
    with pytest.raises(RooflineUnknown, match="cannot read the header of gone.safetensors"):
        weights_per_token(str(folder))


def test_without_an_index_every_safetensors_file_of_the_folder_counts(tmp_path):
    first = _safetensors({"model.layers.0.a.weight": BF16_ROW})
    second = _safetensors({"model.layers.1.a.weight": {**BF16_ROW, "data_offsets": [0, 32]}})
    folder = _folder(tmp_path / "m", {}, {"b.safetensors": second, "a.safetensors": first,
                                          "notes.txt": b"not weights"})
    roof = weights_per_token(str(folder))
    assert (roof.tensors, roof.bytes_per_token, roof.dense_bytes) == (2, 96, 96)


@pytest.mark.parametrize(("data", "said"), [
    (b"\x01\x00", r"is not a safetensors file \(too short\)"),
    (struct.pack("<Q", 1 << 40) + b"{}", "bad safetensors header length"),
    (struct.pack("<Q", 100) + b"{}", "bad safetensors header length"),
    (struct.pack("<Q", 2) + b"[]", "header"),
    (struct.pack("<Q", 4) + b"{,}x", "header"),
], ids=["short", "huge-length", "cut-header", "list", "not-json"])
def test_a_header_that_is_no_header_is_unknown(data, said):
    with pytest.raises(RooflineUnknown, match=said):
        parse_header(data, "w.safetensors")


@pytest.mark.parametrize("entry", [
    {"shape": [1]},
    {"data_offsets": [10, 5], "shape": [1]},
    {"data_offsets": [-1, 5], "shape": [1]},
    {"data_offsets": [0, 1.5], "shape": [1]},
    {"data_offsets": [0, True], "shape": [1]},
    {"data_offsets": [0, 4, 8], "shape": [1]},
    {"data_offsets": [0, 4], "shape": [-1]},
    {"data_offsets": [0, 4], "shape": "4"},
    "a string",
], ids=["no-offsets", "backwards", "negative", "float", "bool", "three", "neg-shape",
        "shape-text", "not-object"])
def test_a_tensor_entry_without_valid_offsets_and_shape_names_the_tensor(entry):
    head = _safetensors({"model.norm.weight": entry}, data_bytes=0)
    with pytest.raises(RooflineUnknown, match="tensor 'model.norm.weight' has no valid"):
        parse_header(head, "w.safetensors")


def test_the_metadata_entry_is_no_tensor():
    head = _safetensors({"__metadata__": {"format": "pt"}, "w": BF16_ROW})
    assert list(parse_header(head, "w.safetensors")) == ["w"]


def test_a_local_file_cut_short_is_unknown_naming_the_tensor_and_sizes(tmp_path):
    folder = _folder(tmp_path / "m", {}, {"model.safetensors": _safetensors(
        {"model.layers.0.a.weight": BF16_ROW}, data_bytes=10)})
    with pytest.raises(RooflineUnknown) as raised:
        weights_per_token(str(folder))
    assert "tensor 'model.layers.0.a.weight' ends at byte 64 of the data, the file holds 10" \
        in str(raised.value)


def _entry(start: int, end: int, shape: list[int] | None = None) -> dict:
    return {"dtype": "BF16", "shape": shape or [1], "data_offsets": [start, end]}


def test_top_k_over_the_expert_count_is_unknown():
    tensors = {"model.layers.0.mlp.experts.0.w1.weight": _entry(0, 100)}
    with pytest.raises(RooflineUnknown, match="top-k 9 > 8 experts"):
        count_tensors(tensors, {"num_experts": 8, "num_experts_per_tok": 9}, "m")


def test_an_untied_embedding_without_a_row_count_is_unknown():
    tensors = {"model.embed_tokens.weight": _entry(0, 100, shape=[0]),
               "lm_head.weight": _entry(100, 200)}
    with pytest.raises(RooflineUnknown, match="embedding table without a row count"):
        count_tensors(tensors, {}, "m")


def test_expert_counts_are_read_from_a_nested_text_config_and_a_bad_one_is_skipped():
    tensors = {"model.layers.0.mlp.experts.0.w1.weight": _entry(0, 800)}
    nested = {"text_config": {"num_experts": 8, "num_experts_per_tok": 2}}
    assert count_tensors(tensors, nested, "m").routed_expert_bytes_per_token == 200
    odd = {"num_experts": "8", "llm_config": ["x"],
           "text_config": {"num_experts": 8, "num_experts_per_tok": 2}}
    assert count_tensors(tensors, odd, "m").routed_expert_bytes_per_token == 200


def test_the_printout_says_each_part_and_the_ceiling_only_with_a_bandwidth():
    tensors = {"model.layers.0.mlp.experts.0.w1.weight": _entry(0, 8_000_000),
               "model.layers.0.self_attn.q.weight": _entry(0, 2_000_000),
               "lm_head.weight": _entry(0, 1500),
               "model.embed_tokens.weight": _entry(0, 4000, shape=[1000, 2]),
               "mtp.layers.0.w": _entry(0, 10)}
    roof = count_tensors(tensors, {"num_experts": 8, "num_experts_per_tok": 1}, "org/moe")
    text = format_roofline(roof)
    assert "bytes per token  3.002 MB (3001504 bytes, 5 tensors)" in text
    assert "routed experts 1.000 MB (top-k 1 of 8 experts: 8.000 MB stored)" in text
    assert "  lm_head        1.500 kB" in text and "  embedding      4 B (one row)" in text
    assert "ceiling" not in text and "left out 10 bytes of MTP/vision tensors" in text
    roof.with_bandwidth(273.0)
    assert f"ceiling          {273e9 / 3001504:.1f} tok/s single-stream at 273 GB/s" in \
        format_roofline(roof)


def test_a_name_that_is_neither_folder_nor_model_id_is_an_input_error(tmp_path, capsys,
                                                                       monkeypatch):
    code, err = run_cli(capsys, monkeypatch, "roofline", str(tmp_path / "nowhere" / "x"))
    assert code == 2, err
    assert "is neither a folder nor a model id (org/name)" in one_error(err)
