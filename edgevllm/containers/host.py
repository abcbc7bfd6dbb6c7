"""Checks of the machine a build runs on, apart from the engine: emulation for a foreign
platform, free disk. The engine only talks to the daemon; these only read the host."""

from __future__ import annotations

import functools
import os
import platform as host_platform
import re
import shutil
import subprocess
from pathlib import Path

from edgevllm.common.errors import BinfmtMissingError, DiskSpaceError

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


# qemu before 8 emulates Python about 4x slower than qemu 10: byte-compiling the same stdlib slice
# took 7.7 s under 7.2 and 1.9 s under 10.0 here, and the byte-compile step of vLLM 0.33.0's closure
# 33 min under 7.2 against 8 min under 10.0; under 7.2 the probe's `import torch` (2.14) failed
# (docs/build-modes.md).
FAST_QEMU = (8, 0)


def emulator_version(platform: str) -> tuple[int, int] | None:
    """(major, minor) of the qemu that binfmt_misc runs ``platform`` with; None when unknown."""
    handler = _BINFMT_HANDLER.get(platform_arch(platform))
    try:
        lines = (BINFMT_DIR / handler).read_text().splitlines() if handler else []
    except OSError:
        return None
    interpreter = next((ln.split(None, 1)[1] for ln in lines if ln.startswith("interpreter ")), "")
    if not interpreter:
        return None
    try:  # the binfmt name refuses --version ("has to be run using binfmt"); its target does not
        proc = subprocess.run([os.path.realpath(interpreter), "--version"], capture_output=True,
                              text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"version (\d+)\.(\d+)", proc.stdout)
    return (int(found[1]), int(found[2])) if found else None


def slow_emulation(platform: str, remote_engine: bool = False) -> str | None:
    """A warning line when ``platform`` is emulated by a qemu older than ``FAST_QEMU``."""
    if platform_arch(platform) == host_arch() or remote_engine:
        return None
    version = emulator_version(platform)
    if version is None or version >= FAST_QEMU:
        return None
    return (f"qemu {version[0]}.{version[1]} emulates {platform} about 4x slower than qemu 10 "
            "(a prebuilt vLLM image: 35 min instead of 10 for its install step) and could not "
            "import torch 2.14 in the probe: install "
            "qemu-user-static >= 8 (Debian: apt-get install qemu-user-static/trixie, then "
            "bash .ci/install-engine.sh re-registers binfmt)")


def disk_need_gb(need_gb: float) -> float:
    """The disk a build needs: the target's figure, or ``EDGEVLLM_MIN_DISK_GB`` where set."""
    return float(os.environ.get("EDGEVLLM_MIN_DISK_GB") or need_gb)


def check_disk(path: Path, need_gb: float) -> None:
    """Free space under ``path`` for a build; ``EDGEVLLM_MIN_DISK_GB`` replaces the target's
    figure when you know the build is smaller (a prebuilt image, a test fixture)."""
    need_gb = disk_need_gb(need_gb)
    where = path.absolute()
    while not where.exists() and where != where.parent:  # a check creates no folder (doctor)
        where = where.parent
    free_gb = shutil.disk_usage(where).free / 1e9
    if free_gb < need_gb:
        raise DiskSpaceError(
            f"only {free_gb:.1f} GB free under {path}, this needs about {need_gb:.0f} GB: "
            "free disk space or prune Docker (docker builder prune)")


# -- which device this machine is -----------------------------------------------------------------
def device_description() -> str:
    """What this machine says it is, in the device's own words: a Jetson's device-tree model
    (``NVIDIA Jetson AGX Thor Developer Kit``, with ``/etc/nv_tegra_release`` as L4T's mark) and
    the GPU names the driver gives (``/proc/driver/nvidia/gpus/*/information``, nvidia-smi:
    ``NVIDIA GB10`` on a DGX Spark); "" on anything else.
    ``EDGEVLLM_DEVICE_ROOT`` reads the files under another root (a test's stand-in device)."""
    return _described(os.environ.get("EDGEVLLM_DEVICE_ROOT", "/"))


@functools.lru_cache(maxsize=4)
def _described(root_text: str) -> str:
    root = Path(root_text)
    words = []
    model = root / "proc/device-tree/model"
    if model.is_file():
        words.append(model.read_bytes().rstrip(b"\0").decode(errors="replace"))
    if (root / "etc/nv_tegra_release").is_file():
        words.append("Jetson (L4T)")
    # The NVIDIA driver's own description of each GPU ("Model: NVIDIA GB10").
    for info in sorted((root / "proc/driver/nvidia/gpus").glob("*/information")):
        words += [line.split(":", 1)[1].strip() for line in info.read_text().splitlines()
                  if line.startswith("Model:")]
    smi = shutil.which("nvidia-smi")
    if smi and root == Path("/"):
        try:
            proc = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"],
                                  capture_output=True, text=True, timeout=20)
            words += [line.strip() for line in proc.stdout.splitlines() if line.strip()]
        except (OSError, subprocess.TimeoutExpired):
            pass  # a driver that does not answer: not a device we can name
    return "; ".join(words)
