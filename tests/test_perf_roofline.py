"""The decode roofline from safetensors headers written here, with hand-computed expected bytes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
import threading
from pathlib import Path
from typing import Iterator

import pytest
from aiohttp import web

from edgevllm.common.errors import RooflineUnknown
from edgevllm.perf.roofline import weights_per_token

SIZES = {"BF16": 2, "F32": 4, "U8": 1, "F8_E4M3": 1}


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> None:
    """A real safetensors file: header with offsets, then zero-filled (sparse) data."""
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        size = SIZES[dtype]
        for dim in shape:
            size *= dim
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    header["__metadata__"] = {"format": "pt"}
    blob = json.dumps(header).encode()
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(blob)) + blob)
        handle.truncate(8 + len(blob) + offset)


def model_dir(root: Path, config: dict, *shards: dict) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(config))
    if len(shards) == 1:
        write_safetensors(root / "model.safetensors", shards[0])
        return root
    weight_map = {}
    for index, shard in enumerate(shards):
        name = f"model-{index + 1:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors(root / name, shard)
        weight_map.update({tensor: name for tensor in shard})
    (root / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return root


EMBED = {"model.embed_tokens.weight": ("BF16", [1000, 64])}  # 128000 B, one row = 128 B
LM_HEAD = {"lm_head.weight": ("BF16", [1000, 64])}  # 128000 B


def test_dense_model_counts_every_weight_one_embedding_row_and_lm_head(tmp_path):
    tensors = {**EMBED, **LM_HEAD,
               "model.layers.0.self_attn.q_proj.weight": ("BF16", [64, 64]),  # 8192
               "model.layers.0.mlp.up_proj.weight": ("BF16", [256, 64]),  # 32768
               "model.layers.0.input_layernorm.weight": ("F32", [64])}  # 256
    folder = model_dir(tmp_path / "dense", {"vocab_size": 1000}, tensors)
    roof = weights_per_token(str(folder)).with_bandwidth(273)
    assert roof.bytes_per_token == 128 + 128000 + 8192 + 32768 + 256
    assert roof.ceiling_tok_s == pytest.approx(273e9 / 169344)
    assert roof.num_experts is None


def test_moe_routed_experts_count_at_top_k_over_experts_shared_and_router_in_full(tmp_path):
    experts = {}
    for index in range(8):  # 8 experts x (4096 + 4096) = 65536 B
        experts[f"model.layers.0.mlp.experts.{index}.gate_proj.weight"] = ("BF16", [32, 64])
        experts[f"model.layers.0.mlp.experts.{index}.down_proj.weight"] = ("BF16", [64, 32])
    dense = {**EMBED, **LM_HEAD,
             "model.layers.0.mlp.gate.weight": ("BF16", [8, 64]),  # router 1024
             "model.layers.0.mlp.shared_expert.up_proj.weight": ("BF16", [32, 64]),  # 4096
             "model.layers.0.self_attn.q_proj.weight": ("BF16", [64, 64]),  # 8192
             "mtp.layers.0.eh_proj.weight": ("BF16", [64, 64])}  # left out
    config = {"num_experts": 8, "num_experts_per_tok": 2}
    folder = model_dir(tmp_path / "moe", config, dense, experts)  # two shards + index
    roof = weights_per_token(str(folder))
    assert roof.routed_expert_bytes_total == 65536
    assert roof.routed_expert_bytes_per_token == 65536 * 2 // 8
    assert roof.bytes_per_token == 16384 + 1024 + 4096 + 8192 + 128 + 128000
    assert roof.skipped_bytes == 8192 and roof.top_k == 2 and roof.num_experts == 8


def test_mixed_nvfp4_bf16_counts_stored_bytes_with_scales(tmp_path):
    tensors = {**EMBED, **LM_HEAD,
               # NVFP4: two 4-bit values per byte, an FP8 scale per 16 values, one FP32 scale
               "model.layers.0.self_attn.q_proj.weight": ("U8", [64, 32]),  # 2048
               "model.layers.0.self_attn.q_proj.weight_scale": ("F8_E4M3", [64, 4]),  # 256
               "model.layers.0.self_attn.q_proj.weight_scale_2": ("F32", []),  # 4
               "model.layers.0.self_attn.o_proj.weight": ("BF16", [64, 64])}  # 8192 (kept BF16)
    folder = model_dir(tmp_path / "nvfp4", {"vocab_size": 1000}, tensors)
    roof = weights_per_token(str(folder))
    assert roof.bytes_per_token == 2048 + 256 + 4 + 8192 + 128000 + 128


def test_fused_expert_tensors_and_nested_text_config(tmp_path):
    tensors = {**EMBED, **LM_HEAD,
               "model.layers.0.mlp.experts.gate_up_proj": ("BF16", [4, 64, 64]),  # 32768
               "model.layers.0.mlp.router.weight": ("BF16", [4, 64])}  # 512
    config = {"text_config": {"num_local_experts": 4, "num_experts_per_tok": 1}}
    roof = weights_per_token(str(model_dir(tmp_path / "fused", config, tensors)))
    assert roof.bytes_per_token == 32768 // 4 + 512 + 128000 + 128


def test_tied_embedding_counts_in_full_when_there_is_no_lm_head(tmp_path):
    folder = model_dir(tmp_path / "tied", {"tie_word_embeddings": True},
                       {**EMBED, "model.norm.weight": ("F32", [64])})
    roof = weights_per_token(str(folder))
    assert roof.bytes_per_token == 128000 + 256
    assert any("tied" in note for note in roof.notes)


@pytest.mark.parametrize("config,tensors,reason", [
    ({"num_experts": 8}, {"model.layers.0.mlp.experts.0.w1.weight": ("BF16", [8, 8])},
     "no expert count"),
    ({"num_experts": 8, "num_experts_per_tok": 2}, {"model.layers.0.mlp.w1": ("BF16", [8, 8])},
     "says 8 experts"),
    ({}, {}, "no safetensors weights"),
])
def test_unknown_layouts_say_roofline_unknown(tmp_path, config, tensors, reason):
    folder = model_dir(tmp_path / "odd", config, tensors) if tensors else tmp_path / "odd"
    if not tensors:
        folder.mkdir()
        (folder / "config.json").write_text("{}")
    with pytest.raises(RooflineUnknown, match=rf"^roofline unknown: .*{reason}"):
        weights_per_token(str(folder))


@contextlib.contextmanager
def loopback_server(app: web.Application) -> Iterator[int]:
    """``app`` served on 127.0.0.1 from a thread of its own while the block runs; its port."""
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    assert site._server is not None and isinstance(site._server, asyncio.base_events.Server)
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield site._server.sockets[0].getsockname()[1]
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def test_hub_id_reads_headers_over_http_range_requests(tmp_path, monkeypatch):
    """A model id not in the local cache is read from the Hub: only header bytes travel."""
    folder = model_dir(tmp_path / "hub", {"vocab_size": 1000},
                       {**EMBED, **LM_HEAD, "model.layers.0.mlp.up_proj.weight":
                        ("BF16", [4096, 4096])})  # 32 MiB of weights never fetched
    served: list[int] = []

    @web.middleware
    async def count(request, handler):
        response = await handler(request)
        served.append(getattr(response, "content_length", 0) or 0)
        return response

    app = web.Application(middlewares=[count])
    app.router.add_static("/org/tiny/resolve/main", folder)
    with loopback_server(app) as port:
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))
        roof = weights_per_token("org/tiny")
    assert roof.bytes_per_token == 128 + 128000 + 4096 * 4096 * 2
    assert sum(served) < 10_000, f"more than headers were downloaded: {served}"


def test_cli_roofline_prints_ceiling_and_writes_json(tmp_path, cli):
    folder = model_dir(tmp_path / "dense", {}, {**EMBED, **LM_HEAD})
    out = tmp_path / "roof.json"
    code, stdout, stderr = cli("roofline", str(folder), "--target", "spark", "--json", str(out))
    assert code == 0, stderr
    expected = 273e9 / (128000 + 128)
    assert f"{expected:.1f} tok/s" in stdout
    assert json.loads(out.read_text())["ceiling_tok_s"] == pytest.approx(expected)


def test_cli_roofline_unknown_is_one_line(tmp_path, cli):
    (tmp_path / "empty").mkdir()
    code, _, stderr = cli("roofline", str(tmp_path / "empty"))
    assert code == 12
    assert stderr.strip().splitlines() == [
        f"error: roofline unknown: {tmp_path / 'empty'} has no config.json"]


@pytest.mark.parametrize("status, token, says, never", [
    (403, "hf_" + "t" * 34, "refused the HF_TOKEN that is set", "set HF_TOKEN)"),
    (401, None, "(gated or private: set HF_TOKEN)", "is set"),
    (500, "hf_" + "t" * 34, "HTTP 500 (the Hub's answer", "HF_TOKEN"),
])
def test_a_refusal_says_what_to_do_given_hf_token(tmp_path, monkeypatch, status, token, says,
                                                  never):
    async def refuse(request):
        return web.Response(status=status, text="no")

    app = web.Application()
    app.router.add_get("/{tail:.*}", refuse)
    with loopback_server(app) as port:
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))
        if token:
            monkeypatch.setenv("HF_TOKEN", token)
        else:
            monkeypatch.delenv("HF_TOKEN", raising=False)
        with pytest.raises(RooflineUnknown) as info:
            weights_per_token("org/gated")
    assert says in str(info.value) and never not in str(info.value)
    assert token is None or token not in str(info.value)
