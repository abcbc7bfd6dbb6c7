"""How long a compile for another platform would take, roughly: what preflight prints before a
``--compile`` of linux/arm64 on an x86_64 builder starts, cross-compiled (the default where a
road goes, ``specs/cross.py``) or under emulation, so the user knows what was asked for."""

from __future__ import annotations

import os

# qemu-user over native for the same work: the install step of vLLM 0.33.0's 200-wheel closure
# took 494 s for linux/arm64 under qemu 10.0 and 96 s for linux/amd64 natively on the same 2-core
# x86_64 host (docs/build-modes.md, "uv or pip inside the image"; `python bench/real_image.py`
# reproduces the arm64 figure). That work is the Python interpreter; nvcc's cicc and ptxas are
# emulated the same way, so read the estimate as a lower bound.
EMULATION_FACTOR = 494 / 96

# One CUDA translation unit of vLLM (CUTLASS templates, one arch), on one native core. Not
# measured here (the real units need the CMake dependencies from GitHub): an assumption, of the
# order `bench/compile_slice.py` shows for the units it builds where GitHub is reachable.
UNIT_CORE_MINUTES = 3.0


# The cross build of one CUDA unit over its native build on the same x86_64 host (x86_64 nvcc
# 13.0 with the aarch64 cross g++ 14 as host compiler against native g++): 1.0-1.2x per CUTLASS
# unit, measured; `python bench/cross_compile.py` reproduces it on real vLLM units.
CROSS_FACTOR = 1.15


def cross_compile_minutes(units: int, cores: int) -> float:
    """Minutes for ``units`` CUDA units cross-compiled on ``cores`` native cores."""
    return units * UNIT_CORE_MINUTES * CROSS_FACTOR / max(cores, 1)


def cross_compile_line(units: int, builder_arch: str, platform: str,
                       cores: int | None = None) -> str:
    """What preflight prints before a cross compile: the estimate, and the other roads."""
    cores = cores or os.cpu_count() or 1
    minutes = cross_compile_minutes(units, cores)
    counted = f"{units} CUDA units (inv plan)" if units else "the kernel plan's units"
    return (f"cross-compiling {platform} on this {builder_arch} builder at native speed: "
            f"{counted} × ~{UNIT_CORE_MINUTES:g} core-min each × {CROSS_FACTOR:g} (cross over "
            f"native, measured) / {cores} cores ≈ {_hours(minutes)}, FlashAttention and the "
            "rest of the build not counted (--toolchain emulated compiles under qemu instead)")


def emulated_compile_minutes(units: int, cores: int) -> float:
    """Minutes for ``units`` CUDA units on ``cores`` emulated cores (parallel, one unit each)."""
    return units * UNIT_CORE_MINUTES * EMULATION_FACTOR / max(cores, 1)


def emulated_compile_line(units: int, builder_arch: str, platform: str,
                          cores: int | None = None, why: str = "") -> str:
    """The warning preflight prints: the estimate and how to avoid it."""
    cores = cores or os.cpu_count() or 1
    minutes = emulated_compile_minutes(units, cores)
    counted = f"{units} CUDA units (inv plan)" if units else "the kernel plan's units"
    because = f" ({why})" if why else ""
    return (f"compiling {platform} under emulation on this {builder_arch} builder{because}: "
            f"{counted} × "
            f"~{UNIT_CORE_MINUTES:g} core-min each × {EMULATION_FACTOR:.1f} (qemu, measured) "
            f"/ {cores} cores ≈ {_hours(minutes)}, FlashAttention and the rest of the build "
            "not counted; it runs because the compile was asked for (without --compile a "
            "release builds prebuilt in minutes); --toolchain cross (the default where a "
            "cross road goes) compiles at native speed, or build on a native builder")


def _hours(minutes: float) -> str:
    return f"{minutes / 60:.1f} h" if minutes >= 90 else f"{minutes:.0f} min"
