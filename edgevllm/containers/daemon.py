"""One docker daemon, reached through the docker CLI: what every noun of ``DockerEngine`` stands on.

The binding (the default daemon, a docker context, a ``DOCKER_HOST``-style URL, or a build's one
ssh connection), the argv every call starts with, the deadline every call has (a hung daemon is
one error line, never a hang), a daemon out of reach as exit 3, and the daemon's own facts (is it
up, its architecture, its root folder, its endpoint).
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from typing import Callable, Sequence

from edgevllm.common.errors import (
    ConfigError,
    DaemonUnreachableError,
    DockerUnavailableError,
    EngineError,
)

LineSink = Callable[[str], None]
# Deadlines for daemon calls: a hung daemon becomes one error line, never a hang.
QUICK_TIMEOUT_S = 30.0  # version, buildx version, inspect
DEFAULT_TIMEOUT_S = 600.0  # anything else that does not pass its own
# What the docker CLI says when it cannot talk to the daemon at all (socket missing or refused,
# no permission, an ssh host that does not answer): exit 3, never "image not found".
_UNREACHABLE = (
    "cannot connect to the docker daemon",
    "is the docker daemon running",
    "error during connect",
    "permission denied while trying to connect to the docker daemon",
    "failed to connect to the docker api",
)


class Daemon:
    """A docker daemon reached through the docker CLI.

    ``context``: a docker context name; ``host``: a daemon URL (``unix://``, ``tcp://``, ``ssh://``).
    """

    def __init__(self, context: str | None = None, host: str | None = None, binary: str = "docker"):
        self.context = context
        self.host = host
        self.binary = binary
        self.dial: str | None = None  # a build's one ssh connection to it (sshforward.py)

    def base_argv(self) -> list[str]:
        if self.dial:
            return [self.binary, "--host", self.dial]
        return [self.binary, *(["--context", self.context] if self.context else []),
                *(["--host", self.host] if self.host else [])]

    def command_line(self, args: Sequence[str]) -> str:
        """The exact shell-quoted command for ``args`` (what --dry-run prints)."""
        return shlex.join(self.base_argv() + list(args))

    @property
    def is_remote(self) -> bool:
        """Bound to another daemon (a context or host URL) than this machine's default one."""
        return bool(self.context or self.host)

    def describe(self) -> str:
        return self.context or self.host or "default"

    def endpoint(self) -> str:
        """The daemon's URL: the host given, else the context's endpoint (the one named, or the
        docker CLI's current one, which ``DOCKER_HOST`` and ``DOCKER_CONTEXT`` pick)."""
        if self.host:
            return self.host
        self._require_binary()
        proc = subprocess.run([self.binary, "context", "inspect", "--format",
                               "{{.Endpoints.docker.Host}}", *filter(None, [self.context])],
                              capture_output=True, text=True, timeout=QUICK_TIMEOUT_S)
        if proc.returncode != 0:
            raise ConfigError(f"engine '{self.describe()}': no such docker context "
                              "(docker context ls lists them)")
        return proc.stdout.strip()

    @property
    def runs_here(self) -> bool:
        """The daemon is on this machine (a local socket): its disk and binfmt are this one's."""
        return self.endpoint().startswith(("unix://", "npipe://"))

    def _run(
        self,
        args: Sequence[str],
        *,
        check: bool = True,
        input: bytes | None = None,
        timeout: float | None = DEFAULT_TIMEOUT_S,
    ) -> subprocess.CompletedProcess:
        """Every daemon call has a deadline (``timeout=None`` only for open-ended work such as
        a container run to completion, where the caller passes its own)."""
        self._require_binary()
        try:
            proc = subprocess.run(
                self.base_argv() + list(args), input=input, capture_output=True, timeout=timeout
            )
        except subprocess.TimeoutExpired as exc:
            raise EngineError(
                f"docker {args[0]} timed out after {timeout:.0f}s on engine "
                f"{self.describe()}; check that the daemon is responsive"
            ) from exc
        if proc.returncode != 0:
            self.raise_if_unreachable(proc.stderr)
        if check and proc.returncode != 0:
            raise EngineError(self._failure_line(args, proc))
        return proc

    def raise_if_unreachable(self, stderr: bytes | str | None) -> None:
        """A failed docker call whose message says the daemon is out of reach: exit 3."""
        text = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr or ""
        text = text.replace(self.dial, self.describe()) if self.dial else text
        if any(sign in text.lower() for sign in _UNREACHABLE):
            lines = text.strip().splitlines()
            raise DaemonUnreachableError(
                f"cannot reach the Docker daemon on engine {self.describe()} "
                f"({lines[-1] if lines else 'no answer'}): start it or check DOCKER_HOST, "
                "the context and permissions")

    def _failure_line(self, args: Sequence[str], proc: subprocess.CompletedProcess) -> str:
        stderr = proc.stderr.decode(errors="replace").strip().splitlines()
        last = stderr[-1] if stderr else f"exit code {proc.returncode}"
        return f"docker {' '.join(args[:2])} failed on engine {self.describe()}: {last}"

    def _require_binary(self) -> None:
        if shutil.which(self.binary) is None:
            raise DockerUnavailableError(
                f"'{self.binary}' not found on PATH: install Docker "
                "(Debian: apt-get install docker.io docker-cli docker-buildx)"
            )

    def run_cli(
        self, args: Sequence[str], timeout: float | None = 60
    ) -> subprocess.CompletedProcess:
        """Any docker subcommand, without raising on its exit code (for checks that inspect it)."""
        return self._run(args, check=False, timeout=timeout)

    def check_daemon(self) -> None:
        self._require_binary()
        proc = self._run(
            ["version", "--format", "{{.Server.Version}}"], check=False, timeout=QUICK_TIMEOUT_S
        )
        if proc.returncode != 0:
            raise DockerUnavailableError(
                f"cannot reach the Docker daemon on engine {self.describe()}: start it "
                "(systemctl start docker, or dockerd --iptables=false) and check permissions"
            )

    def server_arch(self) -> str:
        """The daemon's architecture in docker's words (amd64, arm64): what a build on this
        engine runs natively; a remote engine answers for its own machine."""
        proc = self._run(["version", "--format", "{{.Server.Arch}}"], timeout=QUICK_TIMEOUT_S)
        return proc.stdout.decode().strip()

    def root_dir(self) -> str:
        """Where the daemon keeps images and build cache (on its own machine)."""
        proc = self._run(["info", "--format", "{{.DockerRootDir}}"], timeout=QUICK_TIMEOUT_S)
        return proc.stdout.decode().strip()
