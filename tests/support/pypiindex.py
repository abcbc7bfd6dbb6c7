"""A local package index for tests (an HTTP server on 127.0.0.1): PyPI's JSON API shape for one
project, and the files it names (real tarballs the test makes), served from memory."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import io
import json
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator


def tarball(files: dict[str, bytes], top: str) -> bytes:
    """A .tar.gz holding ``files`` under the folder ``top`` (as an sdist does)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


def sdist_entry(name: str, version: str, uploaded: dt.datetime, body: bytes,
                yanked: bool = False, sha: str | None = None) -> list[dict]:
    """A release's files as the JSON API lists them: a wheel (ignored) and the sdist."""
    when = uploaded.isoformat().replace("+00:00", "Z")
    return [{"packagetype": "bdist_wheel", "filename": "x.whl"},
            {"packagetype": "sdist", "filename": f"{name}-{version}.tar.gz",
             "url": f"../../files/{name}-{version}.tar.gz", "size": len(body),
             "digests": {"sha256": sha or hashlib.sha256(body).hexdigest()},
             "upload_time_iso_8601": when, "yanked": yanked,
             "yanked_reason": "broken wheel" if yanked else None}]


@contextlib.contextmanager
def serve_index(name: str, releases: dict[str, list[dict]],
                files: dict[str, bytes]) -> Iterator[str]:
    """Serve ``/pypi/<name>/json`` and ``/files/<file>``; yields the base for
    ``EDGEVLLM_PYPI_URL``."""
    pages = {f"/pypi/{name}/json": json.dumps({"releases": releases}).encode()}
    pages.update({f"/files/{file}": body for file, body in files.items()})

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            data = pages.get(self.path)
            self.send_response(200 if data is not None else 404)
            self.send_header("Content-Length", str(len(data or b"")))
            self.end_headers()
            self.wfile.write(data or b"")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/pypi"
    finally:
        server.shutdown()
        server.server_close()
