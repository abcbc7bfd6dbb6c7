"""The seam between a build's modes and its shared tail.

A mode (``builder/modes/<name>.py``) gets a ``Job`` (the decided spec, the workspace, the engine,
the lock to rebuild from, the sources the mode check already fetched) and returns one
``PreparedBuild``: its Dockerfile, its named build contexts, its lock, the build targets it runs.
``builder/tail.py`` runs everything after that, the same way for every mode; ``inv render`` runs
the same preparation with ``fetch`` off and writes the object out instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from edgevllm.builder.runner import Workspace
from edgevllm.common.errors import BuildError
from edgevllm.containers.docker import DockerEngine
from edgevllm.specs.buildspec import EffectiveSpec
from edgevllm.specs.lock import Lock

if TYPE_CHECKING:
    from edgevllm.builder.tree import PreparedTree
    from edgevllm.sources.prepare import PreparedSource
    from edgevllm.sources.pythononly import PythonOnlyCheck

META_PLACEHOLDER = "<lock.json, written at build time>"
WHEELS_PLACEHOLDER = "<exported wheels folder, runtime build only>"


@dataclass(frozen=True)
class Job:
    """What a mode prepares from. ``fetch`` off: nothing is fetched, resolved or asked of an
    engine (``inv render``); what would be is a visible placeholder."""

    eff: EffectiveSpec
    ws: Workspace
    engine: DockerEngine | None
    locked: Lock | None = None
    sources: dict[str, PreparedSource] | None = None  # fetched by the mode check, reused
    check: PythonOnlyCheck | None = None              # the tree's change, where it was checked
    fetch: bool = True
    prepared: PreparedBuild | None = None  # prepared by the mode rule (its compile key)


@dataclass(frozen=True)
class PreparedBuild:
    """Everything one mode decided; the tail runs it. ``lock`` is None only with fetch off."""

    eff: EffectiveSpec
    dockerfile: str
    contexts: dict[str, str]      # named build contexts every target gets (``wheels``: see below)
    stages: tuple[str, ...]       # the build targets, in order ("wheels" exports, then "runtime")
    lock: Lock | None
    build_args: dict[str, str] = field(default_factory=dict)
    compile_key: str | None = None  # keys the exported wheels (modes with a "wheels" stage)
    wheelhouse: Path | None = None  # the closure folder (closure modes): the result's wheels_dir
    labels: dict[str, str] = field(default_factory=dict)  # the mode's own, added after checks
    compiles: bool = False          # whether exporting the wheels compiles vLLM's kernels
    compile_units: int = 0          # the kernel plan's CUDA units (the estimate under emulation)
    runtime_what: str = "runtime image"


def engine_of(job: Job) -> DockerEngine:
    """The engine a fetching job asks (base image digests); a render has none."""
    if job.engine is None:
        raise BuildError("this job has no engine: it can be rendered, not built")
    return job.engine


class Mode(Protocol):
    """One build mode: a module with a ``name`` and a ``prepare`` (see builder/modes/)."""

    name: str

    def prepare(self, job: Job) -> PreparedBuild: ...


def named_contexts(job: Job, tree: PreparedTree | None = None,
                   folders: dict[str, str] | None = None) -> dict[str, str]:
    """The named build contexts of one build, assembled here only: the tree's (vllm-src,
    flashinfer-src, cmake-deps), the mode's folders (wheelhouse, build-tools), the staged mods
    (when any are selected), the FlashInfer AOT step's plan (--aot) and the meta folder (the
    lock)."""
    eff, ws = job.eff, job.ws
    contexts = tree.context_dirs() if tree is not None else {}
    contexts |= folders or {}
    if eff.mods:
        contexts["edgevllm-mods"] = str(ws.context / "edgevllm-mods")
    if eff.spec.aot:  # staged here, the one place every mode (and inv render) passes
        from edgevllm.builder.aot.plan import AOT_CONTEXT, stage_aot

        stage_aot(eff.spec.aot, ws.context / AOT_CONTEXT)
        contexts[AOT_CONTEXT] = str(ws.context / AOT_CONTEXT)
    contexts["edgevllm-meta"] = str(ws.context / "edgevllm-meta") if job.fetch else META_PLACEHOLDER
    return contexts


def runtime_contexts(build: PreparedBuild, wheels: str) -> dict[str, str]:
    """The runtime target's contexts: the build's, and the exported wheels in place of the
    ``wheels`` stage where the mode exports one (so no wheel lands in a layer)."""
    return build.contexts | ({"wheels": wheels} if "wheels" in build.stages else {})
