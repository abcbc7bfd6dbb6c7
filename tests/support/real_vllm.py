"""What the real-vLLM end-to-end test builds from: a Debian trixie base with Python 3.13.

``trixie_python_image(engine, arch)``: debootstrap'ed trixie (glibc 2.41, Python 3.13) with the
venv module and g++ (FlashInfer's JIT runs nvcc from the closure's nvidia-cuda-nvcc wheel, which
calls the host compiler), imported with ``docker import``. It stands in for the runtime base a
prebuilt image needs (NVIDIA's registry is unreachable here): no CUDA in it, the CUDA libraries
come as wheels. The rootfs tarball is cached under ``$EDGEVLLM_TEST_CACHE``, the image in the
engine under a tag that encodes its inputs.
"""

from __future__ import annotations

from edgevllm.containers.docker import DockerEngine

from .images import debian_image
from .platforms import native_arch

SUITE = "trixie"
PACKAGES = ["python3", "python3-venv", "g++", "ca-certificates"]
PYTHON = "python3.13"


def trixie_python_image(engine: DockerEngine, arch: str | None = None) -> str:
    """Tag of a Debian trixie + Python 3.13 + g++ image for linux/<arch> (default: this host's),
    built once, cached."""
    return debian_image(engine, arch or native_arch(), SUITE, PACKAGES)
