#!/usr/bin/env python3
"""A fake `vllm serve` for the level-2 probe tests: there is no GPU here, so no real vLLM runs.

It serves the endpoints the probe uses (/health, /v1/models, /v1/chat/completions) and is
steered by environment variables:
  FAKE_VLLM_LOG           lines to print at start-up (newline-separated), e.g. a known-bad line
  FAKE_VLLM_STARTUP_S     seconds before /health turns 200 (default 1)
  FAKE_VLLM_NEVER_HEALTHY /health stays 503
  FAKE_VLLM_EXIT_CODE     print the log, then exit with this code instead of serving
  FAKE_VLLM_CHAT_STATUS   HTTP status of chat completions (default 200)
"""

import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STARTED = time.monotonic()


def log(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def parse(argv):
    if len(argv) < 2 or argv[0] != "serve":
        log("usage: vllm serve MODEL [--host H] [--port P] ...")
        sys.exit(2)
    model, host, port, i = argv[1], "0.0.0.0", 8000, 2
    while i < len(argv):
        if argv[i] == "--host":
            host, i = argv[i + 1], i + 2
        elif argv[i] == "--port":
            port, i = int(argv[i + 1]), i + 2
        else:
            i += 1
    return model, host, port


class Handler(BaseHTTPRequestHandler):
    model = ""

    def log_message(self, fmt, *args):
        log("INFO fake-vllm: %s %s" % (self.command, self.path))

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def healthy(self):
        delay = float(os.environ.get("FAKE_VLLM_STARTUP_S", "1"))
        return not os.environ.get("FAKE_VLLM_NEVER_HEALTHY") and time.monotonic() - STARTED >= delay

    def do_GET(self):
        if self.path == "/health":
            self.reply(200 if self.healthy() else 503, {})
        elif self.path == "/v1/models":
            self.reply(200, {"object": "list", "data": [{"id": self.model, "object": "model"}]})
        else:
            self.reply(404, {"error": "not found"})

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        request = json.loads(self.rfile.read(length) or b"{}")
        if self.path != "/v1/chat/completions":
            self.reply(404, {"error": "not found"})
            return
        status = int(os.environ.get("FAKE_VLLM_CHAT_STATUS", "200"))
        if status != 200:
            self.reply(status, {"error": {"message": "fake failure"}})
            return
        self.reply(200, {
            "id": "chatcmpl-fake", "object": "chat.completion", "model": request.get("model"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "Hello."}}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}})


def main():
    model, host, port = parse(sys.argv[1:])
    log("INFO fake-vllm: serving %s on %s:%d, args %s" % (model, host, port, sys.argv[1:]))
    for line in os.environ.get("FAKE_VLLM_LOG", "").split("\n"):
        if line:
            log(line)
    if os.environ.get("FAKE_VLLM_EXIT_CODE"):
        sys.exit(int(os.environ["FAKE_VLLM_EXIT_CODE"]))
    Handler.model = model
    ThreadingHTTPServer((host, port), Handler).serve_forever()


if __name__ == "__main__":
    main()
