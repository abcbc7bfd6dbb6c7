"""The login of a registry API v2 call (image/registry.py: the wheel cache): docker's own.

A registry that answers 401 names its scheme (``WWW-Authenticate``): ``Basic`` (distribution with
htpasswd) takes docker's stored login for the host; ``Bearer`` (ghcr.io, Docker Hub, Harbor) takes
a token from the realm it names, asked with that login (or anonymously, for public pulls). The
login is docker's: a credential helper (``credHelpers`` / ``credsStore`` in docker's config:
``docker-credential-NAME get``) or the ``auths`` entry ``docker login`` writes, in
``$DOCKER_CONFIG/config.json`` (else ``~/.docker/config.json``). It goes to the registry's host
and the realm only (common/http.py attaches it to that origin alone, https or loopback), and
is never printed, logged or written: no flag, spec field, lock or label takes one.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import subprocess
from pathlib import Path

import requests

from edgevllm.common.dataload import load_json
from edgevllm.common.errors import ConfigError
from edgevllm.common.http import credential_session

_PARAM = re.compile(r'(\w+)="([^"]*)"')


def docker_config() -> dict:
    folder = os.environ.get("DOCKER_CONFIG") or str(Path.home() / ".docker")
    try:
        data = load_json((Path(folder) / "config.json").read_bytes(), folder, ConfigError)
    except (OSError, ConfigError):
        return {}
    return data if isinstance(data, dict) else {}


def docker_login(host: str) -> tuple[str, str] | None:
    """(user, password) docker holds for ``host``; None without one (nothing is said of why:
    a message could carry part of a secret)."""
    config = docker_config()
    helper = (config.get("credHelpers") or {}).get(host) or config.get("credsStore")
    if isinstance(helper, str) and re.fullmatch(r"[A-Za-z0-9_.-]+", helper):
        return _from_helper(helper, host)
    entry = (config.get("auths") or {}).get(host)
    encoded = entry.get("auth") if isinstance(entry, dict) else None
    if not isinstance(encoded, str):
        return None
    try:
        user, _, password = base64.b64decode(encoded, validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (user, password) if user and password else None


def _from_helper(helper: str, host: str) -> tuple[str, str] | None:
    try:
        proc = subprocess.run([f"docker-credential-{helper}", "get"], input=host.encode(),
                              capture_output=True, timeout=30, check=False)
        found = json.loads(proc.stdout) if proc.returncode == 0 else {}
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    user, secret = found.get("Username"), found.get("Secret")
    return (user, secret) if isinstance(user, str) and isinstance(secret, str) and secret \
        else None


def authorization(challenge: str, host: str, repository: str) -> str | None:
    """The ``Authorization`` value that answers ``challenge`` for ``repository`` (pull and push
    asked; a token server grants what the login may); None where there is no answer."""
    scheme = challenge.split(" ", 1)[0].lower()
    login = docker_login(host)
    if scheme == "basic":
        if login is None:
            return None
        raw = f"{login[0]}:{login[1]}".encode()
        return "Basic " + base64.b64encode(raw).decode()
    if scheme != "bearer":
        return None
    params = dict(_PARAM.findall(challenge))
    realm = params.get("realm", "")
    if not realm.startswith("https://") and not (realm.startswith("http://") and
                                                 _same_host(realm, host)):
        return None  # a token realm in clear text elsewhere would see the login
    query = {"service": params.get("service", ""),
             "scope": f"repository:{repository}:pull,push"}
    try:
        response = credential_session(realm).get(realm, params=query, auth=login,
                                                       timeout=60)
        token = response.json() if response.status_code == 200 else {}
    except (requests.RequestException, ValueError):
        return None
    value = token.get("token") or token.get("access_token") if isinstance(token, dict) else None
    return f"Bearer {value}" if isinstance(value, str) and value else None


def _same_host(url: str, host: str) -> bool:
    return url.split("://", 1)[1].split("/", 1)[0] == host
