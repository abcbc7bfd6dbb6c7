"""One ssh connection to an ``ssh://`` engine for a whole build, instead of one per docker call.

With ``--host ssh://…`` the docker CLI starts ``ssh … docker system dial-stdio`` for every call
(buildx opens several): a handshake and a process start on the other machine each time, which
made a fixture build 1.15-1.94x slower than on the device itself. ``SshForward`` opens one ssh
connection that forwards a local unix socket, in a private folder (mode 0700), to the engine's
socket over there; the engine's calls dial that socket; closing it ends ssh and removes the
socket and the folder.

The socket over there is the one ``docker system dial-stdio`` would dial: the endpoint of the
other machine's docker CLI (``docker context inspect`` of its current context, asked in the same
kind of non-interactive ssh session, so its ``DOCKER_HOST``, ``DOCKER_CONTEXT`` or a rootless
context count). Where that is not a unix socket, the caller keeps one ssh per call and says why.

ssh runs as the user's own: their ssh config and agent apply and host keys are checked as that
config says. The options added here only stop a password or host-key prompt that nobody would see
(``BatchMode``: such a connection fails, and the engine falls back to docker's own ssh, which can
prompt) and keep the forward this process's own (no shared ControlMaster: closing it must not
close, or outlive in, the user's master).
"""

from __future__ import annotations

import contextlib
import ctypes
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Iterator

from edgevllm.common import console
from edgevllm.common.errors import ConfigError, EngineError
from edgevllm.common.interrupts import sigterm_as_interrupt
from edgevllm.common.poll import poll
from edgevllm.containers.docker import QUICK_TIMEOUT_S, DockerEngine
from edgevllm.containers.enginespec import parse_ssh_url

CONNECT_TIMEOUT_S = 10
OPEN_TIMEOUT_S = 30.0  # handshake, authentication and the forward's listener
BASE_OPTIONS = ("-o", "BatchMode=yes", "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}")
FORWARD_OPTIONS = ("-N", "-o", "ExitOnForwardFailure=yes", "-o", "ControlMaster=no",
                   "-o", "ControlPath=none", "-o", "StreamLocalBindMask=0177")
# What the other machine's docker CLI dials (its current context's endpoint).
ENDPOINT_COMMAND = "docker context inspect --format '{{.Endpoints.docker.Host}}'"
_UNIX_ENDPOINT = re.compile(r"^unix://(/[\w./+@-]*)\Z")
_SOCKET_NAME = "docker.sock"
_PR_SET_PDEATHSIG = 1
_MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes on Linux, 104 on macOS


class ForwardUnavailable(Exception):
    """One shared connection could not be opened; the message says why, in one line."""


def ssh_argv(url: str, *options: str, command: str | None = None) -> list[str]:
    """The ssh command line for an ``ssh://[user@]host[:port]`` URL: the user's ssh with its own
    config, never asked a question on a terminal."""
    user_host, port = parse_ssh_url(url)
    return ["ssh", *BASE_OPTIONS, *(["-p", str(port)] if port else []), *options, "--",
            user_host, *([command] if command else [])]


