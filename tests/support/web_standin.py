"""A stand-in for the web (this machine reaches none of it): an HTTP proxy on 127.0.0.1 that
answers the one URL the eugr fixture mods download. urllib reaches it through ``http_proxy``, as
it reaches a real proxy."""

from __future__ import annotations

import contextlib
import http.server
import threading

PLUGIN = b"# stand-in reasoning parser plugin\n"
PLUGIN_URL = "http://example.org/parsers/plugin_parser.py"


class _Proxy(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        found = self.path == PLUGIN_URL
        self.send_response(200 if found else 404)
        self.send_header("Content-Length", str(len(PLUGIN) if found else 0))
        self.end_headers()
        if found:
            self.wfile.write(PLUGIN)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def proxy():
    """Yields the environment that points urllib at the stand-in."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Proxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield {"http_proxy": f"http://127.0.0.1:{server.server_address[1]}", "no_proxy": "",
               "NO_PROXY": ""}
    finally:
        server.shutdown()
