"""Probe level 2's talk with a server (``probe/level2.py``: ``http``, ``check_models``,
``check_chat``, ``judge_log``), against real HTTP servers on 127.0.0.1 that answer as vLLM does,
and as a broken image's server might: not JSON, the wrong shapes, errors, nothing at all. The
image under test is what is being judged, so whatever it answers is a FAIL check naming what
was seen, never a crash of the probe. (Serving in a container: tests/test_probe_level2.py.)"""

from __future__ import annotations

import contextlib
import json
import socket
import socketserver
from http.server import BaseHTTPRequestHandler
from typing import Any, Iterator

import pytest

from edgevllm.probe.level2 import ServeSettings, check_chat, check_models, http, judge_log
from edgevllm.probe.result import FAIL, PASS, WARN, ProbeResult
from support.checks import check_of
from support.localhttp import serve_handler

SETTINGS = ServeSettings(request_timeout_s=10)


_ANSWER: dict[str, Any] = {}  # what the module's one server answers now (see _serving)


class _Answering(BaseHTTPRequestHandler):
    """Answers every GET and POST with ``_ANSWER``'s status and body; each POST's JSON body is
    appended to its ``seen`` list."""

    def _answer(self):
        raw = _ANSWER["raw"]
        self.send_response(_ANSWER["status"])
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self):  # noqa: N802 (http.server's name)
        self._answer()

    def do_POST(self):  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        _ANSWER["seen"].append((self.path, json.loads(self.rfile.read(length))))
        self._answer()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """One server for the module (each start and stop costs half a second)."""
    with serve_handler(_Answering) as base:
        yield base


@contextlib.contextmanager
def _serving(base: str, status: int, body: bytes | Any,
             seen: list | None = None) -> Iterator[str]:
    """The module's server at ``base`` answering ``status`` and ``body`` (JSON unless bytes)."""
    _ANSWER.update(status=status, seen=seen if seen is not None else [],
                   raw=body if isinstance(body, bytes) else json.dumps(body).encode())
    yield base


def _result() -> ProbeResult:
    return ProbeResult("image", "spark", 2)


def test_http_reads_json_text_errors_and_a_closed_port(server):
    with _serving(server, 200, {"a": 1}) as base:
        assert http("GET", f"{base}/x") == (200, {"a": 1})
    with _serving(server, 503, b"starting up") as base:
        assert http("GET", f"{base}/health") == (503, "starting up")
    with _serving(server, 200, b"") as base:
        assert http("GET", f"{base}/health") == (200, None)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert http("GET", f"http://127.0.0.1:{port}/health", timeout=2) == (0, None)


def test_a_server_listing_models_passes_with_the_first_id(server):
    answer = {"object": "list", "data": [{"id": "Qwen/Qwen3-0.6B"}, {"id": "second"}]}
    with _serving(server, 200, answer) as base:
        result = _result()
        assert check_models(result, base, SETTINGS) == "Qwen/Qwen3-0.6B"
    assert check_of(result, "models").message == "serves Qwen/Qwen3-0.6B, second"


@pytest.mark.parametrize(("status", "body"), [
    (200, {"data": []}),
    (200, {"data": [{"name": "no id"}, "text", 5, None]}),
    (200, {"data": {"id": "a mapping, not a list"}}),
    (200, {"data": 7}),
    (200, {"data": None}),
    (200, [{"id": "a list, not an object"}]),
    (200, b"<html>It works!</html>"),
    (404, {"detail": "Not Found"}),
    (500, b"Internal Server Error"),
], ids=["empty", "no-ids", "data-mapping", "data-number", "data-null", "list", "html", "404",
        "500"])
def test_a_model_list_that_names_no_model_is_a_failed_check(server, status, body):
    with _serving(server, status, body) as base:
        result = _result()
        assert check_models(result, base, SETTINGS) is None
    found = check_of(result, "models")
    assert found.status == FAIL and f"status {status}, no model listed" in found.message
    assert len(found.detail["body"]) <= 500


