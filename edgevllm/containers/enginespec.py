"""An engine as a flag names it (``--engine``, ``--nodes``, ``--to``): the grammar checked before
any use, and the parts of an ``ssh://`` URL as ssh and rsync take them."""

from __future__ import annotations

import re

from edgevllm.common.errors import ConfigError

# Neither user nor host may start with "-": ssh would read it as an option.
_SSH_URL = re.compile(r"^ssh://([^/:@\s-][^/:@\s]*@)?([^/:@\s-][^/:@\s]*)(?::(\d{1,5}))?/?\Z")
_DAEMON_URL = re.compile(r"^(tcp://[\w.\[\]:-]+|unix:///[\w./-]+|npipe://[\w./\\-]+)\Z")
_CONTEXT_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.+-]*\Z")
ENGINE_FORMS = ("local, ssh://[user@]host[:port], tcp://host:port, unix:///path or a docker "
                "context name")


def parse_ssh_url(url: str) -> tuple[str, int | None]:
    """``ssh://[user@]host[:port]`` → (``[user@]host``, port): as ssh and rsync take it."""
    match = _SSH_URL.match(url)
    if not match:
        raise ConfigError(f"'{url}': expected ssh://[user@]host[:port]")
    user, host, port = match.groups()
    if port and not 1 <= int(port) <= 65535:
        raise ConfigError(f"'{url}': the port must be 1 to 65535")
    return (user or "") + host, int(port) if port else None


def check_engine_spec(spec: str) -> None:
    """A daemon URL (``ssh://``, ``tcp://``, ``unix://``) or a docker context name, else one
    line naming the forms."""
    if spec.startswith("ssh://"):
        parse_ssh_url(spec)
    elif "://" in spec and not _DAEMON_URL.match(spec) or (
            "://" not in spec and not _CONTEXT_NAME.match(spec)):
        raise ConfigError(f"engine '{spec}': expected {ENGINE_FORMS}")
