"""``inv render``: the build's own plan, written to a folder for inspection.

It runs the very preparation ``inv build`` runs (``modes.start``, then the mode's ``prepare``)
with fetching off: nothing is fetched, resolved or asked of an engine, and what would be appears
as a placeholder. So the Dockerfile and ``build-plan.json`` are what the build would run: the
mode's stages only, and exactly the named contexts they use. A PR or picks may still turn a
build precompiled once its tree is fetched: the plan's ``mode_reason`` says which mode the spec
alone gives.
"""

from __future__ import annotations

from pathlib import Path

from edgevllm.builder import modes
from edgevllm.builder.prepared import WHEELS_PLACEHOLDER, runtime_contexts
from edgevllm.builder.render import BuildPlan
from edgevllm.builder.runner import Workspace
from edgevllm.common import console
from edgevllm.common.fsutil import output_dir
from edgevllm.specs.buildspec import BuildSpec, EffectiveSpec
from edgevllm.specs.targets import load_target


def render_to(spec: BuildSpec, out: Path, force: bool = False,
              lock_path: Path | None = None) -> Path:
    """Write the plan into ``out``; with ``lock_path`` the sources are the lock's, by SHA."""
    from edgevllm.builder.pipeline import lock_for
    from edgevllm.specs.buildspec import resolve

    # With this machine as the builder (as start() takes it): a toolchain that cannot be is
    # refused here, before the folder is touched. Resolved once: start() takes it as it is.
    builder = modes.builder_of(None, load_target(spec.target))
    eff = resolve(spec, builder=builder)
    locked = lock_for(lock_path, eff.target.name, eff.mode)
    if eff.record.compiles:  # --cmake-dep's folders, before the folder is touched
        from edgevllm.sources.cmakedeps import check_supplied

        check_supplied(eff.spec.cmake_deps, locked)
    with output_dir(out, force, kind="render") as tmp:  # never deletes what edgevllm did not write
        job = modes.start(spec, Workspace(tmp, context_dir=tmp), engine=None, locked=locked,
                          fetch=False, builder=builder, eff=eff)
        build = modes.prepare(job)
        (tmp / "Dockerfile").write_text(build.dockerfile)
        contexts = {name: _relative(value, tmp)
                    for name, value in runtime_contexts(build, WHEELS_PLACEHOLDER).items()}
        plan = BuildPlan(
            target=job.eff.target.name,
            platform=job.eff.platform,
            mode=job.eff.mode,
            mode_reason=job.eff.mode_reason,
            toolchain=(f"{job.eff.toolchain} ({job.eff.toolchain_reason})"
                       if job.eff.record.compiles else ""),
            dockerfile="Dockerfile",
            contexts=contexts,
            build_args=build.build_args,
            stages=list(build.stages),
            on_top=on_top(job.eff),
        )
        (tmp / "build-plan.json").write_text(plan.to_json())
    console.step(mode_line(plan))
    console.info(on_top_line(plan.on_top))
    if eff.spec.dist and eff.record.compiles:
        dist_line(eff, build.compile_units)
    return out / "Dockerfile"


def dist_line(eff: EffectiveSpec, units: int) -> None:
    """--dist: the pool as named, one line. Render contacts no network: the pool is checked
    (reached, token, workers, projection) by the build, before anything is fetched."""
    from edgevllm.builder.distpool import client as dist_client

    url = dist_client.check_road(eff)
    console.step(f"dist: {url} (not contacted by render: inv build checks the pool, its token "
                 f"and workers first, and projects the compile of {units or 'the'} CUDA units "
                 f"on its cores)")


def mode_line(plan: BuildPlan) -> str:
    """The mode and, where it compiles, the toolchain it chose, in the build's preflight words
    (``builder/pipeline.build``): what ``build-plan.json`` holds, said on stderr."""
    toolchain = f"; toolchain: {plan.toolchain}" if plan.toolchain else ""
    return f"mode: {plan.mode} ({plan.mode_reason}){toolchain}"


def on_top(eff: EffectiveSpec) -> dict[str, dict[str, str]]:
    """What the image carries over vLLM's closure: the pinned packages (the target's and the
    spec's, a recipe's needs among them) and the mods, each with its version."""
    from edgevllm.mods.catalog import select_mods

    return {"packages": dict(sorted(eff.packages.items())),
            "mods": {mod.name: mod.lock_version() for mod in select_mods(eff.mods,
                                                                         eff.target.name)}}


def on_top_line(found: dict[str, dict[str, str]]) -> str:
    packages = ", ".join(f"{n}=={v}" for n, v in found["packages"].items()) or "none"
    mods = ", ".join(f"{n} {v}" for n, v in found["mods"].items()) or "none"
    return f"on top of the closure: packages {packages}; mods {mods}"


def _relative(value: str, folder: Path) -> str:
    """A context written into the render folder, named relative to it (the folder is renamed)."""
    prefix = str(folder) + "/"
    return value[len(prefix):] + "/" if value.startswith(prefix) else value
