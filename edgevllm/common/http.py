"""HTTP with a credential: the token goes to the host it was meant for, never further.

Every edgevllm request that carries ``Authorization`` goes through ``credential_session``: a
``requests`` session whose redirects drop the header when the scheme, host or port changes (a Hub
download redirects to a CDN; a hostile or compromised server could redirect anywhere) and that
refuses a redirect from https to plain http outright, so neither the token nor the data travels
in clear text. urllib, which copies headers onto every redirect, is not used for these requests.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import requests

_DEFAULT_PORTS = {"http": 80, "https": 443}


class InsecureRedirect(requests.exceptions.RequestException):
    """A redirect from https to plain http."""


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or _DEFAULT_PORTS.get(
        parts.scheme)


class CredentialSession(requests.Session):
    """requests, with the redirect rules above checked here rather than left to a version."""

    def rebuild_auth(self, prepared_request: requests.PreparedRequest,
                     response: requests.Response) -> None:
        old, new = _origin(response.request.url or ""), _origin(prepared_request.url or "")
        if old[0] == "https" and new[0] != "https":
            raise InsecureRedirect(f"{response.request.url} redirects to plain http "
                                   f"({new[1]}); refused so that nothing travels in clear text")
        if old != new:
            prepared_request.headers.pop("Authorization", None)
        super().rebuild_auth(prepared_request, response)


def credential_session() -> CredentialSession:
    return CredentialSession()


def bearer(token: str | None) -> dict[str, Any]:
    """The Authorization header for ``token`` (none when it is empty)."""
    return {"Authorization": f"Bearer {token}"} if token else {}
