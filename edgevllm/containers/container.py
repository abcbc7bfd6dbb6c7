"""Containers on an engine: run, start, create, exec, logs, stop, remove, list, and files copied
in and out (``docker cp``, ``docker export`` as streams)."""

from __future__ import annotations

import contextlib
import json
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import IO, Callable, Iterator, Sequence

from edgevllm.common.errors import EngineError
from edgevllm.containers.daemon import Daemon
from edgevllm.containers.options import RunOptions


class Containers(Daemon):
    """The engine's containers."""

    def run(
        self, options: RunOptions, timeout: float | None = None, input: bytes | None = None
    ) -> subprocess.CompletedProcess:
        """Run a container to completion (or start it detached); never raises on exit code.

        ``input`` is fed to the container's stdin (pass ``extra=["-i"]`` in ``options``).
        """
        return self._run(options.argv(), check=False, timeout=timeout, input=input)

    def start(self, options: RunOptions) -> str:
        """Start a detached container and return its id."""
        proc = self._run(replace(options, detach=True).argv())
        return proc.stdout.decode().strip()

    def exec(
        self, container: str, command: Sequence[str], timeout: float | None = None
    ) -> subprocess.CompletedProcess:
        return self._run(["exec", container] + list(command), check=False, timeout=timeout)

    def logs(self, container: str, tail: int | None = None, check: bool = False) -> str:
        """The container's log; ``check``: a failed ``docker logs`` (no such container, no
        such context) is an EngineError line, not its message printed as the log."""
        args = ["logs"] + (["--tail", str(tail)] if tail else []) + [container]
        proc = self._run(args, check=check)
        return (proc.stdout + proc.stderr).decode(errors="replace")

    def follow_logs(self, container: str) -> subprocess.Popen:
        self._require_binary()
        return subprocess.Popen(
            self.base_argv() + ["logs", "-f", container],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )

    def container_inspect(self, container: str) -> dict | None:
        proc = self._run(["container", "inspect", container], check=False)
        return json.loads(proc.stdout)[0] if proc.returncode == 0 else None

    def stop(self, container: str, timeout: int = 10) -> None:
        self._run(["stop", "-t", str(timeout), container], check=False)

    def remove_container(self, container: str) -> None:
        self._run(["rm", "-f", "-v", container], check=False)

    def containers(self, label: str | None = None, all: bool = True) -> list[dict]:
        args = ["ps", "--no-trunc", "--format", "{{json .}}"] + (["-a"] if all else [])
        if label:
            args += ["--filter", f"label={label}"]
        proc = self._run(args)
        return [json.loads(line) for line in proc.stdout.decode().splitlines() if line.strip()]

    def copy_from(self, container: str, src: str, dest: Path) -> None:
        self._run(["cp", f"{container}:{src}", str(dest)])

    def create_container(self, options: RunOptions) -> str:
        """``docker create`` with the options of a ``docker run`` (to fill it before start)."""
        argv = replace(options, detach=False).argv()
        return self._run(["create"] + argv[1:]).stdout.decode().strip()

    def start_container(self, container: str) -> None:
        self._run(["start", container])

    def copy_into(self, container: str, write: Callable[[IO[bytes]], None], dest: str = "/"
                  ) -> None:
        """``docker cp - CONTAINER:DEST`` fed a tar stream by ``write(stdin)``."""
        self._require_binary()
        proc = subprocess.Popen(self.base_argv() + ["cp", "-", f"{container}:{dest}"],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        assert proc.stdin is not None
        try:
            write(proc.stdin)
            proc.stdin.close()
            proc.stdin = None
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        _, err = proc.communicate()
        if proc.returncode != 0:
            self.raise_if_unreachable(err)
            last = (err.decode(errors="replace").strip().splitlines() or ["?"])[-1]
            raise EngineError(f"docker cp into {container} failed: {last}")

    def create(self, image: str, name: str | None = None) -> str:
        args = ["create"] + (["--name", name] if name else []) + [image, "true"]
        return self._run(args).stdout.decode().strip()

    @contextlib.contextmanager
    def export_stream(self, container: str) -> Iterator[IO[bytes]]:
        """The container's merged filesystem as a tar stream (``docker export``)."""
        self._require_binary()
        proc = subprocess.Popen(self.base_argv() + ["export", container], stdout=subprocess.PIPE)
        assert proc.stdout is not None
        try:
            yield proc.stdout
        finally:
            proc.stdout.close()
            proc.wait()
