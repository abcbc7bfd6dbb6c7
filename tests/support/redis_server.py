"""A real, throw-away redis-server as ccache's remote storage (--compile-cache) for tests and
bench/: it listens on this host's address on Docker's bridge, which a build step reaches, with a
password, no persistence and a temporary folder; ``redis_server`` yields its ``redis://`` URL.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
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
    if shutil.which("redis-server") is None:
        raise RuntimeError("this needs redis-server: apt-get install redis-server "
                           "(bash .ci/install-engine.sh installs it)")
    host = bridge_gateway(engine)
    port = free_port(host)
    with tempfile.TemporaryDirectory(prefix="edgevllm-test-redis-") as workdir:
        proc = subprocess.Popen(["redis-server", "--bind", host, "--port", str(port),
                                 "--requirepass", password, "--save", "", "--appendonly", "no",
                                 "--dir", workdir], stdout=subprocess.DEVNULL)
        try:
            wait_listening(proc, host, port)
            yield f"redis://{password}@{host}:{port}"  # ccache: a password alone
        finally:
            proc.terminate()
            proc.wait(timeout=10)


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
