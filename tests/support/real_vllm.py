"""What the real-vLLM end-to-end test builds from: a Debian trixie base with Python 3.13.

``trixie_python_image(engine, arch)``: debootstrap'ed trixie (glibc 2.41, Python 3.13) with the
venv module and g++ (FlashInfer's JIT runs nvcc from the closure's nvidia-cuda-nvcc wheel, which
calls the host compiler), imported with ``docker import``. It stands in for the runtime base a
prebuilt image needs (NVIDIA's registry is unreachable here): no CUDA in it, the CUDA libraries
come as wheels. The rootfs tarball is cached under ``$EDGEVLLM_TEST_CACHE``, the image in the
engine under a tag that encodes its inputs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from edgevllm.engine.docker import DockerEngine

from .images import MIRROR, _key, cache_root, image_lock, require_program

SUITE = "trixie"
PACKAGES = ["python3", "python3-venv", "g++", "ca-certificates"]
PYTHON = "python3.13"


def _debootstrap(arch: str, tarball: Path) -> None:
    require_program("debootstrap", "apt-get install debootstrap (bash .ci/install-engine.sh)")
    if os.geteuid() != 0:
        raise RuntimeError("building the trixie test base image needs root (debootstrap)")
    with tempfile.TemporaryDirectory(dir=cache_root(), prefix="rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        subprocess.run(
            ["debootstrap", f"--arch={arch}", "--variant=minbase",
             f"--include={','.join(PACKAGES)}", SUITE, str(rootfs), MIRROR],
            check=True, stdout=subprocess.DEVNULL)
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            shutil.rmtree(rootfs / junk, ignore_errors=True)
        partial = tarball.with_name(tarball.name + ".partial")
        subprocess.run(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(partial), "."],
                       check=True)
        os.replace(partial, tarball)


def trixie_python_image(engine: DockerEngine, arch: str = "amd64") -> str:
    """Tag of a Debian trixie + Python 3.13 + g++ image for linux/<arch>, built once, cached."""
    key = _key(SUITE, PACKAGES)
    tag = f"edgevllm-test/debian-python:{SUITE}-{arch}-{key}"
    with image_lock(f"trixie-image-{arch}"):
        if engine.image_exists(tag):
            return tag
        tarball = cache_root() / f"rootfs-{SUITE}-{arch}-{key}.tar"
        if not tarball.exists():
            _debootstrap(arch, tarball)
        engine.import_rootfs(
            tarball, tag, platform=f"linux/{arch}",
            changes=['CMD ["/bin/bash"]',
                     "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"])
    return tag
