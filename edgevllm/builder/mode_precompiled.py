"""The precompiled mode: a Python-only tree installed over a release's compiled kernels.

In order (everything that can fail in seconds happens before any download or container):
1. sources   prepared as for a compile; ``sources.precompiled`` compares the tree with the release
             below it. With no mode asked, a PR or picks whose combined diff is Python-only
             selects this mode ("Python-only change: reusing the compiled kernels of vllm X;
             --compile to compile"); ``--mode precompiled`` on a tree that changed compiled
             sources fails naming them; ``--compile`` (mode compile) never looks.
2. mods      staged (their pip packages join the closure, as in the prebuilt mode)
3. closure   the release wheel and its closure, resolved and downloaded exactly as the prebuilt
             mode does (``build.modes``), or taken from ``--lock``: the image holds the same
             closure a prebuilt image of that release holds, and shares its install layer
4. tools     the tree's ``[build-system] requires`` (``build.buildreqs``), resolved with every
             closure pin as an override (same versions where they overlap), pinned by hash and
             locked as ``build_closure``; installed in the build stage only
5. wheel     the tree built with ``VLLM_USE_PRECOMPILED=1`` and
             ``VLLM_PRECOMPILED_WHEEL_LOCATION`` = the release wheel in the wheelhouse: vLLM's
             setup.py copies the compiled libraries out of it, offline, and compiles nothing
6. runtime   the closure, then the tree's wheel over it (``--no-deps``); checks, labels and tags
             as in the prebuilt mode (``modes.finish``)

The lock records ``mode: precompiled``, the closure (the release wheel's sha256 among it), the
build tools and ``kernels_from`` (release, tag, commit, wheel file and sha256).
"""

from __future__ import annotations

import hashlib
import json

from packaging.version import InvalidVersion, Version

from edgevllm.builder.buildreqs import BuildLayout
from edgevllm.builder.runner import (
    BuildResult,
    BuildRunner,
    Workspace,
    compile_key,
    export_wheels,
    timestamp,
    with_options,
    write_context,
)
from edgevllm.common import console
from edgevllm.common.errors import BuildError, SpecError
from edgevllm.containers.docker import BuildOptions, DockerEngine
from edgevllm.sources.prepare import PreparedSource
from edgevllm.sources.pythononly import PythonOnlyCheck, mode_for_tree, python_only_change
from edgevllm.sources.wheels import Closure, ClosureError, WheelPin, resolve_closure
from edgevllm.specs.buildspec import EffectiveSpec, resolve
from edgevllm.specs.lock import (
    ClosureLock,
    KernelsFromLock,
    Lock,
    image_tag,
    label_value,
    write_lock,
)


def wants_tree_check(eff: EffectiveSpec) -> bool:
    """Whether the prepared tree decides the mode: none asked and a change requested on top of
    a ref (a PR or picks), or precompiled asked for. FlashInfer from source always compiles."""
    spec = eff.spec
    if eff.mode == "prebuilt" or spec.flashinfer.source is not None:
        return False
    if spec.mode == "precompiled":
        return True
    return spec.mode is None and bool(spec.vllm.pr or spec.vllm.cherry_picks)


def decide(eff: EffectiveSpec, prepared: dict[str, PreparedSource]
           ) -> tuple[EffectiveSpec, PythonOnlyCheck]:
    """The effective spec for the prepared tree: precompiled when its change is Python-only."""
    vllm = prepared["vllm"]
    check = python_only_change(vllm.repo, vllm.base_sha, vllm.commit)
    choice = mode_for_tree(check, force_compile=False, has_change_request=True)
    if choice.mode != "precompiled":
        if eff.spec.mode == "precompiled":
            raise SpecError(f"mode precompiled: {check.reason()}; build it with --mode compile")
        return eff.model_copy(update={"mode_reason": choice.message}), check
    console.step(choice.message)
    spec = eff.spec.model_copy(update={"mode": "precompiled",
                                       "vllm_wheel": eff.spec.vllm_wheel or check.release})
    return resolve(spec).model_copy(update={"mode_reason": choice.message}), check


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


def build_tools(eff: EffectiveSpec, layout: BuildLayout, closure: Closure,
                locked: Lock | None) -> Closure:
    """The tree's build requirements, pinned like the closure (from the lock when rebuilding)."""
    from edgevllm.builder.mode_prebuilt import closure_platform

    if locked is not None and locked.build_closure is not None:
        return Closure.from_dict(locked.build_closure.model_dump())
    platform, version = closure_platform(eff)
    console.step(f"build tools: {', '.join(layout.pyproject_requires)} (the tree's "
                 "[build-system] requires, at the closure's versions)")
    overrides = [f"{p.name}=={p.version}" for p in closure.pins]
    return resolve_closure(list(layout.pyproject_requires), platform=platform,
                           python_version=version, overrides=overrides,
                           indexes=list(closure.indexes))


