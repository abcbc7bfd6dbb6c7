"""The precompiled mode: a Python-only tree installed over a release's compiled kernels.

In order (everything that can fail in seconds happens before any download or container):
1. sources   prepared as for a compile (``builder/modes.start``); the tree's diff against the
             release below it (``sources.pythononly``) goes to ``specs.moderule.choose_mode``.
             With no mode asked, a PR or picks whose combined diff is Python-only selects this
             mode ("Python-only change: reusing the compiled kernels of vllm X; --compile to
             compile"); ``--mode precompiled`` on a tree that changed compiled sources fails
             naming them; ``--compile`` (mode compile) never looks.
2. mods      staged (their pip packages join the closure, as in the prebuilt mode)
3. closure   the release wheel and its closure, resolved and downloaded exactly as the prebuilt
             mode does (``modes/closure.release_closure``), or taken from ``--lock``: the image
             holds the same closure a prebuilt image of that release holds, and shares its
             install layer
4. tools     the tree's ``[build-system] requires`` (``sources/buildreqs.py``), resolved with
             every closure pin as an override (same versions where they overlap), pinned by hash
             and locked as ``build_closure``; installed in the build stage only
5. wheel     the tree built with ``VLLM_USE_PRECOMPILED=1`` and
             ``VLLM_PRECOMPILED_WHEEL_LOCATION`` = the release wheel in the wheelhouse: vLLM's
             setup.py copies the compiled libraries out of it, offline, and compiles nothing
6. runtime   the closure, then the tree's wheel over it (``--no-deps``); checks, labels and tags
             in the shared tail (``builder/tail.py``)

The lock records ``mode: precompiled``, the closure (the release wheel's sha256 among it), the
build tools and ``kernels_from`` (release, tag, commit, wheel file and sha256). Its facts for the
rest of the tool are its record, ``precompiled.yaml`` beside this module.
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

from edgevllm.builder.modes.closure import (
    OVER_CLOSURE,
    base_lock,
    build_tools,
    mode_labels,
    pins_key,
    prepare_wheelhouse,
    print_preflight,
    release_closure,
)
from edgevllm.builder.prepared import Job, PreparedBuild, engine_of, named_contexts
from edgevllm.builder.render import render_dockerfile
from edgevllm.builder.runner import compile_key
from edgevllm.builder.steps import stage_mods
from edgevllm.builder.tree import PreparedTree, TreeOptions, prepare_tree
from edgevllm.common import console
from edgevllm.common.errors import BuildError, SpecError
from edgevllm.containers.docker import DockerEngine
from edgevllm.sources.prepare import PreparedSource
from edgevllm.sources.pythononly import PythonOnlyCheck
from edgevllm.sources.wheels import Closure, ClosureError, WheelPin
from edgevllm.specs.buildspec import EffectiveSpec
from edgevllm.specs.lock import ClosureLock, KernelsFromLock, Lock
from edgevllm.specs.moderecord import mode_record

name = "precompiled"


def release_wheel(closure: Closure, check: PythonOnlyCheck) -> WheelPin:
    """The closure's vLLM wheel, which must be the very release the tree's diff is taken against."""
    pin = closure.pin("vllm")
    if pin is None:
        raise SpecError("the closure holds no vllm wheel; give --vllm-wheel the release "
                        f"{check.release}")
    try:
        same = Version(pin.version) == Version(check.release or "")
    except InvalidVersion:
        same = False
    if not same:
        raise SpecError(f"--vllm-wheel {pin.filename} is vllm {pin.version}, but the tree's "
                        f"Python-only diff is against {check.release_tag}: give that release's "
                        "wheel, or --compile")
    return pin


def precompiled_lock(eff: EffectiveSpec, vllm: PreparedSource, closure: Closure, tools: Closure,
                     check: PythonOnlyCheck, wheel: WheelPin, mod_versions: list[dict],
                     build_args: dict[str, str], engine: DockerEngine) -> Lock:
    """The closure's lock, with the tree, the build tools and the release."""
    if not (check.release and check.release_tag and check.release_commit):
        raise BuildError("precompiled mode needs the release whose kernels are reused; "
                         "none was found for this tree: pass --compile")
    kernels = KernelsFromLock(release=check.release, release_tag=check.release_tag,
                              release_commit=check.release_commit, wheel=wheel.filename,
                              sha256=wheel.sha256, changed=len(check.changed))
    return base_lock(eff, closure, mod_versions, engine, {"vllm_wheel": eff.spec.vllm_wheel},
                     vllm=vllm.to_lock_entry(), build_args=build_args,
                     build_closure=ClosureLock(**tools.to_dict()), kernels_from=kernels)


