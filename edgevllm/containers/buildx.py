"""Builds with ``docker buildx``: is buildx there, the platforms its builder runs, a build's
output line by line."""

from __future__ import annotations

import contextlib
import os
import subprocess

from edgevllm.common.errors import DockerUnavailableError
from edgevllm.containers.daemon import QUICK_TIMEOUT_S, Daemon, LineSink
from edgevllm.containers.options import BuildOptions


class Buildx(Daemon):
    """``docker buildx``: the engine's builder."""

    def check_buildx(self) -> None:
        proc = self._run(["buildx", "version"], check=False, timeout=QUICK_TIMEOUT_S)
        if proc.returncode != 0:
            raise DockerUnavailableError(
                "docker buildx is missing: install the buildx plugin "
                "(Debian: apt-get install docker-buildx)"
            )

    def buildx_platforms(self) -> list[str]:
        """The platforms this engine's builder runs: its own, and those its machine emulates."""
        proc = self._run(["buildx", "inspect"], timeout=QUICK_TIMEOUT_S)
        for line in proc.stdout.decode(errors="replace").splitlines():
            if line.startswith("Platforms:"):
                return [p.strip().rstrip("*") for p in line.split(":", 1)[1].split(",")
                        if p.strip()]
        return []

    def build(
        self, options: BuildOptions, on_line: LineSink, env: dict[str, str] | None = None
    ) -> int:
        """Run ``docker buildx build``, feeding every output line to ``on_line``; return the exit
        code.

        ``env`` adds variables for buildx itself (e.g. a token read by ``--secret env=...``).
        """
        self._require_binary()
        proc_env = dict(os.environ, BUILDX_NO_DEFAULT_ATTESTATIONS="1", **(env or {}))
        proc = subprocess.Popen(
            self.base_argv() + options.argv(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=proc_env,
        )
        assert proc.stdout is not None
        try:
            for raw in proc.stdout:
                on_line(raw.decode(errors="replace").rstrip("\n"))
            return proc.wait()
        except BaseException:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            if proc.poll() is None:
                proc.kill()
            raise
