"""``inv doctor``: is this machine ready to build for a target? Every check, with its remedy.

The build runs the same checks as its preflight and stops at the first failure; the doctor runs
all of them and also looks ahead (base images reachable, compose available) so that a user learns
everything that is missing at once.
"""

from __future__ import annotations

import functools
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from edgevllm.common.errors import BinfmtMissingError, EdgeVllmError, MissingToolError
from edgevllm.containers.docker import DockerEngine
from edgevllm.containers.enginehost import check_build_disk, engine_platform
from edgevllm.containers.host import (
    emulator_version,
    host_arch,
    platform_arch,
    slow_emulation,
)
from edgevllm.specs.targets import Target


@dataclass
class Finding:
    name: str
    status: str  # "ok", "warn" or "fail"
    detail: str


def _check(name: str, probe: Callable[[], str], warn_only: bool = False) -> Finding:
    try:
        return Finding(name, "ok", probe() or "")
    except EdgeVllmError as exc:
        return Finding(name, "warn" if warn_only else "fail", str(exc))


def _git() -> str:
    found = shutil.which("git")
    if found is None:
        raise MissingToolError("git not found: install git (sources are resolved on the host)")
    return found


def _compose(engine: DockerEngine) -> str:
    proc = engine.run_cli(["compose", "version", "--short"])
    if proc.returncode != 0:
        raise MissingToolError("docker compose is missing (needed by inv compose only): "
                               "install the compose plugin (Debian: docker-compose)")
    return proc.stdout.decode().strip()


def _base_image(engine: DockerEngine, ref: str) -> str:
    digest = engine.manifest_digest(ref, timeout=30)
    if digest is None:
        raise MissingToolError(f"cannot read {ref} from its registry: a real build pulls it; check "
                               "the network and `docker login nvcr.io`, or pre-pull it")
    return digest


def run_checks(target: Target, out: Path, engine: DockerEngine) -> list[Finding]:
    def daemon() -> str:
        engine.check_daemon()
        return "reachable"

    def buildx() -> str:
        engine.check_buildx()
        return "present"

    def platform() -> str:
        how = engine_platform(engine, target.platform)
        return f"{target.platform} {how.how} on {how.arch}"

    def emulation_speed() -> str:
        if not engine.runs_here or platform_arch(target.platform) == host_arch():
            return "no emulation here"
        slow = slow_emulation(target.platform)
        if slow:
            raise BinfmtMissingError(slow)
        version = emulator_version(target.platform)
        return f"qemu {version[0]}.{version[1]}" if version else "qemu version unknown"

    def disk() -> str:
        return check_build_disk(engine, out, target.min_disk_gb)

    findings = [_check("docker daemon", daemon), _check("docker buildx", buildx),
                _check("emulation / platform", platform),
                _check("emulation speed", emulation_speed, warn_only=True),
                _check("disk", disk), _check("git", _git)]
    if findings[0].status == "ok":
        findings.append(_check("docker compose", lambda: _compose(engine), warn_only=True))
        for ref in dict.fromkeys([target.images.build, target.images.runtime]):
            findings.append(_check("base image", functools.partial(_base_image, engine, ref),
                                   warn_only=True))
    return findings
