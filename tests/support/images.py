"""Base images for the tests, built locally: no registry is reachable from the test machines.

``python_image(arch)``: a debootstrap'ed Debian rootfs with Python 3, pip, setuptools and g++,
imported with ``docker import``. It stands in for the OS layer of NVIDIA's CUDA base images.
``cuda_image(arch)``: the same plus a CUDA 13.0 toolkit (nvcc, cicc, ptxas, crt headers, cudart)
unpacked from NVIDIA's own PyPI wheels into /usr/local/cuda, like nvidia/cuda:*-devel images.

Both are cached: the rootfs tarball and the wheels under ``$EDGEVLLM_TEST_CACHE``
(default /var/cache/edgevllm-test), the images in the engine under a tag that encodes their inputs,
so a second CI run on the same machine reuses them. Both are built for linux/amd64 and
linux/arm64 on either host: the other platform's under qemu emulation (binfmt; debootstrap's
second stage runs in the foreign rootfs through it), as a Thor / Spark image is built on a
workstation (support/platforms.py says which platform a test takes).
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from edgevllm.containers.docker import BuildOptions, DockerEngine, RunOptions

from .cacheuse import record
from .downloads import file_lock, test_cache_dir
from .platforms import native_arch, wheel_tags

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
PACKAGES = [
    "python3",
    "python3-pip",
    "python3-venv",
    "python3-setuptools",
    "python3-wheel",
    "python3-dev",
    "g++",
    "ca-certificates",
]
CUDA_WHEELS = [
    "nvidia-cuda-nvcc==13.0.88",
    "nvidia-nvvm==13.0.88",
    "nvidia-cuda-crt==13.0.88",
    "nvidia-cuda-runtime==13.0.96",
    "nvidia-cuda-cccl==13.0.85",
]
# The CUDA wheels' glibc tags, the same for both machines (platforms.wheel_tags).
WHEEL_GLIBC = ("2014", "2_17", "2_27")


def cache_root() -> Path:
    return test_cache_dir()


def image_lock(name: str):
    """Serialise expensive preparation between test processes (and parallel sessions)."""
    return file_lock(cache_root() / f".{name}.lock")


def _key(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:10]


def require_program(name: str, install_hint: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"'{name}' is needed by the end-to-end tests: {install_hint}")
    return path


def debootstrap_rootfs(arch: str, suite: str, packages: list[str], tarball: Path) -> None:
    """A minbase Debian ``suite`` rootfs for ``arch`` with ``packages``, as a tarball (written
    under a temporary name, renamed when complete). The one debootstrap of the test images."""
    require_program("debootstrap", "apt-get install debootstrap (bash .ci/install-engine.sh)")
    if os.geteuid() != 0:
        raise RuntimeError("building a test base image needs root (debootstrap)")
    with tempfile.TemporaryDirectory(dir=cache_root(), prefix="rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        subprocess.run(
            [
                "debootstrap",
                f"--arch={arch}",
                "--variant=minbase",
                f"--include={','.join(packages)}",
                suite,
                str(rootfs),
                MIRROR,
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            shutil.rmtree(rootfs / junk, ignore_errors=True)
        partial = tarball.with_name(tarball.name + ".partial")
        subprocess.run(
            ["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(partial), "."], check=True
        )
        os.replace(partial, tarball)


def python_image(engine: DockerEngine, arch: str) -> str:
    """Tag of a Debian + Python 3 + g++ image for linux/<arch>, built once and cached."""
    return debian_image(engine, arch, SUITE, PACKAGES)


def debian_image(engine: DockerEngine, arch: str, suite: str, packages: list[str]) -> str:
    """Tag of a debootstrapped Debian ``suite`` with ``packages`` for linux/<arch>, imported once:
    the rootfs tarball (in the test cache) and the tag both encode suite and packages."""
    key = _key(suite, packages)
    tag = f"edgevllm-test/debian-python:{suite}-{arch}-{key}"
    record(tag)
    with image_lock(f"{suite}-image-{arch}"):
        if engine.image_exists(tag):
            return tag
        tarball = cache_root() / f"rootfs-{suite}-{arch}-{key}.tar"
        if not tarball.exists():
            debootstrap_rootfs(arch, suite, packages, tarball)
        engine.import_rootfs(
            tarball,
            tag,
            platform=f"linux/{arch}",
            changes=[
                'CMD ["/bin/bash"]',
                "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            ],
        )
    return tag


def one_file_image(engine: DockerEngine, folder: Path, tag: str, body: bytes) -> str:
    """``tag``: an image of one file, /hello.txt holding ``body`` (kilobytes, so that publishing
    or streaming it stays quick); its rootfs tarball is written in ``folder``."""
    tarball = folder / "rootfs.tar"
    with tarfile.open(tarball, "w") as tar:
        info = tarfile.TarInfo("hello.txt")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    engine.import_rootfs(tarball, tag, changes=['CMD ["/hello.txt"]'])
    return tag


def in_image(engine: DockerEngine, image: str, script: str, timeout: float = 600) -> str:
    """What ``python3 -c script`` prints in a fresh container of ``image``, without network; a
    failure fails the test with the end of its stderr."""
    proc = engine.run(RunOptions(image=image, remove=True, network="none",
                                 command=["python3", "-c", script]), timeout=timeout)
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    return proc.stdout.decode()


def download_wheels(arch: str, requirements: list[str], python_version: str = "3.11") -> Path:
    """Download binary wheels for linux/<arch> into the cache (once) and return their folder."""
    dest = cache_root() / "wheels" / f"{arch}-{_key(requirements, python_version)}"
    if dest.exists():
        return dest
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    platform_args = [arg for tag in wheel_tags(arch, *WHEEL_GLIBC) for arg in ("--platform", tag)]
    subprocess.run(
        [
            "python3",
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            python_version,
            *platform_args,
            "-d",
            str(partial),
            *requirements,
        ],
        check=True,
    )
    os.replace(partial, dest)
    return dest


# A cross road's build base (specs/crossroads.yaml amd64 -> arm64): Debian trixie, whose
# aarch64 cross g++ is 14 (bookworm's is 12, older than the road's 13); its twin for the target
# runs the image (same Python, 3.13).
CROSS_SUITE = "trixie"
CROSS_PACKAGES = ["python3", "python3-venv", "python3-setuptools", "python3-wheel",
                  "python3-dev", "g++", "g++-aarch64-linux-gnu", "cmake", "make",
                  "ca-certificates"]
CROSS_RUNTIME_PACKAGES = ["python3", "python3-venv", "ca-certificates"]


def cross_cuda_image(engine: DockerEngine) -> str:
    """The cross road's build base for this host: on x86_64, trixie with the aarch64 cross g++
    and the x86_64 CUDA 13.0 compiler (what nvidia/cuda:13.0.x-devel plus g++-aarch64-linux-gnu
    gives); on an arm64 host, which builds linux/arm64 natively, the same without the cross g++."""
    arch = native_arch()
    packages = CROSS_PACKAGES if arch == "amd64" else [
        p for p in CROSS_PACKAGES if p != "g++-aarch64-linux-gnu"]
    return cuda_image(engine, arch, debian_image(engine, arch, CROSS_SUITE, packages))


def cross_ccache_image(engine: DockerEngine) -> str:
    """cross_cuda_image's build base (x86_64 host) with Debian trixie's ccache (4.11: redis
    remote storage), so a real compile on the cross road is cached unit by unit: what a
    compile's --compile-cache and its ccache mount need in the build image."""
    arch = native_arch()
    assert arch == "amd64", "the cross road's ccache base is for an x86_64 builder"
    return cuda_image(engine, arch,
                      debian_image(engine, arch, CROSS_SUITE, CROSS_PACKAGES + ["ccache"]))


