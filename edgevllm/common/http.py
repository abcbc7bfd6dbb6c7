"""HTTP with a credential: the token goes to the origin it was meant for, never further.

Every edgevllm request that carries ``Authorization`` goes through ``credential_session``, the
one place a credential is attached: a ``requests`` session bound to the credential's origin
(scheme, host, port; given, else the first request's). ``send`` drops the header from any request
to another origin (an upload ``Location`` a registry names, a redirect to a CDN) and from any
request in plain http off loopback, whoever set it; redirects drop it too, and a redirect from
https to plain http is refused outright, so neither the token nor the data travels in clear text.
urllib, which copies headers onto every redirect, is not used for these requests.

A URL others chose (a mod's download) is fetched by ``fetch_bounded`` alone, with nothing of the
user's: no ``~/.netrc`` or ``$NETRC`` login, no cookie, no ``Authorization`` (a URL with a login
in it is refused), no engine login; the proxy the environment names is used for the hosts it
covers, its own login going to the proxy only. The whole download has a deadline (seconds, from
the first connection to the last byte, resolving and redirects included) besides its byte bound.
Redirects are followed here, hop by hop: a server outside never sends the fetch to a loopback,
link-local, private, unspecified or multicast address, a loopback server never sends it outward,
and the first URL, unless it names loopback as such, reaches public addresses only.
A large file others chose (a wheel a lock pins) is streamed by ``stream_bounded`` by the same
rules into the caller's sink, with a deadline that grows with its size (``download_seconds``).
``probe`` asks a server others chose (a package index) whether it answers, with nothing of the
user's either.
"""

from __future__ import annotations

import http.cookiejar
import ipaddress
import os
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit

import requests

from edgevllm.common.errors import EdgeVllmError, InsecureURLError

_DEFAULT_PORTS = {"http": 80, "https": 443}


class InsecureRedirect(requests.exceptions.RequestException):
    """A redirect from https to plain http."""


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:  # a port out of range: an origin nothing matches
        return parts.scheme.lower(), "", -1
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), port or _DEFAULT_PORTS.get(scheme)


def is_loopback(host: str) -> bool:
    """``localhost``, 127.0.0.0/8 or ::1 (with or without a port or brackets)."""
    if host.startswith("[") and "]" in host:   # [::1] or [::1]:5000
        bare = host[1:host.index("]")]
    else:
        bare = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    bare = bare.lower()
    if bare == "localhost":
        return True
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:
        return False


def may_carry_credential(url: str, origin: tuple[str, str, int | None],
                         clear_text: bool = False) -> bool:
    """Whether a request to ``url`` may carry the credential of ``origin``: the same scheme,
    host and port, and https unless the host is loopback or the protocol has no https at all
    (``clear_text``: sccache-dist, whose own clients send their token so)."""
    found = _origin(url)
    if found != origin or not found[1]:
        return False
    return found[0] == "https" or (found[0] == "http" and (clear_text or is_loopback(found[1])))


class CredentialSession(requests.Session):
    """requests, with the origin and redirect rules above checked here rather than left to a
    version."""

    def __init__(self, origin: str | None = None, clear_text: bool = False) -> None:
        super().__init__()
        self.credential_origin = _origin(origin) if origin else None
        self.clear_text = clear_text

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        url = request.url or ""
        if self.credential_origin is None:
            self.credential_origin = _origin(url)
        if not may_carry_credential(url, self.credential_origin, self.clear_text):
            request.headers.pop("Authorization", None)
        return super().send(request, **kwargs)

    def rebuild_auth(self, prepared_request: requests.PreparedRequest,
                     response: requests.Response) -> None:
        old, new = _origin(response.request.url or ""), _origin(prepared_request.url or "")
        if old[0] == "https" and new[0] != "https":
            raise InsecureRedirect(f"{response.request.url} redirects to plain http "
                                   f"({new[1]}); refused so that nothing travels in clear text")
        if old != new:
            prepared_request.headers.pop("Authorization", None)
        super().rebuild_auth(prepared_request, response)


def credential_session(origin: str | None = None, *,
                       clear_text: bool = False) -> CredentialSession:
    """A session whose credential goes to ``origin`` (a URL; its path is ignored) only; without
    one, to the origin of its first request. ``clear_text``: the protocol is plain http by design
    (the credential still goes to that origin alone, never through a redirect)."""
    return CredentialSession(origin, clear_text)


