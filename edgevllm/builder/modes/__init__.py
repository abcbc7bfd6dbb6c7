"""The build modes, one module each behind ``prepared.Mode``, in one registry.

``start`` is where a build's mode is decided (``specs.buildspec.choose_mode`` holds the rule; a
PR or picks, or ``--mode precompiled``, asks the prepared tree first); ``prepare`` hands the job
to its mode. Adding a mode: a module here with ``name`` and ``prepare(job) -> PreparedBuild``,
its line in ``MODES``, ``dockerfiles/<name>.Dockerfile.j2`` on the shared base, the mode's
name and rule in ``specs/buildspec.py`` (``BuildMode``, ``choose_mode``) and its name in
``specs/lock.py`` (``Lock.mode``).
"""

from __future__ import annotations

from edgevllm.builder.modes import compile as compile_mode
from edgevllm.builder.modes import prebuilt, precompiled
from edgevllm.builder.prepared import Job, Mode, PreparedBuild
from edgevllm.builder.runner import Workspace
from edgevllm.containers.docker import DockerEngine
from edgevllm.specs.buildspec import BuildSpec, resolve, wants_tree_check
from edgevllm.specs.lock import Lock

MODES: dict[str, Mode] = {
    compile_mode.name: compile_mode,
    prebuilt.name: prebuilt,
    precompiled.name: precompiled,
}


def start(spec: BuildSpec, ws: Workspace, engine: DockerEngine | None, locked: Lock | None,
          fetch: bool = True) -> Job:
    """The job with its mode decided: by the spec alone, or (where ``wants_tree_check`` and
    fetching is on) by the prepared tree's change against the release below it."""
    from edgevllm.builder.tree import fetch_sources, requests_for
    from edgevllm.sources.pythononly import python_only_change

    eff = resolve(spec)
    if not wants_tree_check(spec):
        return Job(eff=eff, ws=ws, engine=engine, locked=locked, fetch=fetch)
    if not fetch:  # the tree is not fetched, so its change is not known: say what the build does
        then = ("it must be Python-only" if spec.mode == "precompiled" else
                "a Python-only one builds precompiled")
        reason = f"{eff.mode_reason}; the build first checks the tree's change: {then}"
        return Job(eff=eff.model_copy(update={"mode_reason": reason}), ws=ws, engine=engine,
                   locked=locked, fetch=False)
    sources = fetch_sources(requests_for(eff, locked), ws.root)
    vllm = sources["vllm"]
    check = python_only_change(vllm.repo, vllm.base_sha, vllm.commit)
    return Job(eff=resolve(spec, check), ws=ws, engine=engine, locked=locked, sources=sources,
               check=check)


def prepare(job: Job) -> PreparedBuild:
    return MODES[job.eff.mode].prepare(job)
