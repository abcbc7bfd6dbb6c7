"""A fixture image with Ray, for the cluster test: no GPU and no vLLM, only the launcher's Ray part.

``ray_image(engine)`` = ``python_image(engine, <this host's arch>)`` + ``ray`` installed offline
from wheels for that platform that ``pip download`` fetched on the host (cached under
``$EDGEVLLM_TEST_CACHE/ray-wheels``) and passed in as the build context. The image is tagged by
a hash of its inputs, so reruns reuse it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from edgevllm.containers.docker import BuildOptions, DockerEngine

from .cacheuse import record
from .images import _key, cache_root, image_lock, python_image
from .platforms import native_arch, platform_of, wheel_tags

RAY_VERSION = "2.60.0"
GLIBC = ("2014", "2_17", "2_28")   # Ray's wheels' tags (the same for both machines)
DOCKERFILE = """\
ARG BASE
FROM ${BASE}
COPY *.whl /wheels/
RUN python3 -m pip install --no-index --find-links /wheels --break-system-packages \\
      ray==%s && rm -rf /wheels
""" % RAY_VERSION


def ray_wheels(arch: str) -> Path:
    """Ray and its dependencies as cp311 wheels for linux/``arch``, downloaded once."""
    tags = wheel_tags(arch, *GLIBC)
    dest = cache_root() / "ray-wheels" / f"{RAY_VERSION}-{_key(tags)}"
    with image_lock(f"ray-wheels-{arch}"):
        if dest.exists():
            return dest
        partial = dest.with_name(dest.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        platform_args = [arg for tag in tags for arg in ("--platform", tag)]
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:",
             "--python-version", "3.11", *platform_args, "-d", str(partial), f"ray=={RAY_VERSION}"],
            capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"pip download ray=={RAY_VERSION} failed (needs PyPI access): "
                               f"{proc.stderr.strip().splitlines()[-1:]}")
        os.replace(partial, dest)
    return dest


def ray_image(engine: DockerEngine) -> str:
    arch = native_arch()
    base = python_image(engine, arch)
    tag = f"edgevllm-test/ray:{RAY_VERSION}-{_key(base, DOCKERFILE)}"
    record(tag)
    with image_lock(f"ray-image-{arch}"):
        if engine.image_exists(tag):
            return tag
        wheels = ray_wheels(arch)
        dockerfile = cache_root() / f"ray-{_key(DOCKERFILE)}.Dockerfile"
        dockerfile.write_text(DOCKERFILE)
        lines: list[str] = []
        code = engine.build(BuildOptions(context=wheels, dockerfile=dockerfile,
                                         platform=platform_of(arch), tags=[tag],
                                         build_args={"BASE": base}), lines.append)
        if code != 0:
            raise RuntimeError("building the Ray fixture image failed:\n" + "\n".join(lines[-30:]))
    return tag
