"""The decode roofline: weight bytes read per generated token, and the tok/s that bandwidth allows.

Contract: ``weights_per_token(source)`` reads only safetensors *headers* (8-byte little-endian
length + JSON) and ``config.json``: from a local folder, the local Hugging Face cache, or over HTTP
range requests to the Hub; never a weight. Each tensor counts at its stored size (the header's
``data_offsets``, so NVFP4/FP8/BF16 mixes and their scale tensors count exactly as stored):

* dense tensors (attention, MLP, norms, router, shared experts, lm_head): in full;
* routed experts (``...experts.<i>...`` or fused ``...experts.<proj>`` tensors): top-k / experts,
  with top-k and the expert count from ``config.json``;
* the input embedding table: one row (size / rows), unless the lm_head is tied to it (then full);
* MTP heads and vision/audio towers: left out (not read per decoded text token), and reported.

Anything it cannot place says ``roofline unknown: ...`` (``RooflineUnknown``) rather than guess.
``ceiling_tok_s = bandwidth / bytes_per_token`` is the single-stream upper bound.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path

import requests

from edgevllm.common.dataload import load_json, load_text
from edgevllm.common.errors import NoSuchModelError, RooflineUnknown
from edgevllm.common.http import InsecureRedirect, bearer, credential_session
from edgevllm.common.paths import host_hf_cache
from edgevllm.common.schema import json_object

_MAX_HEADER = 100 * 1024 * 1024  # the safetensors spec caps the header at 100 MB
_EXPERT = re.compile(r"\.experts\.(\d+)\.")
_FUSED_EXPERT = re.compile(r"\.experts\.[A-Za-z_]")
_SKIPPED = re.compile(r"(^|\.)(mtp|visual|vision_tower|vision_model|audio_tower|"
                      r"multi_modal_projector)\.")
_EMBED = re.compile(r"(embed_tokens|word_embeddings|(^|\.)wte)\.weight$")
_LM_HEAD = re.compile(r"(^|\.)(lm_head|output)\.weight$")
_NUM_EXPERTS = ("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts")
_TOP_K = ("num_experts_per_tok", "moe_top_k", "top_k", "moe_topk")


@dataclass
class Roofline:
    """Bytes read per decoded token, by kind, and (with a bandwidth) the single-stream ceiling."""

    model: str
    bytes_per_token: int
    dense_bytes: int
    routed_expert_bytes_total: int
    routed_expert_bytes_per_token: int
    embedding_bytes_per_token: int
    lm_head_bytes: int
    skipped_bytes: int
    num_experts: int | None
    top_k: int | None
    tensors: int
    bandwidth_gbps: float | None = None
    ceiling_tok_s: float | None = None
    notes: list[str] = field(default_factory=list)

    def with_bandwidth(self, gbps: float) -> "Roofline":
        self.bandwidth_gbps = gbps
        self.ceiling_tok_s = gbps * 1e9 / self.bytes_per_token
        return self

    def as_dict(self) -> dict:
        return asdict(self)


# -- reading headers ----------------------------------------------------------------------------
def parse_header(head: bytes, where: str) -> dict:
    """The JSON header of a safetensors file from its first bytes (8-byte length + JSON): tensor
    name → ``{"data_offsets": [start, end], "shape": [...], ...}``, each entry checked."""
    if len(head) < 8:
        raise RooflineUnknown(f"roofline unknown: {where} is not a safetensors file (too short)")
    (length,) = struct.unpack("<Q", head[:8])
    if length > _MAX_HEADER or len(head) < 8 + length:
        raise RooflineUnknown(f"roofline unknown: {where} has a bad safetensors header length")
    header = json_object(head[8:8 + length], f"roofline unknown: {where} header", RooflineUnknown)
    header.pop("__metadata__", None)
    for name, info in header.items():
        _check_entry(name, info, where)
    return header


def _check_entry(name: str, info: object, where: str) -> None:
    offsets = info.get("data_offsets") if isinstance(info, dict) else None
    shape = info.get("shape", []) if isinstance(info, dict) else None
    good = (isinstance(offsets, list) and len(offsets) == 2
            and all(type(n) is int for n in offsets) and 0 <= offsets[0] <= offsets[1]
            and isinstance(shape, list) and all(type(n) is int and n >= 0 for n in shape))
    if not good:
        raise RooflineUnknown(f"roofline unknown: {where}: tensor {name[:80]!r} has no valid "
                              "data_offsets/shape")


def _local_header(path: Path) -> dict:
    with open(path, "rb") as handle:
        first = handle.read(8)
        if len(first) < 8:
            raise RooflineUnknown(f"roofline unknown: {path} is not a safetensors file (too short)")
        (length,) = struct.unpack("<Q", first)
        handle.seek(0)
        header = parse_header(handle.read(8 + min(length, _MAX_HEADER)), str(path))
        _check_held(header, os.fstat(handle.fileno()).st_size - 8 - length, path)
        return header


def _check_held(header: dict, data_bytes: int, path: Path) -> None:
    """A local file holds every byte its header counts: a tensor ending past the file is a cut
    download or a header that lies, and its size would count bytes no one can read."""
    for name, info in header.items():
        end = info["data_offsets"][1]
        if end > data_bytes:
            raise RooflineUnknown(f"roofline unknown: {path}: tensor {name[:80]!r} ends at byte "
                                  f"{end} of the data, the file holds {max(data_bytes, 0)}; a "
                                  "cut or damaged file (download it again)")


def _http_get(url: str, headers: dict) -> requests.Response:
    """A GET with HF_TOKEN for the Hub's host only (common/http drops it on a redirect away)."""
    token = bearer(os.environ.get("HF_TOKEN"))
    try:
        response = credential_session().get(url, headers={**headers, **token}, timeout=60,
                                            stream=True)
    except InsecureRedirect as exc:
        raise RooflineUnknown(f"roofline unknown: {exc}") from None
    except requests.RequestException as exc:
        raise RooflineUnknown(f"roofline unknown: cannot reach {url} "
                              f"({type(exc).__name__})") from None
    return response