def test_a_chat_answer_passes_with_its_text_and_the_request_is_deterministic(server):
    seen: list = []
    answer = {"choices": [{"message": {"role": "assistant", "content": " Hello! "}}],
              "usage": {"completion_tokens": 2}}
    with _serving(server, 200, answer, seen) as base:
        result = _result()
        check_chat(result, base, "m", SETTINGS)
    found = check_of(result, "chat")
    assert found.status == PASS and found.message.endswith(": 'Hello!'")
    assert found.detail["usage"] == {"completion_tokens": 2}
    (path, request), = seen
    assert path == "/v1/chat/completions"
    assert request["model"] == "m" and request["temperature"] == 0 and request["max_tokens"] == 16


def test_a_reasoning_models_answer_counts_its_reasoning_text(server):
    answer = {"choices": [{"message": {"content": None, "reasoning_content": "Thinking..."}}]}
    with _serving(server, 200, answer) as base:
        result = _result()
        check_chat(result, base, "m", SETTINGS)
    assert check_of(result, "chat").status == PASS


@pytest.mark.parametrize(("status", "body"), [
    (200, {"choices": []}),
    (200, {"choices": [{"message": {"content": ""}}]}),
    (200, {"choices": [{"message": None}]}),
    (200, {"choices": ["hello"]}),
    (200, {"choices": "hello"}),
    (200, {"choices": [{"message": "hello"}]}),
    (200, {"choices": [{"message": {"content": 42}}]}),
    (200, {"choices": [{"message": {"content": ["a", "b"]}}]}),
    (200, {"choices": {"0": {"message": {"content": "hi"}}}}),
    (200, [1, 2]),
    (200, b"not json"),
    (400, {"error": {"message": "model not found"}}),
], ids=["no-choices", "empty-text", "null-message", "choice-text", "choices-text",
        "message-text", "content-number", "content-list", "choices-mapping", "list",
        "not-json", "400"])
def test_a_chat_answer_without_completion_text_is_a_failed_check(server, status, body):
    with _serving(server, status, body) as base:
        result = _result()
        check_chat(result, base, "m", SETTINGS)
    found = check_of(result, "chat")
    assert found.status == FAIL and f"status {status}, no completion text" in found.message
    assert "chat_seconds" not in result.facts


def test_the_log_keeps_its_tail_and_names_each_known_bad_line():
    bad = ("RuntimeError: CUDA error: no kernel image is available for execution on the "
           "device")  # signatures.yaml's no-kernel-image, a failure
    lines = [f"INFO line {n}" for n in range(100)] + [bad, "INFO after", bad]
    result = _result()
    judge_log(result, "\n".join(lines))
    assert result.log_tail == lines[-40:]
    found = check_of(result, "signature:no-kernel-image")
    assert found.detail["count"] == 2
    assert found.status == FAIL and found.detail["line_no"] == 101
    assert result.get("log-signatures") is None


def test_a_clean_log_passes_saying_how_many_lines_were_read():
    result = _result()
    judge_log(result, "INFO starting\nINFO Application startup complete.\n")
    found = check_of(result, "log-signatures")
    assert found.status == PASS and found.message == "no known-bad line in 2 log lines"
    assert WARN not in [c.status for c in result.checks]


class _Silent(socketserver.BaseRequestHandler):
    """Accepts the connection and says nothing until the client gives up."""

    def handle(self):
        try:
            while self.request.recv(1024):
                pass
        except OSError:
            return


def test_a_server_that_never_answers_counts_as_unreachable_within_the_timeout():
    """wait_healthy polls /health with this: a server that holds the connection open without a
    word must read as 'not there yet' (0), not hang the probe or raise."""
    with serve_handler(_Silent, socketserver.ThreadingTCPServer) as base:
        assert http("GET", f"{base}/health", timeout=1) == (0, None)


def test_an_error_answer_keeps_its_status_and_its_json(server):
    with _serving(server, 500, {"error": {"message": "CUDA out of memory"}}) as base:
        assert http("POST", f"{base}/v1/chat/completions", {"model": "m"}) == (
            500, {"error": {"message": "CUDA out of memory"}})
        result = _result()
        check_chat(result, base, "m", SETTINGS)
    found = check_of(result, "chat")
    assert found.status == FAIL and "CUDA out of memory" in found.detail["body"]
