"""The in-container start probe (``serve/inimage_startprobe.py``) run as a real ``python3``
process against a server on 127.0.0.1 whose completion stream is what a broken or hostile server
sends: it must always print one JSON line and exit 0 ("it never raises"), with the time it could
measure and an ``error`` naming what it could not."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
from pathlib import Path

import pytest

from edgevllm.serve import inimage_startprobe as startprobe
from support.localhttp import serve_handler

PROBE = Path(__file__).resolve().parents[1] / "edgevllm" / "serve" / "inimage_startprobe.py"


def stream_handler(stream: bytes, health_status: int = 200):
    """/health answers ``health_status``; /v1/completions answers 200 with ``stream`` as its
    body (what a server streams as server-sent events); the request body is kept."""
    class Handler(http.server.BaseHTTPRequestHandler):
        bodies: list[dict] = []

        def do_GET(self):  # noqa: N802 (http.server's name)
            self.send_response(health_status if self.path == "/health" else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_POST(self):  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            Handler.bodies.append(json.loads(self.rfile.read(length)))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(stream)))
            self.end_headers()
            self.wfile.write(stream)

        def log_message(self, *args):
            pass

    return Handler


def probe(base: str, deadline_s: float = 20, model: str = "m") -> dict:
    """The probe as the container runs it: a ``python3`` process; exit 0 and one JSON line."""
    proc = subprocess.run([sys.executable, str(PROBE), json.dumps(config(base, deadline_s, model))],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    (line,) = proc.stdout.splitlines()
    return json.loads(line)


def probe_here(base: str, capsys: pytest.CaptureFixture[str], deadline_s: float = 20) -> dict:
    """The probe's ``main`` in this process (faster on a loaded machine): it returns 0 and prints
    one JSON line, and any exception it lets out fails the test as a traceback would."""
    capsys.readouterr()
    assert startprobe.main([json.dumps(config(base, deadline_s))]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    return json.loads(line)


def config(base: str, deadline_s: float, model: str = "m") -> dict:
    return {"health": base + "/health", "completions": base + "/v1/completions",
            "model": model, "deadline_s": deadline_s}


def events(*chunks: str) -> bytes:
    return "".join(f"data: {chunk}\n\n" for chunk in chunks).encode()


def test_first_chunk_with_text_is_the_first_token():
    handler = stream_handler(events('{"choices": [{"text": ""}]}', '{"choices": [{"text": "A"}]}',
                                    "[DONE]"))
    with serve_handler(handler) as base:
        found = probe(base, model="fixture/model")
    assert "error" not in found, found
    assert found["first_token"] >= found["healthy"] > 0
    (body,) = handler.bodies
    assert body["model"] == "fixture/model" and body["stream"] is True
    assert body["max_tokens"] > 0


@pytest.mark.parametrize("stream", [
    events("[DONE]"),
    events('{"choices": []}', "[DONE]"),
    events('{"usage": {"completion_tokens": 0}}', '{"choices": null}', "[DONE]"),
    b": a comment line\n\nevent: ping\n\n",
    b"",
], ids=["done-only", "no-choices", "usage-only", "no-data", "empty"])
def test_stream_without_text_is_an_error_not_a_time(stream, capsys):
    with serve_handler(stream_handler(stream)) as base:
        found = probe_here(base, capsys)
    assert found["healthy"] and "first_token" not in found
    assert found["error"] == "first token: the stream ended without a token"


@pytest.mark.parametrize("chunk", [
    "{not json", "5", "[1, 2]", '"text"', "null", '{"choices": 7}', '{"choices": [1]}',
    '{"choices": [null]}', '{"choices": "A"}',
])
def test_hostile_chunk_is_an_error_line_never_a_traceback(chunk, capsys):
    # A chunk of another shape than a completion's was an AttributeError traceback and no line.
    with serve_handler(stream_handler(events(chunk, '{"choices": [{"text": "late"}]}'))) as base:
        found = probe_here(base, capsys)
    assert found["healthy"] > 0 and "first_token" not in found
    assert found["error"].startswith("first token: "), found


def test_health_that_never_answers_200_is_not_healthy(capsys):
    # 204 is a success to urllib, but vLLM's /health answers 200: anything else keeps waiting.
    with serve_handler(stream_handler(events('{"choices": [{"text": "A"}]}'), 204)) as base:
        found = probe_here(base, capsys, deadline_s=1)
    assert found == {"healthy": None, "error": "not healthy before the deadline"}
    assert "first_token" not in found


def test_nothing_listening_is_not_healthy():
    with serve_handler(stream_handler(b"")) as base:
        pass  # the port is closed again: a server that is not there
    assert probe(base, deadline_s=1)["error"] == "not healthy before the deadline"


def test_a_hostile_chunk_in_the_container_process_still_prints_its_line():
    with serve_handler(stream_handler(events("[1, 2]"))) as base:
        found = probe(base)
    assert found["error"].startswith("first token: a chunk is not a completion: [1, 2]")