def _http_range(url: str, start: int, end: int) -> bytes:
    response = _http_get(url, {"Range": f"bytes={start}-{end}"})
    with response:
        if response.status_code >= 400:
            raise RooflineUnknown(f"roofline unknown: {url}: {refusal(response.status_code)}")
        return response.raw.read(end - start + 1, decode_content=True)


def refusal(status: int) -> str:
    """What an HTTP error of the Hub means for the user, given whether HF_TOKEN is set."""
    if status not in (401, 403):
        return f"HTTP {status} (the Hub's answer; try again later)"
    if os.environ.get("HF_TOKEN"):
        return (f"HTTP {status}: the Hub refused the HF_TOKEN that is set (gated or private: "
                "accept the model's terms, or use a token with access to it)")
    return f"HTTP {status} (gated or private: set HF_TOKEN)"


def _http_header(url: str) -> dict:
    (length,) = struct.unpack("<Q", _http_range(url, 0, 7))
    if length > _MAX_HEADER:
        raise RooflineUnknown(f"roofline unknown: {url} has a bad safetensors header length")
    return parse_header(_http_range(url, 0, 7 + length), url)


_MAX_TEXT = 16 << 20  # config.json, the safetensors index: kilobytes to a few megabytes


class _Source:
    """Where the checkpoint's files are: a local folder, or the Hub over HTTP (headers only)."""

    def __init__(self, spec: str):
        self.spec = spec
        self.folder = _local_folder(spec)

    def text(self, name: str) -> str | None:
        if self.folder is not None:
            path = self.folder / name  # others' file: bounded as the Hub's, UTF-8 or one line
            return load_text(path, RooflineUnknown, _MAX_TEXT) if path.is_file() else None
        response = _http_get(self._url(name), {})
        with response:
            if response.status_code == 404:
                return None
            if response.status_code >= 400:
                raise RooflineUnknown(f"roofline unknown: {self._url(name)}: "
                                      f"{refusal(response.status_code)}")
            data = response.raw.read(_MAX_TEXT + 1, decode_content=True)
            if len(data) > _MAX_TEXT:
                raise RooflineUnknown(f"roofline unknown: {self._url(name)} is over {_MAX_TEXT}"
                                      " bytes; not a model's file")
            return data.decode("utf-8", "replace")

    def header(self, name: str) -> dict:
        if self.folder is not None:
            return _local_header(self.folder / name)
        return _http_header(self._url(name))

    def weight_files(self) -> list[str]:
        index = self.text("model.safetensors.index.json")
        if index:
            return weight_files_of(index, self.spec)
        if self.folder is not None:
            return sorted(p.name for p in self.folder.glob("*.safetensors"))
        return ["model.safetensors"]

    def _url(self, name: str) -> str:
        endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
        return f"{endpoint}/{self.spec}/resolve/main/{name}"


