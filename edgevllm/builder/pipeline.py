"""One build, top to bottom. ``build()`` is the entry point.

1. preflight  engine, buildx, emulation, disk (seconds)
2. mode       decided once (``modes.start``: the spec, or the prepared tree's change)
3. prepare    the mode's own work (``modes/<mode>.py``): mods, tree or closure, Dockerfile,
              named contexts, the lock; everything that can fail in seconds fails here
4. tail       the same for every mode (``tail.py``): wheels, runtime, mods record, checks,
              labels, final tags, publish cache
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from edgevllm.builder import modes, tail
from edgevllm.builder.aot.plan import aot_road
from edgevllm.builder.basecheck import check_build_bases
from edgevllm.builder.prepared import PreparedBuild
from edgevllm.builder.runner import BuildResult, Workspace, disk_gb, preflight
from edgevllm.builder.steps import check_base_images
from edgevllm.builder.wheelcache import compiled_wheels, may_reuse
from edgevllm.common import console
from edgevllm.common.errors import BuildError
from edgevllm.containers.docker import DockerEngine
from edgevllm.containers.enginehost import check_build_disk
from edgevllm.containers.sshforward import one_connection
from edgevllm.specs.buildspec import (
    Builder,
    BuildSpec,
    EffectiveSpec,
    resolve,
    stock_kernel_note,
)
from edgevllm.specs.lock import Lock, read_lock
from edgevllm.specs.targets import load_target

if TYPE_CHECKING:
    from edgevllm.builder.distpool.client import DistClient


def build(
    spec: BuildSpec, out: Path, engine: DockerEngine | None = None, lock_path: Path | None = None
) -> BuildResult:
    """Build (or rebuild from a lock) one image; returns where everything went. An ``ssh://``
    engine is reached through one ssh connection for the whole build (containers/sshforward.py)."""
    engine = engine or DockerEngine()
    with one_connection(engine):
        return _build(spec, out, engine, lock_path)


def _build(spec: BuildSpec, out: Path, engine: DockerEngine, lock_path: Path | None
           ) -> BuildResult:
    target = load_target(spec.target)
    engine.check_daemon()
    builder = modes.builder_of(engine, target)
    eff = resolve(spec, builder=builder)  # once; again only where the tree or wheels decide
    ws = Workspace(out / target.name)
    reusable = may_reuse(spec, ws)  # a compile that reuses its wheels needs no compile's disk
    preflight(eff, engine, out, compiles=not reusable)
    locked = lock_for(lock_path, target.name, eff.mode)
    if locked is not None:
        check_base_images(eff, engine, f"--lock {lock_path}")
    job = modes.start(spec, ws, engine, locked, builder=builder, eff=eff)
    record = job.eff.record
    console.step(f"mode: {job.eff.mode} ({job.eff.mode_reason})")
    if record.compiles:
        console.step(f"toolchain: {job.eff.toolchain} ({job.eff.toolchain_reason})")
    pool = dist_check(job.eff)  # --dist: the pool probed before anything is fetched
    if spec.aot:
        console.step(f"flashinfer aot: {aot_road(job.eff, builder)}")
    if record.kernels_from_release and not (spec.mode or spec.vllm_wheel):
        console.info(stock_kernel_note(job.eff))  # chosen for the builder: what it costs
    check_build_bases(job.eff, engine, builder.arch, reusable)  # before the closure is fetched
    build = modes.prepare(job)
    reused = compiled_wheels(job, build) is not None  # the output's, or the wheel cache's
    if reusable and not reused and record.compiles:
        # not this key's wheels: it compiles after all, on the engine's disk
        console.info(check_build_disk(engine, out, disk_gb(job.eff)))
    if build.compiles and job.eff.toolchain != "native" and not reused:
        say = console.warn if job.eff.toolchain == "emulated" else console.info
        say(compile_estimate(build, builder, job.eff))
    if pool is not None and not reused:
        console.step(pool.preflight_line(build.compile_units))
    return tail.run(job, build)


def compile_estimate(build: PreparedBuild, builder: Builder, eff: EffectiveSpec) -> str:
    """The compile's rough length on its road (cross or emulated), from the kernel plan's unit
    count."""
    from edgevllm.builder.estimate import cross_compile_line, emulated_compile_line, job_threads

    jobs = eff.max_jobs  # the compile jobs that run, each nvcc on up to this many cores:
    threads = job_threads(eff.nvcc_threads, eff.target.torch_cuda_arch_list)
    if eff.toolchain == "cross":
        return cross_compile_line(build.compile_units, builder.arch, eff.platform, jobs=jobs,
                                  threads=threads)
    return emulated_compile_line(build.compile_units, builder.arch, eff.platform,
                                 why=eff.toolchain_reason, jobs=jobs, threads=threads)


def dist_check(eff: EffectiveSpec) -> DistClient | None:
    """--dist: the pool answers, takes the token and has workers (one line if not)."""
    from edgevllm.builder.distpool import client as dist_client

    return dist_client.check(eff)


def lock_for(lock_path: Path | None, target: str, mode: str | None = None) -> Lock | None:
    """The lock to rebuild from, which must be the target's (and the mode's, where given)."""
    locked = read_lock(lock_path) if lock_path else None
    if locked and locked.target and locked.target != target:
        raise BuildError(
            f"{lock_path}: the lock is for target '{locked.target}', not "
            f"'{target}'; drop --target or use the matching lock"
        )
    if mode is not None:
        modes.check_lock_mode(locked, mode)
    return locked
