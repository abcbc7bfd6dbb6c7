"""A fixture OpenAI-compatible server that stands in for a GPU-backed vLLM server in bench tests.

It streams ``/v1/completions`` as server-sent events the way vLLM does: the first token after
``ttft_s``, then one token every ``itl_s`` up to ``max_tokens``, then a usage chunk and
``[DONE]``. ``/health`` answers 200 (or 503 with ``healthy=False``); ``fail=True`` answers every
completion with HTTP 500. It runs on its own event loop in a thread, on a free local port, so the
real ``vllm bench serve`` client can drive it at any concurrency.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from dataclasses import dataclass

from aiohttp import web


@dataclass
class ServerConfig:
    ttft_s: float = 0.05
    itl_s: float = 0.02
    model: str = "fixture-model"
    healthy: bool = True
    fail: bool = False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _chunk(payload: dict) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


class BenchServer:
    """``with BenchServer(ServerConfig(...)) as server: server.url`` (``http://127.0.0.1:PORT``)."""

    def __init__(self, config: ServerConfig):
        self.config = config
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.requests = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._started = threading.Event()
        self._runner: web.AppRunner | None = None

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/completions", self._completions)
        return app

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.config.healthy else 503)

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.config.model}]})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests += 1
        if self.config.fail:
            return web.Response(status=500, reason="fixture failure")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        tokens = int(body.get("max_tokens") or 16)
        start = time.perf_counter()
        for index in range(tokens):
            # sleep to an absolute schedule so the delays do not accumulate event-loop jitter
            due = start + self.config.ttft_s + index * self.config.itl_s
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            await response.write(_chunk({"id": "cmpl", "object": "text_completion",
                                         "model": self.config.model,
                                         "choices": [{"index": 0, "text": " tok",
                                                      "finish_reason": None}]}))
        await response.write(_chunk({"id": "cmpl", "choices": [], "usage": {
            "prompt_tokens": 1, "completion_tokens": tokens, "total_tokens": tokens + 1}}))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._runner = web.AppRunner(self._app())
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        self._loop.run_until_complete(site.start())
        self._started.set()
        self._loop.run_forever()

    def __enter__(self) -> "BenchServer":
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("fixture bench server did not start")
        return self

    def __exit__(self, *exc) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