def weight_files_of(index_text: str, model: str) -> list[str]:
    """The weight files ``model.safetensors.index.json`` names (plain file names only)."""
    try:
        index = load_json(index_text, model, RooflineUnknown)
    except RooflineUnknown:
        index = None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    files = set(weight_map.values()) if isinstance(weight_map, dict) else set()
    if not files or not all(isinstance(f, str) and f and "/" not in f and f not in (".", "..")
                            for f in files):
        raise RooflineUnknown(f"roofline unknown: {model}: model.safetensors.index.json has no "
                              "weight_map of plain file names")
    return sorted(files)


def _local_folder(spec: str) -> Path | None:
    path = Path(spec).expanduser()
    if path.is_dir():
        return path
    if spec.count("/") != 1 or spec.startswith((".", "/")):
        raise NoSuchModelError(f"roofline unknown: {spec} is neither a folder nor a model id "
                              "(org/name)")
    hub = host_hf_cache() / "hub"
    snapshots = hub / f"models--{spec.replace('/', '--')}" / "snapshots"
    found = sorted(snapshots.glob("*/config.json"), key=lambda p: p.stat().st_mtime)
    return found[-1].parent if found else None


# -- counting ------------------------------------------------------------------------------------
def _config_int(config: dict, keys: tuple[str, ...]) -> int | None:
    for scope in (config, config.get("text_config") or {}, config.get("llm_config") or {}):
        if not isinstance(scope, dict):
            continue
        for key in keys:
            if isinstance(scope.get(key), int) and scope[key] > 0:
                return scope[key]
    return None


def _tied(config: dict) -> bool:
    text = config.get("text_config")
    text = text if isinstance(text, dict) else {}
    return bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", False)))


def _stored(info: dict) -> int:
    start, end = info["data_offsets"]
    return int(end) - int(start)


def _classify(name: str) -> str:
    if _SKIPPED.search(name):
        return "skipped"
    if "shared_expert" in name:
        return "dense"
    if _EXPERT.search(name) or _FUSED_EXPERT.search(name):
        return "routed"
    if _EMBED.search(name):
        return "embed"
    if _LM_HEAD.search(name):
        return "lm_head"
    return "dense"


def count_tensors(tensors: dict[str, dict], config: dict, model: str) -> Roofline:
    """The roofline of one checkpoint from its merged header entries and its config."""
    sums = {"dense": 0, "routed": 0, "embed": 0, "lm_head": 0, "skipped": 0}
    embed_rows = 0
    for name, info in tensors.items():
        kind = _classify(name)
        sums[kind] += _stored(info)
        if kind == "embed" and name.endswith("weight") and info.get("shape"):
            embed_rows = int(info["shape"][0])
    experts, top_k = _config_int(config, _NUM_EXPERTS), _config_int(config, _TOP_K)
    routed = _routed_per_token(sums["routed"], experts, top_k, model)
    embed = _embed_per_token(sums, embed_rows, _tied(config), model)
    notes = []
    if sums["skipped"]:
        notes.append(f"left out {sums['skipped']} bytes of MTP/vision tensors (not read per "
                     "decoded text token)")
    if sums["embed"] and not sums["lm_head"] and _tied(config):
        notes.append("lm_head tied to the embedding: the table counts in full")
    total = sums["dense"] + routed + embed + sums["lm_head"]
    return Roofline(model=model, bytes_per_token=total, dense_bytes=sums["dense"],
                    routed_expert_bytes_total=sums["routed"],
                    routed_expert_bytes_per_token=routed, embedding_bytes_per_token=embed,
                    lm_head_bytes=sums["lm_head"], skipped_bytes=sums["skipped"],
                    num_experts=experts if sums["routed"] else None,
                    top_k=top_k if sums["routed"] else None, tensors=len(tensors), notes=notes)


