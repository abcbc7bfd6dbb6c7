"""A local stand-in for the Hugging Face Hub's HTTP API, for ``inv model-fetch`` tests.

It serves one model repository from memory on 127.0.0.1: the revision info, the file tree and
``resolve`` downloads with ``Range`` support — the calls huggingface_hub makes when
``HF_ENDPOINT`` points at it. ``cut_after[name]`` is a list: each time the file is sent, the next
number in it (if any) is where the connection drops (an interrupted download); every request is
recorded (path, Range, Authorization) so a test can see the resume and the token.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
import urllib.parse
from dataclasses import dataclass, field

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class Seen:
    method: str
    path: str
    range: str | None
    authorization: str | None


@dataclass
class HubFixture:
    repo: str
    files: dict[str, bytes]
    cut_after: dict[str, list[int]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    server: http.server.ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> HubFixture:
        fixture = self

        class Handler(_Handler):
            hub = fixture

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def etag(self, name: str) -> str:
        return hashlib.sha256(self.files[name]).hexdigest()


class _Handler(http.server.BaseHTTPRequestHandler):
    hub: HubFixture
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet: the test reads hub.seen instead
        pass

    def _record(self) -> str:
        path = urllib.parse.urlsplit(self.path).path
        self.hub.seen.append(Seen(self.command, path, self.headers.get("Range"),
                                  self.headers.get("Authorization")))
        return urllib.parse.unquote(path)

    def _json(self, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_HEAD(self) -> None:
        self._serve(self._record(), head=True)

    def do_GET(self) -> None:
        path = self._record()
        api = f"/api/models/{self.hub.repo}/"
        if path.startswith(api + "revision/"):
            self._json({"id": self.hub.repo, "modelId": self.hub.repo, "sha": COMMIT,
                        "private": False,
                        "siblings": [{"rfilename": name} for name in sorted(self.hub.files)]})
        elif path.startswith(api + "tree/"):
            self._json([{"type": "file", "path": name, "size": len(body),
                         "oid": hashlib.sha1(body).hexdigest()}
                        for name, body in sorted(self.hub.files.items())])
        else:
            self._serve(path, head=False)

    def _serve(self, path: str, head: bool) -> None:
        prefix = f"/{self.hub.repo}/resolve/"
        name = path[len(prefix):].split("/", 1)[-1] if path.startswith(prefix) else None
        if name not in self.hub.files:
            self.send_error(404)
            return
        body = self.hub.files[name]
        start = _range_start(self.headers.get("Range"))
        self.send_response(206 if start else 200)
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("ETag", f'"{self.hub.etag(name)}"')
        self.send_header("Content-Length", str(len(body) - start))
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        self.end_headers()
        if head:
            return
        cuts = self.hub.cut_after.get(name) or []
        cut = cuts.pop(0) if cuts else None
        if cut is not None:
            self.wfile.write(body[start:start + cut])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)  # the interrupted download
            return
        self.wfile.write(body[start:])


def _range_start(header: str | None) -> int:
    if not header or not header.startswith("bytes="):
        return 0
    return int(header[len("bytes="):].split("-", 1)[0] or 0)
