"""A real, throw-away Docker registry for tests: Debian's ``docker-registry`` (distribution).

``local_registry`` starts it on 127.0.0.1 with a free port and a temporary storage folder, waits
until ``/v2/`` answers, yields its ``host:port`` and kills it afterwards. Docker treats 127.0.0.0/8
as an insecure (plain HTTP) registry by default, so pushes and pulls need no daemon config.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator

import requests

CONFIG = """version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: {root}
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def local_registry() -> Iterator[str]:
    with local_registry_storage() as (host, _storage):
        yield host


AUTH = """auth:
  htpasswd:
    realm: edgevllm-test
    path: {htpasswd}
"""


@contextlib.contextmanager
def local_registry_storage(login: tuple[str, str] | None = None) -> Iterator[tuple[str, Path]]:
    """``local_registry``, and the folder it stores blobs in (a test corrupts one there). With
    ``login`` (user, password) it asks for that login (htpasswd, bcrypt: HTTP Basic)."""
    binary = shutil.which("docker-registry") or shutil.which("registry")
    if binary is None:
        raise RuntimeError(
            "the registry tests need a Docker registry server: "
            "apt-get install docker-registry (Debian)"
        )
    with tempfile.TemporaryDirectory(prefix="edgevllm-test-registry-") as tmp:
        port = free_port()
        config = Path(tmp) / "config.yml"
        text = CONFIG.format(root=Path(tmp) / "storage", port=port)
        if login:
            import bcrypt

            hashed = bcrypt.hashpw(login[1].encode(), bcrypt.gensalt(rounds=4)).decode()
            (Path(tmp) / "htpasswd").write_text(f"{login[0]}:{hashed}\n")
            text += AUTH.format(htpasswd=Path(tmp) / "htpasswd")
        config.write_text(text)
        log = open(Path(tmp) / "registry.log", "wb")
        proc = subprocess.Popen(
            [binary, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT
        )
        try:
            _wait_ready(proc, port, Path(tmp) / "registry.log")
            yield f"127.0.0.1:{port}", Path(tmp) / "storage"
        finally:
            proc.kill()
            proc.wait()
            log.close()


def _wait_ready(proc: subprocess.Popen, port: int, log: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"docker-registry exited at start: {log.read_text()[-500:]}")
        with contextlib.suppress(requests.RequestException):
            if requests.get(f"http://127.0.0.1:{port}/v2/", timeout=2).status_code in (200, 401):
                return
        time.sleep(0.2)
    raise RuntimeError(f"docker-registry did not answer on 127.0.0.1:{port} within {timeout}s")


def blob_file(storage: Path, sha256: str) -> Path:
    """Where the registry's filesystem storage keeps the blob of this sha256 (hex, or
    ``sha256:``-prefixed): the file a test corrupts."""
    hexa = sha256.removeprefix("sha256:")
    return storage / "docker/registry/v2/blobs/sha256" / hexa[:2] / hexa / "data"
