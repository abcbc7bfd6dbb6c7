"""A token goes only to the host it was meant for: real HTTP servers on 127.0.0.1 that redirect to
another port, another host name and from https to plain http; the redirect's target records what
it was sent."""

from __future__ import annotations

import http.server
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from test_perf_roofline import EMBED, LM_HEAD, model_dir

from edgevllm.common.http import InsecureRedirect, bearer, credential_session
from edgevllm.perf.roofline import weights_per_token

TOKEN = "hf_redirecttokenvalue0123456789abcd"


class Recorder(http.server.BaseHTTPRequestHandler):
    """Redirects every path to ``redirect_to`` + path when set; otherwise serves ``folder``."""

    redirect_to = ""
    folder: Path | None = None
    seen: list[dict] = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.seen.append({"path": self.path, "auth": self.headers.get("Authorization")})
        if self.redirect_to:
            self.send_response(302)
            self.send_header("Location", self.redirect_to + self.path)
            self.end_headers()
            return
        body = b"ok"
        if self.folder is not None:
            path = self.folder / self.path.rsplit("/", 1)[-1]
            if not path.is_file():
                self.send_response(404)
                self.end_headers()
                return
            body = path.read_bytes()
            if rng := self.headers.get("Range"):
                start, end = (int(x) for x in rng.removeprefix("bytes=").split("-"))
                body = body[start:end + 1]
        self.send_response(206 if self.headers.get("Range") else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextmanager
def server(redirect_to: str = "", folder: Path | None = None,
           tls: ssl.SSLContext | None = None) -> Iterator[tuple[int, list[dict]]]:
    seen: list[dict] = []
    handler = type("Handler", (Recorder,), {"redirect_to": redirect_to, "folder": folder,
                                            "seen": seen})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if tls is not None:
        httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1], seen
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_redirect_to_another_port_or_host_name_drops_the_token(host):
    with server() as (target_port, target_seen):
        with server(redirect_to=f"http://{host}:{target_port}") as (port, seen):
            response = credential_session().get(f"http://127.0.0.1:{port}/file",
                                                headers=bearer(TOKEN), timeout=10)
    assert response.status_code == 200
    assert seen == [{"path": "/file", "auth": f"Bearer {TOKEN}"}]
    assert target_seen == [{"path": "/file", "auth": None}]


@pytest.fixture(scope="module")
def tls_context(tmp_path_factory) -> tuple[ssl.SSLContext, Path]:
    if shutil.which("openssl") is None:
        pytest.fail("openssl is missing: install it (apt-get install openssl) for the TLS test")
    folder = tmp_path_factory.mktemp("tls")
    key, cert = folder / "key.pem", folder / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context, cert


def test_a_redirect_from_https_to_http_is_refused(tls_context):
    context, cert = tls_context
    with server() as (plain_port, plain_seen):
        with server(redirect_to=f"http://127.0.0.1:{plain_port}", tls=context) as (port, seen):
            with pytest.raises(InsecureRedirect, match="plain http"):
                credential_session().get(f"https://127.0.0.1:{port}/file", headers=bearer(TOKEN),
                                         timeout=10, verify=str(cert))
    assert seen and seen[0]["auth"] == f"Bearer {TOKEN}"
    assert plain_seen == []  # nothing was sent in clear text


def test_plain_urllib_would_have_leaked_it():
    """Why urllib is not used: it copies the header onto the redirect (the bug this fixes)."""
    import urllib.request

    with server() as (target_port, target_seen):
        with server(redirect_to=f"http://localhost:{target_port}") as (port, _):
            request = urllib.request.Request(f"http://127.0.0.1:{port}/f", headers=bearer(TOKEN))
            urllib.request.urlopen(request, timeout=10).read()
    assert target_seen[0]["auth"] == f"Bearer {TOKEN}"


def test_roofline_sends_the_token_to_the_hub_only(tmp_path, monkeypatch):
    folder = model_dir(tmp_path / "hub", {"vocab_size": 1000}, {**EMBED, **LM_HEAD})
    with server(folder=folder) as (cdn_port, cdn_seen):
        with server(redirect_to=f"http://localhost:{cdn_port}") as (hub_port, hub_seen):
            monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{hub_port}")
            monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))
            monkeypatch.setenv("HF_TOKEN", TOKEN)
            roof = weights_per_token("org/tiny")
    assert roof.bytes_per_token == 128 + 128000
    assert hub_seen and all(s["auth"] == f"Bearer {TOKEN}" for s in hub_seen)
    assert cdn_seen and all(s["auth"] is None for s in cdn_seen)



@pytest.mark.parametrize(("url", "origin", "carries"), [
    ("https://reg.lan:5000/v2/x", "https://reg.lan:5000/", True),
    ("https://REG.lan:5000/v2/x", "https://reg.lan:5000/", True),
    ("https://reg.lan/v2/x", "https://reg.lan:443/", True),
    ("http://127.0.0.1:5000/v2/x", "http://127.0.0.1:5000/", True),
    ("http://localhost:5000/v2/x", "http://localhost:5000/", True),
    ("http://[::1]:5000/v2/x", "http://[::1]:5000/", True),
    ("https://reg.lan:5001/v2/x", "https://reg.lan:5000/", False),   # another port
    ("https://blobs.example/v2/x", "https://reg.lan/", False),       # another host
    ("http://reg.lan/v2/x", "https://reg.lan/", False),              # another scheme
    ("http://reg.lan:5000/v2/x", "http://reg.lan:5000/", False),     # clear text off loopback
    ("http://10.0.0.7:5000/v2/x", "http://10.0.0.7:5000/", False),
    ("https://reg.lan:99999/v2/x", "https://reg.lan:99999/", False),  # no such port
])
def test_a_credential_is_attached_to_its_own_origin_only(url, origin, carries):
    from edgevllm.common.http import _origin, may_carry_credential

    assert may_carry_credential(url, _origin(origin)) is carries


def test_a_session_drops_a_credential_set_for_another_origin():
    """Whoever set the header, the bound session sends it to its origin only: a recorder on
    another loopback port (another origin) gets the request without it."""
    with server() as (port, seen):
        session = credential_session(f"http://127.0.0.1:{port + 1}/")
        session.get(f"http://127.0.0.1:{port}/file", headers=bearer(TOKEN), timeout=10)
        first = credential_session()
        first.get(f"http://127.0.0.1:{port}/file", headers=bearer(TOKEN), timeout=10)
    assert [s["auth"] for s in seen] == [None, f"Bearer {TOKEN}"]