def cross_runtime_image(engine: DockerEngine) -> str:
    """The cross road's runtime base for linux/arm64 (under qemu on an x86_64 host)."""
    return debian_image(engine, "arm64", CROSS_SUITE, CROSS_RUNTIME_PACKAGES)


def cuda_image(engine: DockerEngine, arch: str, base: str | None = None) -> str:
    """Tag of ``base`` (default python_image(arch)) plus the CUDA 13.0 compiler toolchain in
    /usr/local/cuda."""
    base = base or python_image(engine, arch)
    tag = f"edgevllm-test/cuda:13.0-{arch}-{_key(base, CUDA_WHEELS)}"
    record(tag)
    with image_lock(f"cuda-image-{arch}-{_key(base)}"):
        if engine.image_exists(tag):
            return tag
        wheels = download_wheels(arch, CUDA_WHEELS)
        dockerfile = Path(__file__).with_name("cuda-base.Dockerfile")
        lines: list[str] = []
        code = engine.build(
            BuildOptions(
                context=wheels,
                dockerfile=dockerfile,
                platform=f"linux/{arch}",
                tags=[tag],
                build_args={"BASE": base},
            ),
            lines.append,
        )
        if code != 0:
            raise RuntimeError(
                "building the CUDA test base image failed:\n" + "\n".join(lines[-30:])
            )
    return tag


CCACHE_DEBS = ["ccache", "libhiredis0.14"]  # ccache with redis remote storage (bookworm)


def ccache_image(engine: DockerEngine, arch: str | None = None) -> str:
    """Tag of cuda_image(arch) (default: this host's) plus Debian bookworm's ccache, from .debs
    the host downloads."""
    arch = arch or native_arch()
    base = cuda_image(engine, arch)
    tag = f"edgevllm-test/cuda-ccache:13.0-{arch}-{_key(base, CCACHE_DEBS)}"
    record(tag)
    with image_lock(f"ccache-image-{arch}"):
        if engine.image_exists(tag):
            return tag
        debs = cache_root() / f"ccache-debs-{arch}"
        if not any(debs.glob("*.deb")):
            debs.mkdir(parents=True, exist_ok=True)
            names = [f"{name}:{arch}/bookworm" for name in CCACHE_DEBS]
            proc = subprocess.run(["apt-get", "download", *names], cwd=debs,
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(
                    f"apt-get download {' '.join(names)} failed "
                    f"({(proc.stderr.strip().splitlines() or ['no output'])[-1]}): the ccache "
                    f"test image takes Debian bookworm's .debs for {arch} from this host's apt, "
                    "which needs a Debian bookworm source for them (a bookworm host has one)")
        lines: list[str] = []
        code = engine.build(
            BuildOptions(context=debs,
                         dockerfile=Path(__file__).with_name("ccache-layer.Dockerfile"),
                         platform=f"linux/{arch}", tags=[tag], build_args={"BASE": base}),
            lines.append)
        if code != 0:
            raise RuntimeError("building the ccache test image failed:\n" + "\n".join(lines[-30:]))
    return tag