def bearer(token: str | None) -> dict[str, Any]:
    """The Authorization header for ``token`` (none when it is empty)."""
    return {"Authorization": f"Bearer {token}"} if token else {}



DOWNLOAD_SECONDS = 300.0  # a whole download: 64 MiB at about 220 KiB/s; a trickle ends here
READ_SECONDS = 30.0  # connecting, and each read (a stalled server ends sooner)
MAX_HOPS = 5  # redirects a download may take
MIN_RATE = 512 << 10  # bytes/s a large download keeps on average (4 at a time: 16 Mbit/s)
FLOOR_SECONDS = 60.0  # besides: connecting, redirects, a slow start
_BLOCK = 1 << 16
_NAT64 = ipaddress.ip_network("64:ff9b::/96")

Resolver = Callable[[str], list[str]]
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def resolve_host(host: str) -> list[str]:
    """Every address ``host`` resolves to (what a connection to it may reach)."""
    infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    return sorted({str(info[4][0]) for info in infos})


def _address(text: str) -> IPAddress:
    """``text`` as the IPv4 address it carries, when it is an IPv4-mapped, 6to4 or NAT64 one."""
    ip = ipaddress.ip_address(text.split("%", 1)[0])  # fe80::1%eth0: the scope is no address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip.sixtofour is not None:
            return ip.sixtofour
        if ip in _NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def is_public_address(text: str) -> bool:
    """An address on the internet: not loopback, link-local, private (RFC 1918, ULA, shared),
    unspecified, reserved or multicast."""
    ip = _address(text)
    return ip.is_global and not ip.is_multicast


def _all_loopback(addresses: Sequence[str]) -> bool:
    return bool(addresses) and all(_address(a).is_loopback for a in addresses)


def redirect_refusal(source: Sequence[str], target: Sequence[str]) -> str | None:
    """Why a redirect from a server at the ``source`` addresses to a host at the ``target``
    addresses is refused; None when it may be followed. A loopback server stays on loopback
    (the builder's own service does not send a fetch outward); any other stays on the internet
    (an outside server does not reach the builder's own services or its network)."""
    if _all_loopback(source):
        away = [a for a in target if not _address(a).is_loopback]
        return f"a loopback server may not send a download outward ({away[0]})" if away else None
    inside = [a for a in target if not is_public_address(a)]
    if inside:
        return ("a server outside may not send a download to a loopback, link-local, private, "
                f"unspecified or multicast address ({inside[0]})")
    return None


