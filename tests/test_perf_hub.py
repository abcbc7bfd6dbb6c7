"""``inv roofline org/name`` reads a model from the Hub (``HF_ENDPOINT``, here a server on
127.0.0.1 that records each request): without an index the one ``model.safetensors`` is read;
only header bytes travel; HF_TOKEN goes to the Hub's host and is dropped on a redirect to
another; a file over the text bound, a header claiming more than a header may hold, a shard the
Hub refuses and a Hub that is not there are each one line starting ``roofline unknown``."""

from __future__ import annotations

import json
import socket
import struct
from http.server import BaseHTTPRequestHandler
from typing import Iterator

import pytest

from edgevllm.common.errors import RooflineUnknown
from edgevllm.perf import roofline
from edgevllm.perf.roofline import weights_per_token
from support.localhttp import serve_handler

TOKEN = "hf_" + "k" * 34
WEIGHT = {"model.layers.0.mlp.up_proj.weight": {"dtype": "BF16", "shape": [64, 64],
                                                 "data_offsets": [0, 8192]}}


def _safetensors(header: dict, data_bytes: int) -> bytes:
    blob = json.dumps(header).encode()
    return struct.pack("<Q", len(blob)) + blob + b"\0" * data_bytes


class _Hub(BaseHTTPRequestHandler):
    """Serves ``files`` under /org/m/resolve/main/; ``moved`` answers 302 to another URL;
    ``seen`` records (path, Authorization, bytes sent)."""

    files: dict[str, bytes] = {}
    moved: dict[str, str] = {}
    seen: list[tuple[str, str | None, int]] = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        name = self.path.rsplit("/", 1)[-1]
        if name in self.moved:
            self.send_response(302)
            self.send_header("Location", self.moved[name])
            self.send_header("Content-Length", "0")
            self.end_headers()
            self.seen.append((self.path, self.headers.get("Authorization"), 0))
            return
        body = self.files.get(name)
        if body is None:
            self.send_error(404)
            self.seen.append((self.path, self.headers.get("Authorization"), 0))
            return
        span = self.headers.get("Range")
        if span:
            start, end = (int(n) for n in span.removeprefix("bytes=").split("-"))
            body = body[start:end + 1]
        self.send_response(206 if span else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.seen.append((self.path, self.headers.get("Authorization"), len(body)))

    def log_message(self, *args):
        pass


@pytest.fixture
def hub(tmp_path, monkeypatch) -> Iterator[type[_Hub]]:
    _Hub.files, _Hub.moved, _Hub.seen = {}, {}, []
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with serve_handler(_Hub) as base:
        monkeypatch.setenv("HF_ENDPOINT", base)
        yield _Hub


def test_without_an_index_the_one_weight_file_is_read_by_its_header_alone(hub):
    hub.files = {"config.json": b"{}", "model.safetensors": _safetensors(WEIGHT, 8192)}
    roof = weights_per_token("org/m")
    assert roof.bytes_per_token == 8192 and roof.tensors == 1
    asked = [path.rsplit("/", 1)[-1] for path, _, _ in hub.seen]
    assert asked == ["config.json", "model.safetensors.index.json", "model.safetensors",
                     "model.safetensors"]  # the header's length, then the header
    assert sum(sent for _, _, sent in hub.seen) < 1000  # never the 8 KiB of weights


def test_the_token_goes_to_the_hub_and_not_through_a_redirect_to_another_host(hub,
                                                                               monkeypatch):
    class Elsewhere(_Hub):
        seen: list[tuple[str, str | None, int]] = []

    Elsewhere.files, Elsewhere.moved = {"config.json": b"{}"}, {}
    with serve_handler(Elsewhere) as other:
        hub.moved = {"config.json": f"{other.replace('127.0.0.1', 'localhost')}/config.json"}
        hub.files = {"model.safetensors": _safetensors(WEIGHT, 8192)}
        monkeypatch.setenv("HF_TOKEN", TOKEN)
        assert weights_per_token("org/m").bytes_per_token == 8192
    assert Elsewhere.seen == [("/config.json", None, 2)]  # the token stayed behind
    assert all(auth == f"Bearer {TOKEN}" for path, auth, _ in hub.seen)


@pytest.mark.parametrize(("files", "said"), [
    ({}, "roofline unknown: org/m has no config.json"),
    ({"config.json": b"[1]", "model.safetensors": _safetensors(WEIGHT, 8192)},
     "roofline unknown: org/m: config.json"),
    ({"config.json": b"{}", "model.safetensors.index.json": b"{\"weight_map\": {}}"},
     "has no weight_map of plain file names"),
    ({"config.json": b"{}", "model.safetensors": struct.pack("<Q", 1 << 40)},
     "has a bad safetensors header length"),
    ({"config.json": b"{}", "model.safetensors.index.json":
      json.dumps({"weight_map": {"w": "gone.safetensors"}}).encode()},
     "gone.safetensors: HTTP 404 (the Hub's answer; try again later)"),
], ids=["no-config", "config-list", "empty-index", "huge-header", "missing-shard"])
def test_what_the_hub_holds_that_cannot_be_counted_is_one_line(hub, files, said):
    hub.files = files
    with pytest.raises(RooflineUnknown) as raised:
        weights_per_token("org/m")
    assert said in str(raised.value) and "\n" not in str(raised.value)


def test_a_file_over_the_text_bound_is_refused_as_no_models_file(hub, monkeypatch):
    monkeypatch.setattr(roofline, "_MAX_TEXT", 100)
    hub.files = {"config.json": b"{" + b" " * 200 + b"}"}
    with pytest.raises(RooflineUnknown, match=r"config.json is over 100 bytes; not a model's "
                                              r"file"):
        weights_per_token("org/m")


def test_a_hub_that_is_not_there_is_one_line(tmp_path, monkeypatch):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    with pytest.raises(RooflineUnknown, match=rf"roofline unknown: cannot reach "
                                              rf"http://127.0.0.1:{port}/org/m/resolve/main/"
                                              r"config.json \(ConnectionError\)"):
        weights_per_token("org/m")
