"""A pool's configs and tokens, and a scheduler as a user names it: the one owner of the
sccache-dist TOML edgevllm writes and of ``sccache://HOST:PORT``.

Two tokens, each a file of its own (0600): ``client.token`` lets a builder submit compile jobs,
``server.token`` lets a worker join the pool (and so receive others' sources): they are handed
to different people. The scheduler listens where it is told, 127.0.0.1 unless ``--bind`` says
otherwise. A token reaches sccache only in a config file it reads: never an argument or a log.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import secrets
import stat
from pathlib import Path

from edgevllm.common.dataload import load_text
from edgevllm.common.errors import ConfigError, MissingInputError
from edgevllm.common.fsutil import atomic_open
from edgevllm.common.grammar import flag_port
from edgevllm.common.secrets import DIST_TOKEN_PREFIX

DEFAULT_BIND = "127.0.0.1"
DEFAULT_PORT = 10600  # the scheduler; worker K listens on DEFAULT_PORT + K
TOKEN = re.compile(r"[A-Za-z0-9._~+/=-]{16,512}")
TOKEN_FILE_BYTES = 4096
_HOST = re.compile(r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                   r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*")
_SCHEDULER = re.compile(r"(?P<scheme>sccache|http)://(?P<host>\[[0-9A-Fa-f:.]+\]|[^/:@\[\]]+)"
                        r":(?P<port>[0-9]{1,5})/?")


def new_token() -> str:
    """A pool token: its prefix gives it a shape, so common/secrets finds and redacts it."""
    return DIST_TOKEN_PREFIX + secrets.token_urlsafe(32)


def bind_address(raw: str, flag: str = "--bind") -> str:
    """An IP address to listen on, which workers also give builders as theirs: never the
    unspecified 0.0.0.0 or :: (every network, and no address a builder can reach)."""
    try:
        address = ipaddress.ip_address(raw)
    except ValueError:
        raise ConfigError(f"{flag} {raw[:80]!r} is no IP address: the address to listen on, "
                          f"e.g. {DEFAULT_BIND} (this host only) or this host's LAN address") \
            from None
    if address.is_unspecified:
        raise ConfigError(f"{flag} {raw}: listens on every network and is no address builders "
                          f"can reach; give this host's LAN address (docs/dist.md)")
    return str(address)


def scheduler_url(raw: str, flag: str = "--dist") -> str:
    """``sccache://HOST:PORT`` (or ``http://HOST:PORT``) as the http URL sccache reads."""
    if "@" in raw:
        raise ConfigError(f"{flag}: a scheduler URL carries no token; give the token in a "
                          f"file (--dist-token-file) or EDGEVLLM_DIST_TOKEN")
    found = _SCHEDULER.fullmatch(raw)
    host = found.group("host") if found else ""
    if not found or not (host.startswith("[") or _HOST.fullmatch(host)):
        raise ConfigError(f"{flag} {raw[:80]!r} is not sccache://HOST:PORT (the pool's "
                          f"scheduler, e.g. sccache://10.0.0.5:{DEFAULT_PORT})")
    port = flag_port(found.group("port"), flag)
    return f"http://{host}:{port}"


def url_host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def read_token(path: Path, what: str = "--dist-token-file") -> str:
    """A token file: one line of token characters, readable by its owner alone."""
    try:
        info = path.stat()
    except OSError as exc:
        raise MissingInputError(f"{what} {path}: cannot be read ({exc.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise MissingInputError(f"{what} {path}: not a file")
    if info.st_mode & 0o077:
        raise ConfigError(f"{what} {path}: others may read it (mode "
                          f"{stat.S_IMODE(info.st_mode):o}); chmod 600 {path}")
    try:  # its size is checked before a byte is read: a token is one short line
        token = load_text(path, ConfigError, TOKEN_FILE_BYTES).strip()
    except OSError as exc:
        raise MissingInputError(f"{what} {path}: cannot be read ({exc.strerror})") from None
    if not TOKEN.fullmatch(token):
        raise ConfigError(f"{what} {path}: not a token (one line of 16-512 letters, digits or "
                          f"._~+/=-); the pool's client.token is one")
    return token


def write_private(path: Path, text: str) -> Path:
    """``text`` under ``path``, 0600 from the start (a token, a config holding one)."""
    with atomic_open(path, "w") as handle:
        os.fchmod(handle.fileno(), 0o600)
        handle.write(text)
    return path


def _s(value: object) -> str:
    return json.dumps(str(value))  # a TOML basic string: JSON's escapes are TOML's


def scheduler_toml(bind: str, port: int, client_token: str, server_token: str) -> str:
    return (f"public_addr = {_s(f'{url_host(bind)}:{port}')}\n"
            f"[client_auth]\ntype = \"token\"\ntoken = {_s(client_token)}\n"
            f"[server_auth]\ntype = \"token\"\ntoken = {_s(server_token)}\n")


def server_toml(scheduler: str, public: str, port: int, work: Path, bwrap: str,
                server_token: str, toolchain_cache: int) -> str:
    """A worker: listening on ``public``:``port``, its jobs in ``work`` under sccache's own
    bubblewrap sandbox (the overlay builder)."""
    return (f"cache_dir = {_s(work / 'toolchains')}\n"
            f"toolchain_cache_size = {int(toolchain_cache)}\n"
            f"public_addr = {_s(f'{url_host(public)}:{port}')}\n"
            f"scheduler_url = {_s(scheduler)}\n"
            f"[builder]\ntype = \"overlay\"\nbuild_dir = {_s(work / 'build')}\n"
            f"bwrap_path = {_s(bwrap)}\n"
            f"[scheduler_auth]\ntype = \"token\"\ntoken = {_s(server_token)}\n")


def client_toml(scheduler: str, client_token: str, toolchains: str = "") -> str:
    """A builder's sccache config: the pool and its token (``toolchains``: TOML entries)."""
    return (f"[dist]\nscheduler_url = {_s(scheduler)}\ntoolchains = [{toolchains}]\n"
            f"[dist.auth]\ntype = \"token\"\ntoken = {_s(client_token)}\n")
