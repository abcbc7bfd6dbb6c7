"""How long a compile for another platform would take, roughly: what preflight prints before a
``--compile`` of linux/arm64 on an x86_64 builder starts, cross-compiled (the default where a
road goes, ``specs/cross.py``) or under emulation, so the user knows what was asked for."""

from __future__ import annotations

import os

# nvcc under qemu-user over the same compile at native speed: real vLLM 0.33.0 translation units
# (activation_kernels, layernorm_kernels, sm_121a) took 10.7-12.9x the CPU seconds of the cross
# build, which costs what the native one does (docs/build-modes.md "Cross-compiling on x86_64:
# figures"; `python bench/cross_compile.py` reproduces it). Before the cross road was measured,
# this was the closure's install under qemu over natively (494 s / 96 s, 5.1x).
EMULATION_FACTOR = 11.0

# One CUDA translation unit of vLLM's build graph on one native x86_64 core: the whole spark
# compile of vLLM 0.33.0, cross-compiled to the end on a 2-core x86_64 host (`python
# bench/whole_compile.py`; docs/build-modes.md "The whole spark compile"): 254 core-minutes for
# its 190 units, 1.34 each, over CROSS_FACTOR, rounded up. Part of it ran beside other work
# (load 3): an upper bound. FlashAttention 2's 76 units weigh most (about 2.6 each).
UNIT_CORE_MINUTES = 1.3

# CUDA units the tree's build graph compiles per unit the kernel plan lists: vLLM 0.33.0's
# configure generates the Marlin kernels, and FlashAttention 2 and the other external projects
# bring their own (spark: 191 in the graph for the plan's 78, FlashAttention 3 left out; the same
# run). The plan reads the CMake files, running none of the tree's code, so it cannot count them.
GRAPH_FACTOR = 2.45


# The cross build of one CUDA unit over its native build on the same x86_64 host (x86_64 nvcc
# 13.0 with the aarch64 cross g++ 14 as host compiler against native g++ 14): 0.95-1.06x in CPU
# seconds on real vLLM 0.33.0 units (`python bench/cross_compile.py`), 1.0-1.2x wall on two
# CUTLASS units earlier; the same cubins (sha256) all three ways for those units (cross always
# equals the arm64 nvcc's; x86_64's differ where a kernel takes a char: signed there).
CROSS_FACTOR = 1.05


def compile_slots(cores: int, jobs: int | None = None, threads: int = 1) -> int:
    """The cores a compile keeps busy: its ``jobs`` compile jobs (the target's ``max_jobs``, what
    ``MAX_JOBS`` makes the tree's setup.py run), each nvcc on up to ``threads`` cores (``--threads``
    splits a unit by its gencode targets: min(nvcc_threads, the arches), 1 for one arch), never
    more than the builder's ``cores``. None: as many jobs as cores."""
    busy = cores if jobs is None else jobs * max(threads, 1)
    return max(min(cores, busy), 1)


def job_threads(nvcc_threads: int, arch_list: str) -> int:
    """The cores one compile job keeps busy: nvcc ``--threads`` compiles a unit's gencode targets
    side by side, so as many as the arch list has, up to ``nvcc_threads`` (one arch: one)."""
    arches = len(arch_list.replace(";", " ").split())
    return max(min(nvcc_threads, arches), 1)


def _per(slots: int, cores: int) -> str:
    """The divisor as the line says it: the cores, or the jobs where they are fewer."""
    if slots >= cores:
        return f"{slots} cores"
    return f"{slots} cores (the compile jobs that run, max_jobs, on this {cores}-core builder)"


def cross_compile_minutes(units: int, cores: int) -> float:
    """Minutes for the build graph of ``units`` listed CUDA units cross-compiled on ``cores``
    native cores."""
    return units * GRAPH_FACTOR * UNIT_CORE_MINUTES * CROSS_FACTOR / max(cores, 1)


def _counted(units: int) -> str:
    if not units:
        return "the kernel plan's units"
    return (f"{units} CUDA units (inv plan) × {GRAPH_FACTOR:g} (the build graph's, measured) "
            f"≈ {round(units * GRAPH_FACTOR)}")


def cross_compile_line(units: int, builder_arch: str, platform: str,
                       cores: int | None = None, jobs: int | None = None,
                       threads: int = 1) -> str:
    """What preflight prints before a cross compile: the estimate (on the cores its ``jobs``
    keep busy, ``compile_slots``), and the other roads."""
    cores = cores or os.cpu_count() or 1
    slots = compile_slots(cores, jobs, threads)
    minutes = cross_compile_minutes(units, slots)
    return (f"cross-compiling {platform} on this {builder_arch} builder at native speed: "
            f"{_counted(units)} × ~{UNIT_CORE_MINUTES:g} core-min each (measured) × "
            f"{CROSS_FACTOR:g} (cross over native, measured) / {_per(slots, cores)} ≈ "
            f"{_hours(minutes)}, the configure, links and image not counted "
            "(--toolchain emulated compiles under qemu instead)")


def emulated_compile_minutes(units: int, cores: int) -> float:
    """Minutes for the build graph of ``units`` listed CUDA units on ``cores`` emulated cores
    (parallel, one unit each)."""
    return units * GRAPH_FACTOR * UNIT_CORE_MINUTES * EMULATION_FACTOR / max(cores, 1)


def emulated_compile_line(units: int, builder_arch: str, platform: str,
                          cores: int | None = None, why: str = "", jobs: int | None = None,
                          threads: int = 1) -> str:
    """The warning preflight prints: the estimate (on the cores its ``jobs`` keep busy) and how
    to avoid it."""
    cores = cores or os.cpu_count() or 1
    slots = compile_slots(cores, jobs, threads)
    minutes = emulated_compile_minutes(units, slots)
    because = f" ({why})" if why else ""
    return (f"compiling {platform} under emulation on this {builder_arch} builder{because}: "
            f"{_counted(units)} × ~{UNIT_CORE_MINUTES:g} core-min each × "
            f"{EMULATION_FACTOR:.1f} (qemu, measured) / {_per(slots, cores)} ≈ "
            f"{_hours(minutes)}, the "
            "configure, links and image not counted; it runs because the compile was asked "
            "for (without --compile a release builds prebuilt in minutes); --toolchain cross "
            "(the default where a cross road goes) compiles at native speed, or build on a "
            "native builder")


def _hours(minutes: float) -> str:
    return f"{minutes / 60:.1f} h" if minutes >= 90 else f"{minutes:.0f} min"