def download_proxies(url: str) -> dict[str, str]:
    """The proxy the environment names for ``url`` (``https_proxy``, ``all_proxy``; none for
    loopback or what ``no_proxy`` covers). Read here by name because the download's session does
    not read the environment (``trust_env`` off keeps ``~/.netrc`` out); a login in the proxy's
    URL goes to the proxy, which the user chose, never to the server."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if is_loopback(host) or urllib.request.proxy_bypass(host):
        return {}
    found = urllib.request.getproxies()
    return {key: found[key] for key in (parts.scheme.lower(), "all") if key in found}


def _ca_bundle() -> str | bool:
    """The CA bundle the user set for requests (not read by a session without ``trust_env``)."""
    return os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or True


def _bare_session() -> requests.Session:
    session = requests.Session()
    session.trust_env = False  # no ~/.netrc or $NETRC login, no proxy or CA picked implicitly
    session.cookies.set_policy(http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
    session.headers["Accept-Encoding"] = "identity"  # the bytes as served (as wget and curl)
    return session


def _size(limit: int) -> str:
    return f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit} bytes"


@dataclass
class _Download:
    """One fetch of a URL others chose, run in a worker thread so that the caller's deadline
    holds in every phase (resolving, connecting, a TLS handshake, headers trickled a byte at a
    time); the read loop checks the same deadline, so the worker ends soon after it too."""

    url: str
    limit: int
    what: str
    error: type[EdgeVllmError]
    seconds: float
    read_s: float
    resolve: Resolver
    deadline: float = 0.0
    body: bytearray = field(default_factory=bytearray)
    stop: threading.Event = field(default_factory=threading.Event)
    failure: BaseException | None = None
    sink: Callable[[bytes], object] | None = None  # where the bytes go (else: body)
    cancel: threading.Event | None = None  # the caller's: set, the read loop ends (Ctrl-C)
    anywhere: bool = False  # the first URL may reach any address (redirects keep the rules)
    got: int = 0

    def late(self) -> EdgeVllmError:
        return self.error(f"{self.what}: {self.url} did not arrive within the {self.seconds:g} s "
                          f"a download may take ({self.got} bytes by then); check the URL "
                          "and the network, or fetch the file yourself")

    def run(self) -> None:
        try:
            with _bare_session() as session:
                self._hops(session)
        except requests.RequestException as exc:
            self.failure = self.error(
                f"{self.what}: cannot fetch {self.url} ({type(exc).__name__}); check the "
                "network (or a proxy: https_proxy)")
        except BaseException as exc:  # handed to the caller's thread, which raises it
            self.failure = exc

    def _hops(self, session: requests.Session) -> None:
        url, addresses = self.url, self._first_addresses()
        for _ in range(MAX_HOPS + 1):
            with session.get(url, stream=True, allow_redirects=False, verify=_ca_bundle(),
                             timeout=(self.read_s, self.read_s),
                             proxies=download_proxies(url)) as answer:
                if answer.is_redirect:
                    target = urljoin(url, answer.headers["location"])
                    addresses = self._hop(url, addresses, target)
                    url = target
                    continue
                if answer.status_code != 200:
                    raise self.error(f"{self.what}: {url} answered HTTP {answer.status_code}; "
                                     "check the URL")
                self._read(answer)
                return
        raise self.error(f"{self.what}: {self.url} redirects more than {MAX_HOPS} times; "
                         "check the URL")

    def _addresses(self, url: str) -> list[str]:
        host = urlsplit(url).hostname or ""
        try:
            return self.resolve(host)
        except OSError as exc:
            if download_proxies(url):
                return []  # the proxy resolves it: the proxy is where the user's network ends
            raise self.error(f"{self.what}: cannot resolve {host} in {url} "
                             f"({exc.strerror or exc}); check the URL and the network") from None

    def _first_addresses(self) -> list[str]:
        addresses = self._addresses(self.url)
        host = urlsplit(self.url).hostname or ""
        inside = [a for a in addresses if not is_public_address(a)]
        if inside and not is_loopback(host) and not self.anywhere:
            raise self.error(f"{self.what}: {self.url} reaches {inside[0]}, an address that is "
                             "not public; a download others chose reaches the internet only "
                             "(or loopback, named as such): fetch the file yourself if it is "
                             "meant")
        return addresses

    def _hop(self, source: str, addresses: list[str], target: str) -> list[str]:
        """The addresses of ``target``, where ``source`` redirects, once the redirect rules
        allow it."""
        refused = _scheme_refusal(target, after=source)
        found = [] if refused else self._addresses(target)
        refused = refused or redirect_refusal(addresses, found)
        if refused:
            raise self.error(f"{self.what}: {source} redirects to {target}: {refused}; "
                             "refused")
        return found

    def _read(self, answer: requests.Response) -> None:
        length = answer.headers.get("Content-Length", "")
        if length.isdigit() and int(length) > self.limit:
            raise self._over()
        # read1: what one read of the socket gave, so that a trickle reaches the check below
        # (read(n) waits for n bytes); urllib3 before 2.3 has no read1, the worker's deadline
        # in fetch_bounded still holds there
        read = getattr(answer.raw, "read1", None) or answer.raw.read
        while True:
            if self.cancel is not None and self.cancel.is_set():
                raise KeyboardInterrupt  # the caller stops every download (Ctrl-C)
            if self.stop.is_set() or time.monotonic() > self.deadline:
                raise self.late()
            block = read(_BLOCK, decode_content=False)
            if not block:
                return
            self.got += len(block)
            if self.got > self.limit:
                raise self._over()
            if self.sink is None:
                self.body += block
            else:
                self.sink(block)

    def _over(self) -> EdgeVllmError:
        return self.error(f"{self.what}: {self.url} is over the {_size(self.limit)} a download "
                          "may be; check that the URL names the file meant")


def _scheme_refusal(url: str, after: str | None = None) -> str | None:
    """Why ``url`` is not fetched for others: https only (plain http to loopback only, and never
    after https), no login in the URL."""
    parts = urlsplit(url)
    scheme, host = parts.scheme.lower(), parts.hostname or ""
    if after is not None and urlsplit(after).scheme.lower() == "https" and scheme != "https":
        return "plain http after https, so that nothing travels in clear text"
    if not (scheme == "https" or (scheme == "http" and host and is_loopback(host))):
        return "not an https URL"
    if parts.username is not None or parts.password is not None:
        return "a URL with a login in it (user@host); a download others chose carries none"
    return None


def _check_url(url: str, what: str) -> None:
    refused = _scheme_refusal(url)
    if refused == "not an https URL":
        raise InsecureURLError(f"{what}: {url} is not an https URL; edgevllm fetches from "
                               "others over https only: change the URL to https")
    if refused:  # the URL is not repeated: its login would reach the terminal and the logs
        raise InsecureURLError(f"{what}: the URL for {urlsplit(url).hostname} is {refused}: "
                               "remove the login from it")


def _run(job: _Download) -> None:
    """``job`` in a worker thread, within its deadline; its failure raised here."""
    job.deadline = time.monotonic() + job.seconds
    worker = threading.Thread(target=job.run, name="edgevllm-download", daemon=True)
    worker.start()
    try:
        while worker.is_alive() and not (job.cancel is not None and job.cancel.is_set()):
            left = job.deadline - time.monotonic()
            if left <= 0:
                break
            worker.join(min(left, 0.5))
    finally:
        job.stop.set()  # the worker stops at its next read (Ctrl-C included)
    if job.cancel is not None and job.cancel.is_set():
        raise KeyboardInterrupt  # the caller stops every download (Ctrl-C elsewhere)
    if worker.is_alive():
        raise job.late()
    if job.failure is not None:
        raise job.failure from None


def fetch_bounded(url: str, limit: int, what: str, error: type[EdgeVllmError], *,
                  seconds: float = DOWNLOAD_SECONDS, read_s: float = READ_SECONDS,
                  resolve: Resolver = resolve_host) -> bytes:
    """The bytes at ``url``, a URL others chose, fetched with nothing of the user's and by the
    redirect rules above: at most ``limit`` bytes within ``seconds`` (``read_s`` for connecting
    and each read). Anything else is one line of ``error`` naming ``what``; a URL that is not
    https (plain http: loopback only) or carries a login is an ``InsecureURLError``.
    ``resolve``: a host's addresses (tests stand a public address in for a loopback server)."""
    _check_url(url, what)
    job = _Download(url, limit, what, error, seconds, read_s, resolve)
    _run(job)
    return bytes(job.body)


