"""The platforms the tests build and run, relative to the host the suite runs on.

The suite runs on an x86_64 host (a workstation, CI) and on an arm64 one (a DGX Spark, a Jetson
AGX Thor). What a test means decides which platform it takes:
- **native**: the host's own platform, no emulation. The bases most tests run containers in, the
  fast fixture builds, wheels installed or run on the host itself (cuobjdump, a client venv), and
  images whose containers run this host's binaries (the cluster nodes' dockerd).
- **foreign**: the other one, built and run under qemu through binfmt_misc, as a Thor or Spark
  image is built on a workstation: qemu-aarch64 on an x86_64 host, qemu-x86_64 on an arm64 one
  (``.ci/install-engine.sh`` registers it; ``.ci/test-needs.sh`` checks it before ``make test``).
- a test that needs one platform whatever the host (a Spark recipe's aarch64-only wheel) names it
  and calls ``require_runnable``, which is a no-op natively and checks emulation otherwise.

The host's architecture is ``edgevllm.containers.host.host_arch`` (the one owner of `uname -m` →
Docker architecture) and the machine name of a platform is ``edgevllm.sources.wheels``'s (the owner
of ``linux/arm64`` → ``aarch64``): a test fakes the host by monkeypatching ``host.host_arch``.
Everything here is a function, read when called, never at import.
"""

from __future__ import annotations

from edgevllm.containers import host

ARCHES = ("amd64", "arm64")


class UnsupportedHost(AssertionError):
    """The host is neither x86_64 nor arm64: the suite's images exist for those two only."""


def native_arch() -> str:
    """``amd64`` or ``arm64``: this host's Docker architecture."""
    arch = host.host_arch()
    if arch not in ARCHES:
        raise UnsupportedHost(f"this host is '{arch}': the test suite builds linux/amd64 and "
                              "linux/arm64 images and runs on x86_64 or arm64 hosts only")
    return arch


def foreign_arch() -> str:
    """The other of ``amd64`` / ``arm64``: what this host runs under qemu."""
    native = native_arch()
    return next(arch for arch in ARCHES if arch != native)


def platform_of(arch: str) -> str:
    return f"linux/{arch}"


def native_platform() -> str:
    return platform_of(native_arch())


def foreign_platform() -> str:
    return platform_of(foreign_arch())


def how_built(platform: str) -> str:
    """``native`` or ``emulated``: how this host builds and runs ``platform`` (the words
    ``inv doctor`` and the engine's preflight line use)."""
    return "native" if host.platform_arch(platform) == native_arch() else "emulated"


def machine(arch: str) -> str:
    """``amd64`` → ``x86_64``, ``arm64`` → ``aarch64``: `uname -m` in a container of ``arch``, the
    machine of its wheel tags and of Debian's multiarch folders."""
    from edgevllm.sources.wheels import python_platform

    return python_platform(platform_of(arch)).split("-", 1)[0]


def python_platform(arch: str) -> str:
    """uv's ``--python-platform`` for ``arch`` as a lock records it (``x86_64-manylinux_2_34``)."""
    from edgevllm.sources import wheels

    return wheels.python_platform(platform_of(arch))


def wheel_tags(arch: str, *glibc: str) -> list[str]:
    """pip ``--platform`` tags for ``arch``: ``wheel_tags("arm64", "2_17", "2_28")`` →
    ``["manylinux_2_17_aarch64", "manylinux_2_28_aarch64"]``; ``"2014"`` gives
    ``manylinux2014_<machine>``. PyPI publishes the wheels the tests use with the same glibc tag
    for both machines."""
    name = machine(arch)
    return [f"manylinux2014_{name}" if tag == "2014" else f"manylinux_{tag}_{name}"
            for tag in glibc]


def native_wheel_tags(*glibc: str) -> list[str]:
    """``wheel_tags`` for this host: wheels that are installed or run here."""
    return wheel_tags(native_arch(), *glibc)


def multiarch_libdir(arch: str) -> str:
    """Debian's library folder for ``arch``: ``/usr/lib/x86_64-linux-gnu``."""
    return f"/usr/lib/{machine(arch)}-linux-gnu"


def require_runnable(arch: str) -> None:
    """Fails the test, naming what to install, when this host cannot run linux/``arch``
    containers: nothing to check natively, a binfmt_misc handler (qemu) otherwise."""
    import pytest

    from edgevllm.common.errors import BinfmtMissingError

    try:
        host.check_emulation(platform_of(arch))
    except BinfmtMissingError as exc:
        pytest.fail(f"the linux/{arch} test images: {exc}")