def _last_line(text: str, fallback: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else fallback


def remote_socket(url: str) -> str:
    """The unix socket the engine at ``url`` is reached through, as ``docker system dial-stdio``
    would find it there; raises ForwardUnavailable where it is something else or unknown."""
    try:
        proc = subprocess.run(ssh_argv(url, "-T", command=ENDPOINT_COMMAND), capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, timeout=OPEN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ForwardUnavailable(f"no answer over ssh within {OPEN_TIMEOUT_S:.0f}s") from None
    if proc.returncode != 0:
        raise ForwardUnavailable(
            f"could not ask its docker endpoint ({_last_line(proc.stderr, 'ssh failed')})")
    return socket_path(proc.stdout.strip())


def socket_path(endpoint: str) -> str:
    """``unix:///path`` → ``/path``, checked: it reaches ssh's ``-L`` argument."""
    match = _UNIX_ENDPOINT.match(endpoint)
    if not match:
        raise ForwardUnavailable(f"its docker endpoint there is {endpoint[:80]!r}, not a unix "
                                 "socket")
    return match.group(1)


def _ends_with_parent() -> Callable[[], object] | None:
    """Linux: the kernel sends ssh SIGTERM when this process dies, even by SIGKILL, where no
    ``finally`` runs (no connection outlives its build)."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    return lambda: prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class SshForward:
    """``ssh -N -L LOCAL.sock:REMOTE.sock``: opened by ``open()``, ended by ``close()``."""

    def __init__(self, url: str, remote: str, timeout_s: float = OPEN_TIMEOUT_S):
        self.url, self.remote, self.timeout_s = url, remote, timeout_s
        self.folder: Path | None = None
        self.proc: subprocess.Popen | None = None

    @property
    def socket(self) -> Path:
        assert self.folder is not None, "the forward is not open"
        return self.folder / _SOCKET_NAME

    def argv(self) -> list[str]:
        return ssh_argv(self.url, *FORWARD_OPTIONS, "-L", f"{self.socket}:{self.remote}")

    def open(self) -> str:
        """Start ssh and wait for its local socket; returns the ``unix://`` URL to dial. On any
        failure (or an interrupt) nothing is left: the process is ended, the folder removed."""
        self.folder = Path(tempfile.mkdtemp(prefix="edgevllm-ssh-"))  # mode 0700
        if len(str(self.socket)) > _MAX_SOCKET_PATH:  # a long TMPDIR: a socket path must be short
            self.folder.rmdir()
            self.folder = Path(tempfile.mkdtemp(prefix="edgevllm-ssh-", dir="/tmp"))
        try:
            # Its own session: a Ctrl-C reaches this process, whose cleanup (a container removed
            # over this very connection) runs before close() ends ssh. Its log is a file: a pipe
            # nobody reads could fill during a long build and stop ssh.
            with open(self.folder / "ssh.log", "wb") as log:
                self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL,
                                             stdout=subprocess.DEVNULL, stderr=log,
                                             start_new_session=True,
                                             preexec_fn=_ends_with_parent())
            self._wait_listening()
        except BaseException:
            self.close()
            raise
        return f"unix://{self.socket}"

    def _wait_listening(self) -> None:
        proc = self.proc
        assert proc is not None

        def listening() -> bool | None:
            if self.socket.is_socket():
                return True
            if proc.poll() is not None:
                code = f"exit code {proc.returncode}"
                raise ForwardUnavailable(f"ssh ended ({self.ssh_said(code)})")
            return None

        if poll(listening, self.timeout_s, 0.02) is None:
            raise ForwardUnavailable(f"no forward within {self.timeout_s:.0f}s")

    def ssh_said(self, fallback: str) -> str:
        """ssh's last message (why it failed or ended)."""
        log = self.folder / "ssh.log" if self.folder else None
        text = log.read_text(errors="replace") if log and log.is_file() else ""
        return _last_line(text, fallback)

    def close(self) -> None:
        """End ssh (which closes the connection) and remove what this forward made: its socket,
        its log, its folder. Safe to call twice."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            self.proc = None
        if self.folder is not None:
            for name in (_SOCKET_NAME, "ssh.log"):
                (self.folder / name).unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # not empty: what is in it is not ours to delete
                self.folder.rmdir()
            self.folder = None


@contextlib.contextmanager
def one_connection(engine: DockerEngine) -> Iterator[None]:
    """Inside the block, an ``ssh://`` engine's calls go through one ssh connection, closed on
    leaving (also on an error, Ctrl-C or SIGTERM); any other engine is left as it is. Where one
    connection cannot be had, the engine keeps docker's own ssh per call, and a warning says why."""
    endpoint = engine.endpoint()
    if engine.dial or not endpoint.startswith("ssh://"):
        yield
        return
    forward: SshForward | None = None
    with sigterm_as_interrupt():
        try:
            try:
                forward = SshForward(endpoint, remote_socket(endpoint))
                engine.dial = forward.open()
                _check_answers(engine, forward)
            except (ForwardUnavailable, ConfigError) as exc:
                engine.dial = None
                if forward is not None:
                    forward.close()
                console.warn(f"engine {engine.describe()}: no shared ssh connection ({exc}); "
                             "every docker call opens its own, which is slower")
            yield
        finally:
            engine.dial = None
            if forward is not None:
                forward.close()


def _check_answers(engine: DockerEngine, forward: SshForward) -> None:
    """The daemon answers through the forward (its sshd may refuse to forward a socket)."""
    try:
        proc = engine.run_cli(["version", "--format", "{{.Server.Version}}"],
                              timeout=QUICK_TIMEOUT_S)
    except EngineError as exc:
        raise ForwardUnavailable(f"the daemon did not answer through it: {exc}") from None
    if proc.returncode != 0:
        said = proc.stderr.decode(errors="replace")
        raise ForwardUnavailable(f"the daemon did not answer through it "
                                 f"({_last_line(said, forward.ssh_said('no answer'))})")
