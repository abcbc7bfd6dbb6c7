"""The build modes, one module each behind ``prepared.Mode``, in one registry.

``start`` is where a build's mode is decided (``specs.moderule.choose_mode`` holds the rule; a
PR or picks, or ``--mode precompiled``, asks the prepared tree first); ``prepare`` hands the job
to its mode. The modes stand side by side over ``closure.py`` (the closure, wheelhouse, build
tools and the one lock builder they share) and import it, never each other.

Adding a mode (one module, one record, one template, one registry line):
1. ``<name>.py`` here: ``name`` and ``prepare(job) -> PreparedBuild`` (its stages from its record)
2. ``<name>.yaml`` beside it: its record, every fact the rest of the tool asks of a mode
   (kernels, base, where its vLLM comes from, disk, verify gate, stages, contexts, bases;
   the schema with each field's meaning: ``specs/moderecord.py``)
3. ``dockerfiles/<name>.Dockerfile.j2`` on the shared base
4. its line in ``MODES``
A spec, a lock or ``--mode`` may then name it; what it accepts (``--vllm-wheel``,
``--extensions``, FlashInfer from source) follows from its record, and ``--mode``'s help lists it.
Only for the default rule to pick it on its own does ``specs.moderule.choose_mode`` change.
``tests/test_specs_moderecord.py`` builds two such throwaway modes (one compiling, one installing
a release) and checks what they render and refuse.
"""

from __future__ import annotations

import dataclasses

from edgevllm.builder.modes import compile as compile_mode
from edgevllm.builder.modes import prebuilt, precompiled
from edgevllm.builder.prepared import Job, Mode, PreparedBuild
from edgevllm.builder.runner import Workspace
from edgevllm.builder.wheelcache import compiled_wheels, may_reuse
from edgevllm.common import console
from edgevllm.common.errors import EdgeVllmError, SpecError
from edgevllm.containers.docker import DockerEngine
from edgevllm.containers.host import host_arch
from edgevllm.specs.buildspec import Builder, BuildSpec, EffectiveSpec, resolve
from edgevllm.specs.lock import Lock
from edgevllm.specs.moderule import wants_tree_check
from edgevllm.specs.targets import Target, load_target

MODES: dict[str, Mode] = {
    compile_mode.name: compile_mode,
    prebuilt.name: prebuilt,
    precompiled.name: precompiled,
}


def builder_of(engine: DockerEngine | None, target: Target) -> Builder:
    """The facts the mode rule needs about the builder: the engine's own architecture (a render,
    with no engine, assumes this machine's) and the target's source patches of compiled code
    beyond its compile-only settings."""
    from edgevllm.mods.patches import load_patches

    own = set(target.kernel_plan.native_patches)
    patches = tuple(p.name for p in load_patches()
                    if target.name in p.manifest.targets and p.name not in own
                    and any(not e.path.endswith(".py") for e in p.manifest.edits))
    return Builder(arch=engine.server_arch() if engine is not None else host_arch(),
                   source_patches=patches)


def start(spec: BuildSpec, ws: Workspace, engine: DockerEngine | None, locked: Lock | None,
          fetch: bool = True, builder: Builder | None = None,
          eff: EffectiveSpec | None = None) -> Job:
    """The job with its mode decided: by the spec and the builder, or (where
    ``wants_tree_check`` and fetching is on) by the prepared tree's change against the release
    below it; a default prebuilt turns compile where this build's compiled wheels exist.
    ``eff``: the spec as the caller resolved it for ``builder`` (resolved here where None); it
    is resolved again only where the decision changes (the tree's change, compiled wheels)."""
    from edgevllm.builder.tree import fetch_sources, requests_for
    from edgevllm.sources.pythononly import python_only_change

    builder = builder or builder_of(engine, load_target(spec.target))
    eff = eff or resolve(spec, builder=builder)
    if not wants_tree_check(spec):
        job = Job(eff=eff, ws=ws, engine=engine, locked=locked, fetch=fetch)
        return _reuse_compiled(job, spec, builder) if _could_reuse(job, spec) else job
    if not fetch:  # the tree is not fetched, so its change is not known: say what the build does
        then = ("it must be Python-only" if spec.mode else  # a mode that checks the tree
                "a Python-only one builds precompiled")
        reason = f"{eff.mode_reason}; the build first checks the tree's change: {then}"
        return Job(eff=eff.model_copy(update={"mode_reason": reason}), ws=ws, engine=engine,
                   locked=locked, fetch=False)
    sources = fetch_sources(requests_for(eff, locked), ws.root)
    vllm = sources["vllm"]
    check = python_only_change(vllm.repo, vllm.base_sha, vllm.commit)
    return Job(eff=resolve(spec, check, builder), ws=ws, engine=engine, locked=locked,
               sources=sources, check=check)


def check_lock_mode(locked: Lock | None, mode: str) -> None:
    """A lock rebuilds the mode it records (its closure, tree and tools are that mode's)."""
    if locked is not None and locked.mode != mode:
        raise SpecError(f"--lock: the lock is a {locked.mode} build's and this build is {mode}; "
                        f"drop the mode flag (--compile, --mode, --vllm-wheel) to rebuild it as "
                        f"{locked.mode}, or build {mode} without --lock")


def _could_reuse(job: Job, spec: BuildSpec) -> bool:
    """A default prebuilt (no mode, no wheel asked) where some compile's wheels lie in the
    output, or a wheel cache is given: only then is the compile prepared to learn its key."""
    if not job.fetch or job.eff.record.compiles or spec.mode or spec.vllm_wheel:
        return False
    return may_reuse(spec, job.ws)


def _reuse_compiled(job: Job, spec: BuildSpec, builder: Builder) -> Job:
    """Prepare the compile this spec would run (seconds, the trees come from the git cache) and
    keep it where its key's wheels exist; otherwise the prebuilt job as it was."""
    where = spec.wheel_cache or job.ws.root / "wheels"
    console.info(f"compiled wheels in {where}: preparing the compile to see whether they are "
                 "this build's (its compile key)")
    trial = resolve(spec, builder=dataclasses.replace(builder, compiled_wheels="<its key>"))
    try:
        build = compile_mode.prepare(dataclasses.replace(job, eff=trial))
    except EdgeVllmError as exc:  # the prebuilt build needs none of it: it goes on without
        console.info(f"the compile could not be prepared ({exc}): {job.eff.mode}")
        return job
    folder = compiled_wheels(job, build)
    if folder is None:
        console.info(f"no wheels for compile key {build.compile_key}: {job.eff.mode}")
        return job
    eff = resolve(spec, builder=dataclasses.replace(builder, compiled_wheels=str(folder)))
    return dataclasses.replace(job, eff=eff, prepared=dataclasses.replace(build, eff=eff))


def prepare(job: Job) -> PreparedBuild:
    """The job's build: already prepared where the mode rule needed its compile key."""
    if job.eff.spec.cmake_deps and not job.eff.record.compiles:
        console.warn(f"--cmake-dep {', '.join(sorted(job.eff.spec.cmake_deps))}: this build is "
                     f"{job.eff.mode} and compiles nothing, so the folders are not used "
                     "(--compile compiles)")
    return job.prepared or MODES[job.eff.mode].prepare(job)
