"""Checks of the machine a build runs on, apart from the engine: emulation for a foreign
platform, free disk. The engine only talks to the daemon; these only read the host."""

from __future__ import annotations

import os
import platform as host_platform
import shutil
from pathlib import Path

from edgevllm.kernel.errors import BinfmtMissingError, DiskSpaceError

# Machine names as `uname -m` prints them → docker platform architectures.
_HOST_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
# Docker architecture → the binfmt_misc handler that runs it under emulation.
_BINFMT_HANDLER = {"arm64": "qemu-aarch64", "amd64": "qemu-x86_64"}


def host_arch() -> str:
    machine = host_platform.machine().lower()
    return _HOST_ARCH.get(machine, machine)


def platform_arch(platform: str) -> str:
    """``linux/arm64`` → ``arm64``."""
    parts = platform.split("/")
    return parts[1] if len(parts) > 1 else parts[0]

# Where the kernel lists binfmt_misc handlers (a module value so tests can point it elsewhere).
BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")


def check_emulation(platform: str, remote_engine: bool = False) -> None:
    """A foreign platform needs a binfmt_misc handler (qemu-user-static) on a local engine."""
    arch = platform_arch(platform)
    if arch == host_arch() or remote_engine:
        return
    handler = _BINFMT_HANDLER.get(arch)
    if handler is None:
        return
    try:
        enabled = (BINFMT_DIR / handler).read_text().splitlines()[0].strip() == "enabled"
    except (OSError, IndexError):
        enabled = False
    if not enabled:
        raise BinfmtMissingError(
            f"building {platform} on a {host_arch()} host needs emulation: install "
            f"qemu-user-static and binfmt-support, then run 'update-binfmts --enable {handler}'")


def check_disk(path: Path, need_gb: float) -> None:
    """Free space under ``path`` for a build; ``EDGEVLLM_MIN_DISK_GB`` replaces the target's
    figure when you know the build is smaller (a prebuilt image, a test fixture)."""
    need_gb = float(os.environ.get("EDGEVLLM_MIN_DISK_GB") or need_gb)
    path.mkdir(parents=True, exist_ok=True)
    free_gb = shutil.disk_usage(path).free / 1e9
    if free_gb < need_gb:
        raise DiskSpaceError(
            f"only {free_gb:.1f} GB free under {path}, this needs about {need_gb:.0f} GB: "
            "free disk space or prune Docker (docker builder prune)")
