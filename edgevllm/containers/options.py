"""What one ``docker run`` or ``docker buildx build`` is asked to do, as argument lists.

``DockerEngine`` (containers/docker.py) runs them; ``--dry-run`` prints them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence


@dataclass
class RunOptions:
    """What ``docker run`` takes; ``argv()`` is the exact command line."""

    image: str
    command: Sequence[str] = ()
    name: str | None = None
    detach: bool = False
    remove: bool = False
    env: dict[str, str] = field(default_factory=dict)
    env_names: Sequence[str] = ()  # passed as `-e NAME` so values (secrets) stay out of argv
    volumes: Sequence[str] = ()  # "src:dst[:ro]"
    ports: Sequence[str] = ()  # "8000:8000"
    network: str | None = None
    hostname: str | None = None
    ipc: str | None = None
    shm_size: str | None = None
    runtime: str | None = None
    gpus: str | None = None
    restart: str | None = None
    entrypoint: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    platform: str | None = None
    workdir: str | None = None
    user: str | None = None
    extra: Sequence[str] = ()  # further `docker run` flags, verbatim

    def argv(self) -> list[str]:
        args = ["run"]
        if self.detach:
            args.append("-d")
        if self.remove:
            args.append("--rm")
        flags = [
            ("--name", self.name),
            ("--network", self.network),
            ("--hostname", self.hostname),
            ("--ipc", self.ipc),
            ("--shm-size", self.shm_size),
            ("--runtime", self.runtime),
            ("--gpus", self.gpus),
            ("--restart", self.restart),
            ("--entrypoint", self.entrypoint),
            ("--platform", self.platform),
            ("--workdir", self.workdir),
            ("--user", self.user),
        ]
        for flag, value in flags:
            if value is not None:
                args += [flag, value]
        for key, value in self.labels.items():
            args += ["--label", f"{key}={value}"]
        for key, value in self.env.items():
            args += ["-e", f"{key}={value}"]
        for key in self.env_names:
            args += ["-e", key]
        for volume in self.volumes:
            args += ["-v", volume]
        for port in self.ports:
            args += ["-p", port]
        args += list(self.extra)
        args.append(self.image)
        args += list(self.command)
        return args


@dataclass
class BuildOptions:
    """One ``docker buildx build`` invocation."""

    context: Path
    dockerfile: Path
    target: str | None = None
    platform: str | None = None
    tags: Sequence[str] = ()
    build_args: dict[str, str] = field(default_factory=dict)
    build_contexts: dict[str, str] = field(default_factory=dict)  # name → path or docker-image://
    labels: dict[str, str] = field(default_factory=dict)
    output: str | None = None  # e.g. "type=local,dest=DIR"; default: --load into the engine
    secrets: Sequence[str] = ()  # "id=hf,env=HF_TOKEN": never a build arg, never in a layer
    network: str | None = None
    no_cache: bool = False
    iidfile: Path | None = None
    metadata_file: Path | None = None

    def argv(self) -> list[str]:
        args = ["buildx", "build", "--progress=plain", "-f", str(self.dockerfile)]
        if self.target:
            args += ["--target", self.target]
        if self.platform:
            args += ["--platform", self.platform]
        for tag in self.tags:
            args += ["-t", tag]
        for key, value in sorted(self.build_args.items()):
            args += ["--build-arg", f"{key}={value}"]
        for name, source in sorted(self.build_contexts.items()):
            args += ["--build-context", f"{name}={source}"]
        for key, value in sorted(self.labels.items()):
            args += ["--label", f"{key}={value}"]
        for secret in self.secrets:
            args += ["--secret", secret]
        if self.network:
            args += ["--network", self.network]
        if self.no_cache:
            args.append("--no-cache")
        if self.iidfile:
            args += ["--iidfile", str(self.iidfile)]
        if self.metadata_file:
            args += ["--metadata-file", str(self.metadata_file)]
        args += ["--output", self.output] if self.output else ["--load"]
        args.append(str(self.context))
        return args
