"""A real redis-server as ccache's remote storage (--compile-cache) for tests and bench/: it
listens on this host's address on Docker's bridge, which a build step reaches, with a password.
``redis_server`` is throw-away (no persistence, a temporary folder); ``kept_redis_server`` keeps
its data in a folder of the test cache between runs. Both yield the ``redis://`` URL.
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator

from edgevllm.containers.docker import DockerEngine


def bridge_gateway(engine: DockerEngine) -> str:
    """The address of this host on Docker's bridge: what a build step reaches the host by."""
    proc = engine.run_cli(["network", "inspect", "bridge", "--format",
                           "{{range .IPAM.Config}}{{.Gateway}}{{end}}"])
    gateway = proc.stdout.decode().strip()
    if proc.returncode != 0 or not gateway:
        raise RuntimeError("docker network inspect bridge gave no gateway")
    return gateway


def free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def redis_server(engine: DockerEngine, password: str) -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="edgevllm-test-redis-") as workdir:
        with _serve(engine, password, workdir, save="") as url:
            yield url


@contextlib.contextmanager
def kept_redis_server(engine: DockerEngine, folder: Path) -> Iterator[str]:
    """A redis-server whose data lives in ``folder`` (the test cache) from one run to the
    next: a compile cache that outlives BuildKit's. It saves every minute with a change and
    when it stops; its password is made once and kept beside the data."""
    folder.mkdir(parents=True, exist_ok=True)
    secret = folder / "password"
    if not secret.exists():
        secret.write_text(secrets.token_hex(16))
        secret.chmod(0o600)
    with _serve(engine, secret.read_text().strip(), str(folder), save="60 1") as url:
        yield url


@contextlib.contextmanager
def _serve(engine: DockerEngine, password: str, workdir: str, save: str) -> Iterator[str]:
    if shutil.which("redis-server") is None:
        raise RuntimeError("this needs redis-server: apt-get install redis-server "
                           "(bash .ci/install-engine.sh installs it)")
    host = bridge_gateway(engine)
    port = free_port(host)
    proc = subprocess.Popen(["redis-server", "--bind", host, "--port", str(port),
                             "--requirepass", password, "--save", save, "--appendonly", "no",
                             "--dir", workdir], stdout=subprocess.DEVNULL)
    try:
        wait_listening(proc, host, port)
        yield f"redis://{password}@{host}:{port}"  # ccache: a password alone
    finally:
        proc.terminate()   # with save points, redis writes its data before it exits
        proc.wait(timeout=60)


def wait_listening(proc: subprocess.Popen, host: str, port: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"redis-server exited with {proc.returncode} before listening "
                               f"on {host}:{port}")
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not listen on {host}:{port} "
                                   f"within {timeout} s") from None
            time.sleep(0.1)
