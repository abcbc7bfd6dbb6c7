"""A token goes only to the host it was meant for: real HTTP servers on 127.0.0.1 that redirect to
another port, another host name and from https to plain http; the redirect's target records what
it was sent. A URL others chose (fetch_bounded) carries nothing of the user's (a ~/.netrc in a
temporary HOME, $NETRC and proxies with logins, a cookie), ends at its deadline however slowly a
server trickles, and follows redirects by the address rules (real servers; a resolver hook stands
in for a server outside, said where it does)."""

from __future__ import annotations

import http.server
import re
import shutil
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests
from test_perf_roofline import EMBED, LM_HEAD, model_dir

from edgevllm.common.errors import DownloadError, InsecureURLError
from edgevllm.common.http import (
    InsecureRedirect,
    bearer,
    credential_session,
    download_proxies,
    fetch_bounded,
    redirect_refusal,
    resolve_host,
)
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


# --- fetch_bounded: a URL others chose, fetched with nothing of the user's and on time -------

def answer(status: int = 200, body: bytes = b"ok", **headers: str):
    def respond(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        for name, value in {"Content-Length": str(len(body)), **headers}.items():
            handler.send_header(name.replace("_", "-"), value)
        handler.end_headers()
        handler.wfile.write(body)
    return respond


def trickle(total: int, pause: float, sent: list[int], done: threading.Event, headers: bool):
    """``total`` bytes one at a time, ``pause`` s apart: of the body, or of a header line;
    ``sent`` counts what went out, ``done`` is set when the sending ends (all sent, or the
    client gone)."""
    def respond(handler: http.server.BaseHTTPRequestHandler) -> None:
        try:
            handler.wfile.write(b"HTTP/1.0 200 OK\r\n" + (b"X-Slow: " if headers else
                                b"Content-Length: %d\r\n\r\n" % total))
            for _ in range(total):
                handler.wfile.write(b"a")
                sent[0] += 1
                time.sleep(pause)
            if headers:
                handler.wfile.write(b"\r\nContent-Length: 2\r\n\r\nok")
        except OSError:  # the client went away
            pass
        finally:
            done.set()
    return respond


@contextmanager
def scripted(routes: dict) -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A server on 127.0.0.1 answering each path by ``routes[path](handler)`` (404 elsewhere);
    each request's path and headers (lower-case names) are recorded."""
    seen: list[dict[str, str]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            seen.append({"path": self.path, **{k.lower(): v for k, v in self.headers.items()}})
            routes.get(self.path, answer(404, b""))(self)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def fetch(url: str, **kwargs) -> bytes:
    return fetch_bounded(url, 1 << 20, "the download", DownloadError, **kwargs)


@pytest.mark.parametrize("headers", [False, True], ids=["body", "headers"])
def test_a_trickle_ends_at_the_whole_download_deadline_in_one_line(headers):
    """A server sending a byte every 0.2 s never lets a per-read timeout fire; the download's own
    deadline (1 s here) ends it, long before the server's 100 bytes are out: in the headers
    (the caller's deadline on the worker: no read loop runs yet) and in the body (there the read
    loop checks it too: the fetch stops reading, and the server sees the client go)."""
    sent, done = [0], threading.Event()
    with scripted({"/f": trickle(100, 0.2, sent, done, headers)}) as (base, _):
        with pytest.raises(DownloadError) as info:
            fetch(f"{base}/f", seconds=1)
        assert sent[0] < 100, "the fetch gave up only once the server had sent it all"
        if not headers:
            assert done.wait(60)
            assert sent[0] < 100, "the read loop went on reading past the deadline"
    assert re.fullmatch(rf"the download: {base}/f did not arrive within the 1 s a download may "
                        r"take \(\d+ bytes by then\); check the URL and the network, or fetch "
                        r"the file yourself", str(info.value))


def netrc_login(path: Path) -> Path:
    path.write_text("machine 127.0.0.1 login someone password s3cret\n")
    path.chmod(0o600)
    return path


def test_a_netrc_login_never_reaches_the_server(tmp_path, monkeypatch):
    """The user's ~/.netrc has a login for the host a mod names: requests would send it (the
    control, through a redirect too); the download sends nothing."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("NETRC", raising=False)
    netrc_login(tmp_path / ".netrc")
    routes = {"/f": answer(302, b"", Location="/g"), "/g": answer(body=b"file")}
    with scripted(routes) as (base, seen):
        requests.get(f"{base}/f", timeout=10)
        assert [s.get("authorization", "")[:6] for s in seen] == ["Basic ", "Basic "]
        seen.clear()
        assert fetch(f"{base}/f") == b"file"
    assert [s["path"] for s in seen] == ["/f", "/g"]
    assert not any("authorization" in s for s in seen)


def test_environment_credentials_and_proxies_stay_off(tmp_path, monkeypatch):
    """$NETRC names a login and every *_proxy variable a proxy with a login, nothing says
    no_proxy: requests sends the fetch through that proxy with both logins (the control); the
    download goes to the server itself, with neither."""
    monkeypatch.setenv("NETRC", str(netrc_login(tmp_path / "netrc")))
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    with scripted({}) as (proxy, proxy_seen), scripted({"/f": answer()}) as (base, seen):
        for name in ("http_proxy", "HTTPS_PROXY", "ALL_PROXY"):
            monkeypatch.setenv(name, proxy.replace("http://", "http://someone:s3cret@"))
        requests.get(f"{base}/f", timeout=10)
        assert {"authorization", "proxy-authorization"} <= set(proxy_seen[0])
        assert fetch(f"{base}/f") == b"ok"
    assert len(proxy_seen) == 1 and len(seen) == 1
    assert not {"authorization", "proxy-authorization", "cookie"} & set(seen[0])


def test_the_users_proxy_still_carries_outside_downloads(monkeypatch):
    """The environment's proxy (and its own login) is kept for the hosts it covers: read by
    name, since the session reads nothing of the environment."""
    monkeypatch.setenv("https_proxy", "http://someone:s3cret@proxy.lan:3128")
    monkeypatch.setenv("no_proxy", "mirror.lan")
    assert download_proxies("https://files.example/x") == \
        {"https": "http://someone:s3cret@proxy.lan:3128"}
    assert download_proxies("https://mirror.lan/x") == {}
    assert download_proxies("http://127.0.0.1:8000/x") == {}


def test_a_cookie_a_server_sets_is_not_sent_back():
    routes = {"/f": answer(302, b"", Location="/g", Set_Cookie="session=abc; Path=/"),
              "/g": answer(body=b"file")}
    with scripted(routes) as (base, seen):
        assert fetch(f"{base}/f") == b"file"
    assert [s["path"] for s in seen] == ["/f", "/g"] and "cookie" not in seen[1]


def test_a_loopback_server_may_not_redirect_outward():
    with scripted({"/f": answer(302, b"", Location="https://192.0.2.10/file")}) as (base, _):
        with pytest.raises(DownloadError) as info:
            fetch(f"{base}/f", read_s=2)
    assert str(info.value) == (f"the download: {base}/f redirects to https://192.0.2.10/file: a "
                               "loopback server may not send a download outward (192.0.2.10); "
                               "refused")


def test_a_server_outside_may_not_redirect_to_loopback():
    """A server outside that redirects to the builder's own service. A test cannot run a server
    outside: the resolver hook says 127.0.0.1 is at a public address, so the loopback server
    stands in for one (the connection still goes to 127.0.0.1); the redirect's target,
    ``localhost``, is resolved for real."""
    def resolve(host: str) -> list[str]:
        return ["1.2.3.4"] if host == "127.0.0.1" else resolve_host(host)

    with scripted({"/f": answer(body=b"private")}) as (inside, inside_seen):
        port = inside.rsplit(":", 1)[1]
        to = f"http://localhost:{port}/f"
        with scripted({"/f": answer(302, b"", Location=to)}) as (base, _):
            with pytest.raises(DownloadError, match=rf"^the download: {base}/f redirects to "
                               rf"{to}: a server outside may not send a download to a loopback, "
                               r"link-local, private, unspecified or multicast address "
                               r"\((127\.0\.0\.1|::1)\); refused$"):
                fetch(f"{base}/f", resolve=resolve)
    assert inside_seen == []


@pytest.mark.parametrize(("source", "target", "refused"), [
    (["1.2.3.4"], ["127.0.0.1"], True),
    (["1.2.3.4"], ["::1"], True),
    (["1.2.3.4"], ["::ffff:127.0.0.1"], True),
    (["1.2.3.4"], ["2002:7f00:1::1"], True),            # 6to4 carrying 127.0.0.1
    (["1.2.3.4"], ["169.254.169.254"], True),           # a cloud's metadata service
    (["1.2.3.4"], ["fe80::1%eth0"], True),
    (["1.2.3.4"], ["10.1.2.3"], True),
    (["1.2.3.4"], ["172.16.0.1"], True),
    (["1.2.3.4"], ["192.168.1.1"], True),
    (["1.2.3.4"], ["fd00::1"], True),                   # ULA
    (["1.2.3.4"], ["100.64.0.1"], True),                # shared (carrier NAT)
    (["1.2.3.4"], ["0.0.0.0"], True),
    (["1.2.3.4"], ["::"], True),
    (["1.2.3.4"], ["224.0.0.1"], True),
    (["1.2.3.4"], ["ff02::1"], True),
    (["1.2.3.4"], ["5.6.7.8", "10.0.0.1"], True),       # any of its addresses
    (["1.2.3.4"], ["5.6.7.8", "2606:4700::1111"], False),
    (["127.0.0.1"], ["5.6.7.8"], True),                 # loopback never outward
    (["127.0.0.1", "::1"], ["10.0.0.1"], True),
    (["127.0.0.1"], ["::1", "127.0.0.2"], False),
])
def test_the_redirect_rule(source, target, refused):
    assert (redirect_refusal(source, target) is not None) is refused


@pytest.mark.parametrize("host", ["127.1", "2130706433", "0x7f000001"])
def test_a_first_url_that_reaches_loopback_by_another_name_is_refused(host):
    with scripted({"/f": answer()}) as (base, seen):
        port = base.rsplit(":", 1)[1]
        with pytest.raises(DownloadError, match=rf"^the download: https://{host}:{port}/f "
                           r"reaches 127\.0\.0\.1, an address that is not public; .*meant$"):
            fetch(f"https://{host}:{port}/f", read_s=2)
    assert seen == []


@pytest.mark.parametrize("address", ["10.0.0.5", "169.254.169.254", "fd12::1"])
def test_a_first_url_on_the_users_network_is_refused(address):
    """The resolver hook stands in for a name in the user's network (nothing is connected)."""
    with pytest.raises(DownloadError, match=rf"reaches {address}, an address that is not public"):
        fetch("https://files.example/f", resolve=lambda host: [address])


def test_a_url_with_a_login_is_refused_without_repeating_it():
    with pytest.raises(InsecureURLError) as info:
        fetch("https://someone:hunter2@files.example/f")
    assert str(info.value) == ("the download: the URL for files.example is a URL with a login in "
                               "it (user@host); a download others chose carries none: remove the "
                               "login from it")


def test_https_then_plain_http_is_refused_and_the_users_ca_is_kept(tls_context, monkeypatch):
    """REQUESTS_CA_BUNDLE (the user's CA) still verifies the server; a redirect to plain http
    is refused."""
    context, cert = tls_context
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert))
    with server(folder=None, tls=context) as (port, _):
        assert fetch(f"https://127.0.0.1:{port}/f") == b"ok"
    with server() as (plain_port, plain_seen):
        with server(redirect_to=f"http://127.0.0.1:{plain_port}", tls=context) as (port, _):
            with pytest.raises(DownloadError, match=r"redirects to http://127\.0\.0\.1:\d+/f: "
                               r"plain http after https, so that nothing travels in clear text"):
                fetch(f"https://127.0.0.1:{port}/f")
    assert plain_seen == []
