"""HTTP with a credential: the token goes to the origin it was meant for, never further.

Every edgevllm request that carries ``Authorization`` goes through ``credential_session``, the
one place a credential is attached: a ``requests`` session bound to the credential's origin
(scheme, host, port; given, else the first request's). ``send`` drops the header from any request
to another origin (an upload ``Location`` a registry names, a redirect to a CDN) and from any
request in plain http off loopback, whoever set it; redirects drop it too, and a redirect from
https to plain http is refused outright, so neither the token nor the data travels in clear text.
urllib, which copies headers onto every redirect, is not used for these requests.
"""

from __future__ import annotations

import ipaddress
from typing import Any
from urllib.parse import urlsplit

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


def may_carry_credential(url: str, origin: tuple[str, str, int | None]) -> bool:
    """Whether a request to ``url`` may carry the credential of ``origin``: the same scheme,
    host and port, and https unless the host is loopback."""
    found = _origin(url)
    if found != origin or not found[1]:
        return False
    return found[0] == "https" or (found[0] == "http" and is_loopback(found[1]))


class CredentialSession(requests.Session):
    """requests, with the origin and redirect rules above checked here rather than left to a
    version."""

    def __init__(self, origin: str | None = None) -> None:
        super().__init__()
        self.credential_origin = _origin(origin) if origin else None

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        url = request.url or ""
        if self.credential_origin is None:
            self.credential_origin = _origin(url)
        if not may_carry_credential(url, self.credential_origin):
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


def credential_session(origin: str | None = None) -> CredentialSession:
    """A session whose credential goes to ``origin`` (a URL; its path is ignored) only; without
    one, to the origin of its first request."""
    return CredentialSession(origin)


def bearer(token: str | None) -> dict[str, Any]:
    """The Authorization header for ``token`` (none when it is empty)."""
    return {"Authorization": f"Bearer {token}"} if token else {}


def fetch_bounded(url: str, limit: int, what: str, error: type[EdgeVllmError],
                  timeout_s: float = 120) -> bytes:
    """The bytes at ``url``: https (plain http only to loopback), redirects by the rules above,
    at most ``limit`` bytes; anything else is one line of ``error``, naming ``what``."""
    scheme, host, _ = _origin(url)
    if not (scheme == "https" or (scheme == "http" and host and is_loopback(host))):
        raise InsecureURLError(f"{what}: {url} is not an https URL; edgevllm fetches from "
                               "others over https only: change the URL to https")
    body = bytearray()
    try:
        with credential_session(url).get(url, stream=True, timeout=timeout_s) as answer:
            if answer.status_code != 200:
                raise error(f"{what}: {url} answered HTTP {answer.status_code}; check the URL")
            for block in answer.iter_content(1 << 16):
                body += block
                if len(body) > limit:
                    size = f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit} bytes"
                    raise error(f"{what}: {url} is over the {size} a download may be; "
                                "check that the URL names the file meant")
    except requests.RequestException as exc:
        raise error(f"{what}: cannot fetch {url} ({type(exc).__name__}); check the network "
                    "(or a proxy: https_proxy)") from None
    return bytes(body)
