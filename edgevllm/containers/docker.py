"""The one container-engine abstraction: everything that talks to Docker goes through here.

It drives the ``docker`` CLI with argument lists (never a shell), so that ``--dry-run`` can print
the exact equivalent command, and so that buildx, contexts and ``ssh://`` hosts work exactly as
they do for the user. Each ``DockerEngine`` is bound to one daemon (the default one, a docker
context, or a ``DOCKER_HOST``-style URL), which is how a cluster talks to several nodes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import IO, Callable, Iterator, Sequence

from edgevllm.common.errors import (
    ConfigError,
    DaemonUnreachableError,
    DockerUnavailableError,
    EngineError,
    ImageNotFoundError,
)
from edgevllm.containers.enginespec import check_engine_spec, parse_ssh_url
from edgevllm.containers.options import BuildOptions, RunOptions

__all__ = ["BuildOptions", "DockerEngine", "RunOptions", "parse_ssh_url"]

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
class DockerEngine:
    """A docker daemon reached through the docker CLI.

    ``context``: a docker context name; ``host``: a daemon URL (``unix://``, ``tcp://``, ``ssh://``).
    """

    def __init__(self, context: str | None = None, host: str | None = None, binary: str = "docker"):
        self.context = context
        self.host = host
        self.binary = binary
        self.dial: str | None = None  # a build's one ssh connection to it (sshforward.py)

    @classmethod
    def named(cls, spec: str | None) -> "DockerEngine":
        """The engine a flag names: ``local``/``default``/nothing, a daemon URL (``ssh://me@node``,
        ``tcp://``, ``unix://``) or a docker context name."""
        if not spec or spec in ("local", "default"):
            return cls()
        check_engine_spec(spec)
        return cls(host=spec) if "://" in spec else cls(context=spec)

    # -- plumbing -------------------------------------------------------------------------------
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

    # -- health checks --------------------------------------------------------------------------
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

    def check_buildx(self) -> None:
        proc = self._run(["buildx", "version"], check=False, timeout=QUICK_TIMEOUT_S)
        if proc.returncode != 0:
            raise DockerUnavailableError(
                "docker buildx is missing: install the buildx plugin "
                "(Debian: apt-get install docker-buildx)"
            )

    def server_arch(self) -> str:
        """The daemon's architecture in docker's words (amd64, arm64): what a build on this
        engine runs natively; a remote engine answers for its own machine."""
        proc = self._run(["version", "--format", "{{.Server.Arch}}"], timeout=QUICK_TIMEOUT_S)
        return proc.stdout.decode().strip()

    def buildx_platforms(self) -> list[str]:
        """The platforms this engine's builder runs: its own, and those its machine emulates."""
        proc = self._run(["buildx", "inspect"], timeout=QUICK_TIMEOUT_S)
        for line in proc.stdout.decode(errors="replace").splitlines():
            if line.startswith("Platforms:"):
                return [p.strip().rstrip("*") for p in line.split(":", 1)[1].split(",")
                        if p.strip()]
        return []

    def root_dir(self) -> str:
        """Where the daemon keeps images and build cache (on its own machine)."""
        proc = self._run(["info", "--format", "{{.DockerRootDir}}"], timeout=QUICK_TIMEOUT_S)
        return proc.stdout.decode().strip()

    # -- build ----------------------------------------------------------------------------------
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

    # -- images ---------------------------------------------------------------------------------
    def image_inspect(self, ref: str) -> dict:
        proc = self._run(["image", "inspect", ref], check=False)
        if proc.returncode != 0:
            raise ImageNotFoundError(
                f"image '{ref}' not found on engine {self.describe()}: build it, pull it or "
                "load it first (docker images lists what is there)"
            )
        return json.loads(proc.stdout)[0]

    def images(self, repository: str, fmt: str = "{{.ID}}") -> list[str]:
        """``docker images REPOSITORY``: one formatted line per image (ids by default)."""
        proc = self._run(["images", "--format", fmt, repository])
        return proc.stdout.decode().split()

    def image_exists(self, ref: str) -> bool:
        return self._run(["image", "inspect", ref], check=False).returncode == 0

    def image_id(self, ref: str) -> str:
        return self.image_inspect(ref)["Id"]

    def image_labels(self, ref: str) -> dict[str, str]:
        return self.image_inspect(ref).get("Config", {}).get("Labels") or {}

    def import_rootfs(
        self, tarball: Path, tag: str, platform: str | None = None, changes: Sequence[str] = ()
    ) -> str:
        """``docker import`` a root filesystem tarball as an image (locally built base images)."""
        args = ["import"] + (["--platform", platform] if platform else [])
        for change in changes:
            args += ["--change", change]
        return self._run(args + [str(tarball), tag]).stdout.decode().strip()

    def tag(self, source: str, target: str) -> None:
        self._run(["tag", source, target])

    def remove_image(self, ref: str, force: bool = False) -> None:
        self._run(["rmi"] + (["-f"] if force else []) + [ref], check=False)

    def pull(self, ref: str) -> None:
        self._run(["pull", "-q", ref])

    def push(self, ref: str) -> str:
        """Push and return the pushed manifest digest (``sha256:...``)."""
        proc = self._run(["push", ref])
        for line in proc.stdout.decode(errors="replace").splitlines():
            if "digest: sha256:" in line:
                return "sha256:" + line.split("digest: sha256:")[1].split()[0]
        raise EngineError(f"docker push {ref} printed no digest; check the registry")

    def manifest_digest(self, ref: str, timeout: float | None = None) -> str | None:
        """The digest a registry holds for ``ref``, or None when the tag does not exist there
        (or the registry cannot be reached within ``timeout``)."""
        try:
            proc = self._run(
                ["buildx", "imagetools", "inspect", "--format", "{{json .Manifest}}", ref],
                check=False,
                timeout=timeout,
            )
        except EngineError:  # timed out: unknown, not an error
            return None
        if proc.returncode != 0:
            return None
        return json.loads(proc.stdout).get("digest")

    def registry_manifest(self, ref: str) -> bytes | None:
        """The raw manifest (or index) bytes a registry holds for ``ref``; None when not found.

        Goes through ``buildx imagetools`` so docker's own credentials and insecure-registry
        rules apply. Any failure other than "not found" raises (an unreachable registry must not
        look like a free tag).
        """
        proc = self._run(["buildx", "imagetools", "inspect", "--raw", ref], check=False)
        if proc.returncode == 0:
            return proc.stdout
        stderr = proc.stderr.decode(errors="replace").strip()
        if stderr.endswith(": not found") or "manifest unknown" in stderr:
            return None
        last = (stderr.splitlines() or [f"exit code {proc.returncode}"])[-1]
        raise EngineError(f"cannot read {ref} from its registry: {last}")

    @contextlib.contextmanager
    def save_stream(self, refs: Sequence[str]) -> Iterator[IO[bytes]]:
        """``docker save`` as a byte stream (no file on disk)."""
        self._require_binary()
        proc = subprocess.Popen(
            self.base_argv() + ["save"] + list(refs), stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert proc.stdout is not None
        try:
            yield proc.stdout
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        proc.stdout.close()
        stderr = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
        if proc.wait() != 0:
            self.raise_if_unreachable(stderr)
            raise EngineError(f"docker save {' '.join(refs)} failed: {stderr.splitlines()[-1:]}")

    @contextlib.contextmanager
    def load_stream(self) -> Iterator[IO[bytes]]:
        """``docker load`` reading the yielded pipe; leaving the block closes it and waits.

        For feeding one ``docker save`` to several engines at once (``inv copy``).
        """
        self._require_binary()
        proc = subprocess.Popen(
            self.base_argv() + ["load", "-q"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        assert proc.stdin is not None
        try:
            yield proc.stdin
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()
        err = proc.stderr.read() if proc.stderr else b""
        if proc.wait() != 0:
            self.raise_if_unreachable(err)
            last = (err.decode(errors="replace").strip().splitlines() or ["?"])[-1]
            raise EngineError(f"docker load failed on engine {self.describe()}: {last}")

    def load_from(self, write: Callable[[IO[bytes]], None]) -> list[str]:
        """Feed ``docker load`` through ``write(stdin)``; return the loaded image names/ids."""
        self._require_binary()
        proc = subprocess.Popen(
            self.base_argv() + ["load"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdin is not None
        try:
            write(proc.stdin)
            proc.stdin.close()
            proc.stdin = None  # communicate() would flush the closed pipe
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        out, err = proc.communicate()
        if proc.returncode != 0:
            self.raise_if_unreachable(err)
            raise EngineError(f"docker load failed: {err.decode(errors='replace').strip()}")
        loaded = []
        for line in out.decode().splitlines():
            for prefix in ("Loaded image: ", "Loaded image ID: "):
                if line.startswith(prefix):
                    loaded.append(line[len(prefix) :].strip())
        return loaded

    # -- containers -----------------------------------------------------------------------------
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

    def logs(self, container: str, tail: int | None = None) -> str:
        args = ["logs"] + (["--tail", str(tail)] if tail else []) + [container]
        proc = self._run(args, check=False)
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

    # -- networks -------------------------------------------------------------------------------
    def network_create(self, name: str, labels: dict[str, str] | None = None) -> None:
        args = ["network", "create"]
        for key, value in (labels or {}).items():
            args += ["--label", f"{key}={value}"]
        self._run(args + [name])

    def network_remove(self, name: str) -> None:
        self._run(["network", "rm", name], check=False)

    def network_exists(self, name: str) -> bool:
        return self._run(["network", "inspect", name], check=False).returncode == 0