def _routed_per_token(routed: int, experts: int | None, top_k: int | None, model: str) -> int:
    if not routed:
        if experts and experts > 1:
            raise RooflineUnknown(f"roofline unknown: {model}: config.json says {experts} experts "
                                  "but no tensor name matches '.experts.'")
        return 0
    if not experts or not top_k:
        raise RooflineUnknown(f"roofline unknown: {model} has expert tensors but config.json "
                              f"gives no expert count ({'/'.join(_NUM_EXPERTS)}) or top-k "
                              f"({'/'.join(_TOP_K)})")
    if top_k > experts:
        raise RooflineUnknown(f"roofline unknown: {model}: top-k {top_k} > {experts} experts")
    return routed * top_k // experts


def _embed_per_token(sums: dict, rows: int, tied: bool, model: str) -> int:
    if not sums["embed"]:
        return 0
    if tied and not sums["lm_head"]:
        return sums["embed"]
    if rows <= 0:
        raise RooflineUnknown(f"roofline unknown: {model}: embedding table without a row count")
    return sums["embed"] // rows


def weights_per_token(model: str) -> Roofline:
    """Read the headers and config of ``model`` (folder, cached id, or Hub id) and count."""
    source = _Source(model)
    config_text = source.text("config.json")
    if config_text is None:
        raise RooflineUnknown(f"roofline unknown: {model} has no config.json")
    tensors: dict[str, dict] = {}
    for name in source.weight_files():
        try:
            tensors.update(source.header(name))
        except (OSError, ValueError) as exc:
            raise RooflineUnknown(f"roofline unknown: cannot read the header of {name} of "
                                  f"{model} ({exc})") from None
    if not tensors:
        raise RooflineUnknown(f"roofline unknown: {model} has no safetensors weights")
    return count_tensors(tensors, parse_config(config_text, model), model)


def parse_config(text: str, model: str) -> dict:
    return json_object(text, f"roofline unknown: {model}: config.json", RooflineUnknown)


def _size(count: int) -> str:
    """Decimal units (GB = 1e9 bytes), the unit memory bandwidth is quoted in."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.3f} {unit}"
    return f"{count} B"


def format_roofline(roof: Roofline) -> str:
    """Human lines for ``inv roofline``."""
    routed = (f"  routed experts {_size(roof.routed_expert_bytes_per_token)} (top-k {roof.top_k} "
              f"of {roof.num_experts} experts: {_size(roof.routed_expert_bytes_total)} stored)"
              if roof.num_experts else "  routed experts none")
    lines = [f"model            {roof.model}",
             f"bytes per token  {_size(roof.bytes_per_token)} ({roof.bytes_per_token} bytes, "
             f"{roof.tensors} tensors)",
             f"  dense          {_size(roof.dense_bytes)} (attention, MLP, norms, router, "
             "shared experts)",
             routed,
             f"  lm_head        {_size(roof.lm_head_bytes)}",
             f"  embedding      {_size(roof.embedding_bytes_per_token)} (one row)"]
    if roof.ceiling_tok_s is not None:
        lines.append(f"ceiling          {roof.ceiling_tok_s:.1f} tok/s single-stream at "
                     f"{roof.bandwidth_gbps:g} GB/s")
    lines += [f"note             {n}" for n in roof.notes]
    return "\n".join(lines)
