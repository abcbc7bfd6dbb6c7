#!/usr/bin/env python3
"""Byte-compiling a closure's files under emulation against natively: the same files, the same
Python version, ``compileall`` as the closure-bytecode stage runs it.

Why: a cross build (x86_64 host, linux/arm64 image) used to byte-compile the closure inside the
emulated install step; the stage ``closure-bytecode`` now compiles on the build platform. This
measures what that moves, on a closure small enough for any machine: the files of a few pure-
Python wheels (PyPI), unpacked once on the host, then compiled by the target platform's Python
(under qemu) and by the build platform's (natively), each in its own container of the tests'
Debian bookworm image for that platform (Python 3.11) and on its own copy of the files.

    python bench/bytecode.py [--package sympy==1.13.3 ...] [--platform linux/arm64]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]
PACKAGES = ["sympy==1.13.3", "networkx==3.4.2", "transformers==4.46.3"]
COMPILE = ("import compileall, py_compile, sys, time; started = time.perf_counter(); "
           "ok = compileall.compile_dir('/opt/site', quiet=2, workers=0, "
           "invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH); "
           "print(round(time.perf_counter() - started, 2), ok)")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", action="append", default=[])
    parser.add_argument("--platform", default="linux/arm64")
    return parser.parse_args()


def unpack(wheels: Path, site: Path) -> int:
    """Every wheel's files into ``site``; the number of .py files."""
    for wheel in sorted(wheels.glob("*.whl")):
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(site)
    return sum(1 for _ in site.rglob("*.py"))


def compile_in(engine, image: str, platform: str, site: Path) -> tuple[float, int]:
    """(seconds compileall took inside the container, .pyc files written)."""
    proc = engine.run_cli(["run", "--rm", "--platform", platform, "-v", f"{site}:/opt/site",
                           image, "python3", "-c", COMPILE], timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"compileall on {platform}: {proc.stderr.decode(errors='replace')}")
    seconds = float(proc.stdout.decode().split()[0])
    return seconds, sum(1 for _ in site.rglob("*.pyc"))


def main() -> int:
    args = parse_args()
    from edgevllm.containers.docker import DockerEngine
    from edgevllm.containers.host import emulator_version, host_arch, platform_arch
    from support.images import download_wheels, python_image

    engine = DockerEngine()
    target_arch, build_arch = platform_arch(args.platform), host_arch()
    version = emulator_version(args.platform)
    emulator = (f"qemu {version[0]}.{version[1]}" if version else "qemu (version unknown)") \
        if target_arch != build_arch else "native"
    wheels = download_wheels(target_arch, args.package or PACKAGES)
    rows = []
    with tempfile.TemporaryDirectory(prefix="edgevllm-bytecode-") as tmp:
        files = unpack(wheels, Path(tmp) / "site")
        for arch, how in ((target_arch, emulator), (build_arch, "native")):
            site = Path(tmp) / f"site-{arch}"
            shutil.copytree(Path(tmp) / "site", site)
            seconds, pyc = compile_in(engine, python_image(engine, arch), f"linux/{arch}", site)
            shutil.rmtree(site, ignore_errors=True)  # written by root in the container
            rows.append((f"linux/{arch}", how, pyc, seconds))
    print(f"{files} .py files of {', '.join(args.package or PACKAGES)}; Python 3.11, "
          "compileall unchecked-hash, all cores")
    print(f"{'platform':14} {'how':12} {'.pyc':>6} {'seconds':>8}")
    for platform, how, pyc, seconds in rows:
        print(f"{platform:14} {how:12} {pyc:6d} {seconds:8.2f}")
    print(f"emulated / native: {rows[0][3] / rows[1][3]:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