def download_seconds(size: int, rate: float = MIN_RATE, floor: float = FLOOR_SECONDS) -> float:
    """The deadline of a ``size``-byte download: ``floor`` s, and ``size`` at ``rate`` bytes/s
    (a 1 GiB wheel: 35 min)."""
    return floor + size / rate


def stream_bounded(url: str, sink: Callable[[bytes], object], limit: int, what: str,
                   error: type[EdgeVllmError], *, seconds: float | None = None,
                   read_s: float = READ_SECONDS, cancel: threading.Event | None = None,
                   anywhere: bool = False, resolve: Resolver = resolve_host) -> int:
    """``fetch_bounded`` for a large file: each block of ``url`` handed to ``sink`` (a file's
    write; called from a worker thread) as it arrives, the byte count returned. The deadline is
    ``seconds``, else ``download_seconds(limit)``; ``cancel`` set ends it with KeyboardInterrupt
    at the next read. ``anywhere``: the first URL may reach a private address too (a wheel whose
    bytes its pin's sha256 decides, from a mirror on the user's network); its redirects keep
    the rules."""
    _check_url(url, what)
    job = _Download(url, limit, what, error, download_seconds(limit) if seconds is None
                    else seconds, read_s, resolve, sink=sink, cancel=cancel, anywhere=anywhere)
    _run(job)
    return job.got


def probe(url: str, timeout: float) -> int:
    """The status ``url`` answers a HEAD with (a server others chose: nothing of the user's is
    sent, no redirect is followed); ``requests.RequestException`` when nothing answers."""
    with _bare_session() as session:
        return session.head(url, timeout=timeout, allow_redirects=False, verify=_ca_bundle(),
                            proxies=download_proxies(url)).status_code