def precompiled_lock(eff: EffectiveSpec, vllm: PreparedSource, closure: Closure, tools: Closure,
                     check: PythonOnlyCheck, wheel: WheelPin, staged, build_args: dict[str, str],
                     engine: DockerEngine) -> Lock:
    from edgevllm.builder.mode_prebuilt import prebuilt_lock

    lock = prebuilt_lock(eff, closure, staged, engine)
    settings = {**lock.settings, "mode": "precompiled", "vllm_wheel": eff.spec.vllm_wheel}
    if not (check.release and check.release_tag and check.release_commit):
        raise BuildError("precompiled mode needs the release whose kernels are reused; "
                         "none was found for this tree: pass --compile")
    kernels = KernelsFromLock(release=check.release, release_tag=check.release_tag,
                              release_commit=check.release_commit, wheel=wheel.filename,
                              sha256=wheel.sha256, changed=len(check.changed))
    return lock.model_copy(update={
        "mode": "precompiled", "settings": settings, "vllm": vllm.to_lock_entry(),
        "build_args": build_args, "build_closure": ClosureLock(**tools.to_dict()),
        "kernels_from": kernels})


def run_precompiled(eff: EffectiveSpec, ws: Workspace, engine: DockerEngine, locked: Lock | None,
                    prepared: dict[str, PreparedSource], check: PythonOnlyCheck) -> BuildResult:
    from edgevllm.builder import mode_prebuilt as modes
    from edgevllm.builder import steps
    from edgevllm.builder.render import render_dockerfile

    modes.print_preflight(eff)
    vllm = prepared["vllm"]
    staged = steps.stage_mods(eff, ws)
    layout = steps.build_layout(vllm)
    try:
        closure = modes.locked_or_resolved(eff, locked, staged.pip_packages)
    except ClosureError as exc:  # e.g. a fork's release that PyPI does not have
        raise ClosureError(f"{exc}; or --compile to compile the tree's kernels") from None
    wheel = release_wheel(closure, check)
    console.info(f"  kernels: {wheel.filename} (sha256 {wheel.sha256[:12]}), "
                 f"{len(check.changed)} Python file(s) changed against {check.release_tag}")
    tools = build_tools(eff, layout, closure, locked)
    folders = {"wheelhouse": modes.prepare_wheelhouse(eff, closure, ws),
               "build-tools": modes.prepare_wheelhouse(eff, tools, ws)}
    build_args = {"VLLM_VERSION": vllm.pep440_version, **eff.spec.build_args}
    lock = precompiled_lock(eff, vllm, closure, tools, check, wheel, staged, build_args, engine)
    dockerfile = render_dockerfile(eff, staged.env, layout,
                                   {"release": check.release or "", "wheel": wheel.filename})
    key = compile_key(dockerfile, {"vllm": vllm.tree_hash, "closure": _pins_key(closure),
                                   "build-tools": _pins_key(tools)}, build_args)
    final_tags = modes.final_image_tags(eff, image_tag(lock))
    console.step(f"image {final_tags[0]}")
    write_context(ws, dockerfile, {steps.LOCK_FILE_IN_IMAGE: label_value(lock) + "\n"})
    lock_file = write_lock(lock, ws.root / f"{image_tag(lock)}.lock.json")
    runner = BuildRunner(engine, ws.logs / f"build-{timestamp()}.log")
    contexts = {name: str(path) for name, path in folders.items()}
    contexts |= {"vllm-src": str(vllm.tree_dir),
                 "edgevllm-mods": str(ws.context / "edgevllm-mods"),
                 "edgevllm-meta": str(ws.context / "edgevllm-meta")}
    options = BuildOptions(context=ws.context, dockerfile=ws.context / "Dockerfile",
                           platform=eff.platform, build_args=build_args, build_contexts=contexts)
    wheels = ws.wheels(key)
    export_wheels(runner, options, wheels)
    options = with_options(options, build_contexts={**contexts, "wheels": str(wheels)})
    return modes.finish(eff, ws, engine, runner, options, lock, lock_file, final_tags,
                        folders["wheelhouse"])


def _pins_key(closure: Closure) -> str:
    text = json.dumps(sorted(p.sha256 for p in closure.pins))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
