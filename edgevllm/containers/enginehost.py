"""The machine an engine runs on, asked of that engine: its architecture (native or emulated for
a platform), the platforms its builder emulates, its free disk.

A build on ``--engine ssh://me@spark`` runs on the Spark: whether linux/arm64 is native there, and
whether its disk holds the build, are the Spark's facts, not this machine's. An engine on this
machine (a local socket) is read here as before (``host.py``: binfmt_misc, the output's disk).
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from edgevllm.common.errors import BinfmtMissingError, DiskSpaceError, EngineError
from edgevllm.containers.docker import DockerEngine
from edgevllm.containers.host import check_disk, check_emulation, disk_need_gb, platform_arch
from edgevllm.containers.sshforward import ssh_argv

SSH_TIMEOUT_S = 20
_ABSOLUTE_PATH = re.compile(r"^/[\w./+-]*\Z")


@dataclass(frozen=True)
class EnginePlatform:
    """How an engine builds a platform: ``native`` or ``emulated`` on a machine of ``arch``."""

    engine: str
    arch: str
    platform: str
    how: str  # native | emulated

    def line(self) -> str:
        return f"engine {self.engine}: {self.arch} machine, {self.platform} {self.how}"


def engine_platform(engine: DockerEngine, platform: str) -> EnginePlatform:
    """Native, or emulated where the engine's machine can emulate ``platform``; else one line
    saying what to do. A local engine's emulation is checked here (binfmt_misc), a remote one's
    is what its builder reports (``docker buildx inspect``: the platforms it runs)."""
    arch = engine.server_arch()
    if platform_arch(platform) == arch:
        return EnginePlatform(engine.describe(), arch, platform, "native")
    if engine.runs_here:
        check_emulation(platform)
    elif platform not in engine.buildx_platforms():
        raise BinfmtMissingError(
            f"engine {engine.describe()} is an {arch} machine that cannot run {platform}: build "
            f"on an engine of that architecture, or install qemu-user-static and binfmt-support "
            "there")
    return EnginePlatform(engine.describe(), arch, platform, "emulated")


def engine_free_gb(engine: DockerEngine) -> float | None:
    """Free disk where a remote engine keeps its images and build cache, read over ssh (``df``
    on its machine); None where it is not reached over ssh (tcp://: nothing to ask)."""
    endpoint = engine.endpoint()
    if not endpoint.startswith("ssh://"):
        return None
    root = engine.root_dir()
    if not _ABSOLUTE_PATH.match(root):
        raise EngineError(f"engine {engine.describe()} names an odd root folder {root!r}")
    argv = ssh_argv(endpoint, command=f"df -Pk {shlex.quote(root)}")
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=SSH_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    rows = proc.stdout.strip().splitlines()
    fields = rows[-1].split() if proc.returncode == 0 and len(rows) >= 2 else []
    return int(fields[3]) * 1024 / 1e9 if len(fields) >= 4 and fields[3].isdigit() else None


def check_engine_disk(engine: DockerEngine, need_gb: float) -> str:
    """A remote engine's free disk against what the build needs; returns the line to print
    (which says so when the engine cannot be asked)."""
    need_gb = disk_need_gb(need_gb)
    free = engine_free_gb(engine)
    if free is None:
        return (f"engine {engine.describe()}: free disk unknown (only an ssh:// engine is asked); "
                f"the build needs about {need_gb:.0f} GB there")
    if free < need_gb:
        raise DiskSpaceError(
            f"only {free:.1f} GB free on engine {engine.describe()}, this build needs about "
            f"{need_gb:.0f} GB there: free disk space on it (docker builder prune there)")
    return f"engine {engine.describe()}: {free:.0f} GB free"


def check_build_disk(engine: DockerEngine, out: Path, need_gb: float) -> str:
    """The free disk a build needs, where that engine keeps what it builds: the output's disk
    for an engine on this machine, the engine's machine's otherwise (a line when it cannot be
    asked). One line to print; ``DiskSpaceError`` where too little is free."""
    if not engine.runs_here:
        return check_engine_disk(engine, need_gb)
    check_disk(out, need_gb)
    return f">= {disk_need_gb(need_gb):g} GB free under {out}"


def load_disk_verdict(unpacked_gb: float, free_gb: float | None, where: str) -> tuple[str, str]:
    """``docker load`` first writes the whole archive into the engine's temporary folder (under
    its root), then makes the layers it does not hold yet, then drops the temporary copy: it
    cannot finish with less free than the archive, and may need up to twice that. Returns
    (level, line): level "error" (refuse before a byte is sent), "warn" or "info"."""
    if free_gb is None:
        return "info", (f"{where}: free disk unknown; docker load needs {unpacked_gb:.1f} GB "
                        "there to unpack the archive, up to twice that with its new layers")
    if free_gb < unpacked_gb:
        return "error", (f"only {free_gb:.1f} GB free {where}, and docker load first unpacks "
                         f"the whole {unpacked_gb:.1f} GB archive there: free disk space on "
                         "it (docker image prune, docker builder prune) and load again")
    if free_gb < 2 * unpacked_gb:
        return "warn", (f"{free_gb:.1f} GB free {where}: enough to unpack the {unpacked_gb:.1f} "
                        "GB archive; the layers the engine does not hold yet need up to as "
                        "much again")
    return "info", f"{free_gb:.0f} GB free {where} (docker load needs {unpacked_gb:.1f} GB)"


def check_load_disk(engine: DockerEngine, unpacked_bytes: int) -> tuple[str, str]:
    """The verdict of ``load_disk_verdict`` for ``engine``: its root folder's disk, asked here
    for an engine on this machine, over ssh for one on another (unknown where neither can)."""
    unpacked_gb = unpacked_bytes / 1e9
    if not engine.runs_here:
        return load_disk_verdict(unpacked_gb, engine_free_gb(engine),
                                 f"on engine {engine.describe()}")
    root = engine.root_dir()
    try:
        free: float | None = shutil.disk_usage(root).free / 1e9
    except OSError:   # the root folder is the daemon's; this user may not reach it
        free = None
    return load_disk_verdict(unpacked_gb, free, f"under {root or 'the engine root'}")
