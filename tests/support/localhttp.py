"""Servers on 127.0.0.1 for tests (this machine reaches nothing else): one owner for starting a
server in a thread, handing its base URL to the test and shutting it down, whatever the handler
(an HTTP page map, a hand-written HTTP handler, or raw bytes on a socket that is not HTTP)."""

from __future__ import annotations

import contextlib
import http.server
import socketserver
import threading
from typing import Iterator, Mapping


@contextlib.contextmanager
def serve_handler(handler: type[socketserver.BaseRequestHandler],
                  kind: type[socketserver.TCPServer] | None = None) -> Iterator[str]:
    """``handler`` served by a threading server of ``kind`` (HTTP unless given) on a free port
    of 127.0.0.1; yields ``http://127.0.0.1:PORT`` and shuts the server down after."""
    server = (kind or http.server.ThreadingHTTPServer)(("127.0.0.1", 0), handler)
    server.daemon_threads = True  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def pages_handler(pages: Mapping[str, bytes]) -> type[http.server.BaseHTTPRequestHandler]:
    """A GET handler answering each path of ``pages`` (read at each request, so a test may
    change the map while it serves) with its bytes, and 404 for any other path."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            body = pages.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args):
            pass

    return Handler


@contextlib.contextmanager
def serve_pages(pages: Mapping[str, bytes]) -> Iterator[str]:
    """``pages`` (path -> bytes) served on 127.0.0.1; yields the base URL."""
    with serve_handler(pages_handler(pages)) as base:
        yield base
