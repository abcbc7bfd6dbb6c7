"""A stand-in for the web (this machine reaches none of it): an HTTP server on 127.0.0.1 serving
the files a test names, by path. edgevllm fetches from others over https, and plain http on
loopback only, so the server is reached as itself (no proxy)."""

from __future__ import annotations

import contextlib
import http.server
import shutil
import threading
from pathlib import Path
from typing import Iterator

PLUGIN = b"# stand-in reasoning parser plugin\n"
PLUGIN_PATH = "/parsers/plugin_parser.py"
# What the eugr fixture mod downloads (tests/fixtures/eugr-recipes/mods/plugin-download).
PLUGIN_URL = "http://example.org/parsers/plugin_parser.py"


@contextlib.contextmanager
def serve(files: dict[str, bytes]) -> Iterator[str]:
    """``files`` (path -> bytes, changeable while it runs) served on 127.0.0.1; its base URL."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = files.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def plugin_mod(fixture: Path, dest: Path, base_url: str) -> Path:
    """A copy of the eugr fixture mod ``fixture`` at ``dest`` whose run.sh downloads from
    ``base_url`` (the stand-in) instead of example.org."""
    shutil.copytree(fixture, dest)
    script = dest / "run.sh"
    script.write_text(script.read_text().replace("http://example.org", base_url))
    return dest