def prepare(job: Job) -> PreparedBuild:
    eff = job.eff
    print_preflight(eff)
    staged = stage_mods(eff, job.ws, job.locked, job.fetch)
    tree = prepare_tree(eff, job.ws.root, job.locked, TreeOptions(fetch=job.fetch, kernels=False),
                        job.sources)
    if not tree.fetched:
        return _unfetched(job, tree, staged.env)
    if job.check is None:
        raise BuildError("precompiled mode needs the tree's change against its release; "
                         "none was checked: pass --compile")
    closure = _closure(eff, job.locked, staged.pip_packages)
    wheel = release_wheel(closure, job.check)
    console.info(f"  kernels: {wheel.filename} (sha256 {wheel.sha256[:12]}), "
                 f"{len(job.check.changed)} Python file(s) changed against {job.check.release_tag}")
    tools = build_tools(eff, list(tree.layout.pyproject_requires), closure, job.locked)
    folders = {"wheelhouse": prepare_wheelhouse(eff, closure, job.ws, over=OVER_CLOSURE),
               "build-tools": prepare_wheelhouse(eff, tools, job.ws)}
    build_args = {"VLLM_VERSION": tree.vllm.pep440_version, **eff.spec.build_args}
    lock = precompiled_lock(eff, tree.vllm, closure, tools, job.check, wheel, staged.versions,
                            build_args, engine_of(job))
    dockerfile = render_dockerfile(eff, staged.env, tree.layout,
                                   {"release": job.check.release or "", "wheel": wheel.filename})
    key = compile_key(dockerfile, {"vllm": tree.vllm.tree_hash, "closure": pins_key(closure),
                                   "build-tools": pins_key(tools)}, build_args,
                      lock.base_images)
    contexts = named_contexts(job, tree, {n: str(p) for n, p in folders.items()})
    return PreparedBuild(eff=eff, dockerfile=dockerfile, contexts=contexts,
                         stages=mode_record(name).stages, lock=lock, build_args=build_args,
                         compile_key=key, wheelhouse=folders["wheelhouse"],
                         labels=mode_labels(lock), runtime_what="runtime image (prebuilt closure)")


def _closure(eff: EffectiveSpec, locked: Lock | None, mod_packages: list[str]) -> Closure:
    try:
        return release_closure(eff, locked, mod_packages)
    except ClosureError as exc:  # e.g. a fork's release that PyPI does not have
        raise ClosureError(f"{exc}; or --compile to compile the tree's kernels") from None


def _unfetched(job: Job, tree: PreparedTree, env: dict[str, str]) -> PreparedBuild:
    """``inv render``: the same stages and contexts, the release and closures as placeholders."""
    folders = {"wheelhouse": "<the release's locked closure, its wheel among it>",
               "build-tools": "<the tree's [build-system] requires, pinned by sha256>"}
    return PreparedBuild(eff=job.eff, dockerfile=render_dockerfile(job.eff, env, tree.layout),
                         contexts=named_contexts(job, tree, folders),
                         stages=mode_record(name).stages,
                         lock=None, build_args={"VLLM_VERSION": "<from the resolved source>"})

