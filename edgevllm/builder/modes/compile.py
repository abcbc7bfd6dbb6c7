"""compile: vLLM (and FlashInfer from source, when asked) compiled for the target's arch list,
over the same kind of locked closure the prebuilt and precompiled modes install.

Prepares, in order (seconds, before any download or container; each failure is one line):
1. mods      staged first (cheapest check; their pip packages join the closure)
2. tree      sources, source patches, build layout, kernel plan, CMake deps (``builder/tree.py``)
3. closure   the tree's own runtime requirements for CUDA (``requirements/cuda.txt`` and what it
             includes, read by ``sources/buildreqs.py``) resolved with uv for the target's
             platform and Python, the torch pin, the target/spec/mod pins and ``--override`` as
             overrides (``modes/closure.closure_inputs``: one resolver, ``sources.wheels``);
             or taken from ``--lock``. A closure without torch where the build needs it fails.
4. tools     the tree's build requirements, at the closure's versions, pinned by hash
             (``modes/closure.build_tools``); installed in the build stages only
5. wheels    both downloaded into the shared wheelhouse, checked by hash (``prepare_wheelhouse``)
6. lock      the tree, the closure and the build tools by sha256, the kernel plan, the images;
             the compile key: every input of the ``wheels`` stage, the closure's hashes among
             them, so an unchanged build (``inv build --lock``) reuses ``wheels/<key>/``
Runs ``wheels`` (exported) then ``runtime``: the closure on the target's lean runtime base, the
compiled wheels over it with ``--no-deps`` (``dockerfiles/base.Dockerfile.j2``). Its facts for
the rest of the tool are its record, ``compile.yaml`` beside this module.
"""

from __future__ import annotations

import dataclasses
import re
import time
from typing import TYPE_CHECKING, Callable, Sequence

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from edgevllm.builder.aot.plan import cross_aot
from edgevllm.builder.cross.context import (
    AOT_TOOLS,
    CROSS_CONTEXT,
    check_target_side,
    cross_aot_tools,
    cross_build_tools,
    stage_cross,
)
from edgevllm.builder.distpool import client as dist_client
from edgevllm.builder.modes.closure import (
    base_lock,
    build_tools,
    closure_inputs,
    from_lock,
    mode_labels,
    pins_key,
    prepare_wheelhouse,
    resolved,
)
from edgevllm.builder.prepared import Job, PreparedBuild, engine_of, named_contexts
from edgevllm.builder.render import render_dockerfile, render_toolchain
from edgevllm.builder.runner import compile_key
from edgevllm.builder.steps import stage_mods
from edgevllm.builder.subset.plan import lock_settings as subset_lock_settings
from edgevllm.builder.tree import PreparedTree, TreeOptions, prepare_tree
from edgevllm.common import console
from edgevllm.common.errors import SourceError, SpecError
from edgevllm.common.secrets import url_without_password
from edgevllm.containers.docker import DockerEngine
from edgevllm.sources.buildreqs import BuildLayout, is_torch_family
from edgevllm.sources.wheels import Closure, ClosureError, UnresolvableError
from edgevllm.specs.buildspec import EffectiveSpec
from edgevllm.specs.lock import ClosureLock, Lock, ModLock
from edgevllm.specs.moderecord import mode_record

if TYPE_CHECKING:
    from edgevllm.mods.catalog import StagedMods
    from edgevllm.sources.depfolder import Supplied

name = "compile"
VERSION_PLACEHOLDER = "<from the resolved source>"
UNFETCHED = {"wheelhouse": "<the tree's runtime requirements, resolved for the target: every "
                           "wheel by sha256, torch among them>",
             "build-tools": "<the tree's build requirements, pinned by sha256>"}


def prepare(job: Job) -> PreparedBuild:
    from edgevllm.sources.cmakedeps import preflight_supplied

    # --cmake-dep's folders through their gate first (stat only; a render too): seconds.
    supplied = preflight_supplied(job.eff.spec.cmake_deps, job.locked)
    staged = stage_mods(job.eff, job.ws, job.locked, job.fetch)
    # The CMake deps (clones) come after the closure resolved: a tree whose requirements do not
    # resolve fails before anything is downloaded.
    tree = prepare_tree(job.eff, job.ws.root, job.locked,
                        TreeOptions(fetch=job.fetch, cmake_deps=False), job.sources)
    return prepare_over(job, tree, staged,
                        lambda tree, job: with_cmake_deps(tree, job, supplied))


def with_cmake_deps(tree: PreparedTree, job: Job,
                    supplied: dict[str, Supplied] | None = None) -> PreparedTree:
    """The tree with what its CMake would clone, fetched by commit or taken from the folders the
    user ``supplied`` (``builder/tree.cmake_deps``)."""
    from edgevllm.builder.tree import cmake_deps

    deps_dir = job.ws.root / "deps"
    if not tree.fetched or tree.kernel_plan is None:
        return dataclasses.replace(tree, deps_dir=deps_dir, supplied=tuple(sorted(supplied or {})))
    return dataclasses.replace(tree, deps_dir=deps_dir, cmake_deps=cmake_deps(
        tree.kernel_plan, deps_dir, job.locked, supplied))


def prepare_over(job: Job, tree: PreparedTree, staged: StagedMods,
                 then: Callable[[PreparedTree, Job], PreparedTree] = lambda tree, job: tree
                 ) -> PreparedBuild:
    """Everything after the tree: the closure and the build tools resolved, ``then`` (the CMake
    deps), the downloads, the Dockerfile, lock and key."""
    eff = job.eff
    version = tree.vllm.pep440_version if tree.fetched else VERSION_PLACEHOLDER
    build_args = {"VLLM_VERSION": version, **eff.spec.build_args}
    dockerfile = render_dockerfile(eff, staged.env, tree.layout)  # rendered once per build
    # --dist's block is no input of the wheels: the key hashes the text without it
    key_text = dockerfile if not eff.spec.dist else render_dockerfile(
        dist_client.without_dist(eff), staged.env, tree.layout)
    plan = tree.kernel_plan
    units = sum(e.cuda_sources for e in plan.extensions if e.language == "CUDA") if plan else 0
    cross = stage_cross_context(job)
    partial = stage_subset_context(job)
    if dist_client.wanted(eff):
        dist_client.check_road(eff)
        partial = dataclasses.replace(partial, contexts=partial.contexts | {
            dist_client.CONTEXT: dist_client.stage_context(job.ws.context / dist_client.CONTEXT,
                                                           job.fetch)})
    if not tree.fetched:
        return PreparedBuild(eff=eff, dockerfile=dockerfile, stages=mode_record(name).stages,
                             contexts=named_contexts(job, then(tree, job),
                                                     unfetched(eff) | cross.contexts
                                                     | partial.contexts),
                             lock=None, build_args=build_args, compiles=True,
                             compile_units=units)
    closure = compile_closure(eff, tree.layout, job.locked, staged.pip_packages,
                              tree.flashinfer_project.runtime)
    tools = compile_build_tools(eff, tree.layout, closure, job.locked,
                                tree.flashinfer_project.build)
    aot_tools = compile_aot_tools(eff, closure, tools, job.locked)
    tree = then(tree, job)
    folders = {"wheelhouse": prepare_wheelhouse(eff, closure, job.ws, over=exported(eff)),
               "build-tools": prepare_wheelhouse(eff, tools, job.ws)}
    if aot_tools is not None:
        folders[AOT_TOOLS] = prepare_wheelhouse(eff, aot_tools, job.ws)
    lock = make_lock(eff, tree, staged.versions, build_args, engine_of(job), (closure, tools),
                     aot_tools)
    key = compile_key(key_text, tree.key_inputs() | {"closure": pins_key(closure),
                                                       "build-tools": pins_key(tools)}
                      | cross.key_inputs | partial.key_inputs, build_args, lock.base_images)
    contexts = named_contexts(job, tree, {n: str(p) for n, p in folders.items()}
                              | cross.contexts | partial.contexts)
    return PreparedBuild(eff=eff, dockerfile=dockerfile, contexts=contexts,
                         stages=mode_record(name).stages, lock=lock, build_args=build_args,
                         compile_key=key, labels=mode_labels(lock), compiles=True,
                         compile_units=units,
                         runtime_what="runtime image (closure + compiled wheels)")


@dataclasses.dataclass(frozen=True)
class CrossContext:
    """A context of the compile's own (a cross compile's ``edgevllm-cross``, a partial build's
    ``edgevllm-extensions``) and what of it the compile key counts (both empty without it)."""

    contexts: dict[str, str] = dataclasses.field(default_factory=dict)
    key_inputs: dict[str, str] = dataclasses.field(default_factory=dict)


def stage_cross_context(job: Job) -> CrossContext:
    if job.eff.toolchain != "cross" or job.eff.cross is None:
        return CrossContext()
    folder = job.ws.context / CROSS_CONTEXT
    digest = stage_cross(render_toolchain(job.eff.cross), folder)
    return CrossContext({CROSS_CONTEXT: str(folder)}, {"cross-toolchain": digest})


def stage_subset_context(job: Job) -> CrossContext:
    """A partial kernel build's ``edgevllm-extensions`` context, or a whole one's where the
    target leaves targets out (``builder/subset/plan.py``)."""
    from edgevllm.builder.subset import plan as subset

    left_out = job.eff.target.leave_out
    if not job.eff.spec.extensions and not left_out:
        return CrossContext()
    folder = job.ws.context / subset.CONTEXT
    return CrossContext({subset.CONTEXT: str(folder)},
                        {"extensions-cmake": subset.stage(folder, left_out)})


def compile_build_tools(eff: EffectiveSpec, layout: BuildLayout, closure: Closure,
                        locked: Lock | None, flashinfer: Sequence[str] = ()) -> Closure:
    """The build stages' tools: for the target's platform (native, emulated), or for the
    builder's own on a cross road (the closure then also carries the target's side); with a
    FlashInfer from source, its [build-system] requires too (``flashinfer``). A lock's build
    tools are taken where it was built with the same toolchain."""
    same = locked is not None and locked.settings.get("toolchain", "native") == eff.toolchain
    requires = build_requires(layout, flashinfer)
    if eff.toolchain != "cross":
        return build_tools(eff, requires, closure, locked if same else None)
    check_target_side(eff, closure, layout)
    tools = from_lock(locked, "build_closure") if same else None
    return tools or cross_build_tools(eff, requires, closure, layout)


def compile_aot_tools(eff: EffectiveSpec, closure: Closure, tools: Closure,
                      locked: Lock | None) -> Closure | None:
    """--aot on the cross road (builder/aot/plan.py ``cross_aot``): the build Python's FlashInfer
    (``cross.cross_aot_tools``), from a lock made on the same road where it records them."""
    if not cross_aot(eff):
        return None
    same = locked is not None and locked.settings.get("toolchain", "native") == eff.toolchain
    return (from_lock(locked, "aot_closure") if same else None) or cross_aot_tools(
        eff, closure, tools)


def unfetched(eff: EffectiveSpec) -> dict[str, str]:
    """The placeholders ``inv render`` shows for the folders a build would download."""
    if not cross_aot(eff):
        return UNFETCHED
    return UNFETCHED | {AOT_TOOLS: "<FlashInfer for the build platform (--aot on the cross "
                                   "road), pinned by sha256>"}


def exported(eff: EffectiveSpec) -> tuple[str, ...]:
    """What this build compiles and installs over the closure (the wheels stage's): never in the
    closure's install (the tree's requirements name no vLLM, and a FlashInfer from source
    removes PyPI's from the resolve), so no layer shadows another's files; left out of it here
    too, should a mod's package pull one in."""
    return ("vllm", "flashinfer-python") if eff.spec.flashinfer.source is not None else ("vllm",)


def build_requires(layout: BuildLayout, flashinfer: Sequence[str] = ()) -> list[str]:
    """What the build stage installs: [build-system] requires and the build requirement file,
    and a FlashInfer from source's [build-system] requires (torch's family left out: the
    closure's torch stays)."""
    extra = [r for r in flashinfer if not is_torch_family(r)]
    return list(dict.fromkeys([*layout.pyproject_requires, *layout.build_requirements, *extra]))


def tree_closure_inputs(eff: EffectiveSpec, layout: BuildLayout, mod_packages: list[str],
                        flashinfer: Sequence[tuple[str, str]] = ()) -> dict:
    """The closure's inputs (``closure.closure_inputs``) from the tree's runtime requirements (its
    vLLM is the compiled wheel, so not among them); a FlashInfer from source removes PyPI's and
    brings its own tree's requirements (``flashinfer``: what its pyproject.toml lists)."""
    if not layout.runtime_file:
        raise SourceError("the vLLM tree has no runtime requirement file for CUDA (looked for "
                          "requirements/cuda.txt, requirements-cuda.txt): a compile's closure "
                          "is resolved from it; give a vLLM tree that has one")
    removed = ("flashinfer-python",) if eff.spec.flashinfer.source is not None else ()
    head = [line for line, _ in (*layout.runtime_requirements, *flashinfer)
            if canonicalize_name(Requirement(line).name) not in removed]
    return closure_inputs(eff, list(dict.fromkeys(head)), mod_packages, removed)


def compile_closure(eff: EffectiveSpec, layout: BuildLayout, locked: Lock | None,
                    mod_packages: list[str],
                    flashinfer: Sequence[tuple[str, str]] = ()) -> Closure:
    """The locked closure (from ``--lock``: nothing resolved), or the tree's, resolved."""
    started = time.monotonic()
    closure = from_lock(locked)
    if closure is not None:
        console.step(f"closure: {len(closure.pins)} wheels from the lock (no resolve)")
    else:
        if locked is not None:
            console.info("  the lock records no closure (made before compile locked one): "
                         "resolving the tree's")
        inputs = tree_closure_inputs(eff, layout, mod_packages, flashinfer)
        try:
            closure = resolved(inputs, f"{layout.runtime_file} of the tree "
                                       f"({len(layout.runtime_requirements)} requirements)")
        except UnresolvableError as exc:
            raise ClosureError(unresolvable(exc.reason, layout, inputs)) from None
    check_torch(eff, layout, closure)
    torch = closure.pin("torch")
    console.info(f"  {len(closure.pins)} wheels, {closure.total_bytes() / 1e9:.2f} GB; torch "
                 f"{torch.version if torch else '-'} ({time.monotonic() - started:.1f} s)")
    return closure


def check_torch(eff: EffectiveSpec, layout: BuildLayout, closure: Closure) -> None:
    """vLLM compiles against the closure's torch: where the build needs one, the closure has it."""
    needs = eff.torch.version or layout.builds_against_torch
    if needs and closure.pin("torch") is None:
        pinned = f" {eff.torch.version}" if eff.torch.version else ""
        raise SpecError(f"the closure of {layout.runtime_file or 'the tree'} holds no torch, but "
                        f"the build compiles against torch{pinned}: the tree's runtime "
                        "requirements must name torch (or drop the target's torch pin with "
                        "torch.version: null)")


def unresolvable(reason: str, layout: BuildLayout, inputs: dict) -> str:
    """One line: the tree's requirements that uv's reason names (with the file that lists each:
    what pulled the package in), then uv's reason (which names any package between them)."""
    listed: dict[str, str] = {}
    for line, where in layout.runtime_requirements:
        listed.setdefault(canonicalize_name(Requirement(line).name), f"{line} ({where})")
    named = [canonicalize_name(n) for n in re.findall(r"([A-Za-z][A-Za-z0-9_.-]*)\s*[<>=!~]",
                                                      reason)]
    asked = list(dict.fromkeys(listed[n] for n in named if n in listed))
    return (f"the tree's {layout.runtime_file} does not resolve for {inputs['platform']} / "
            f"Python {inputs['python_version']}: {'; '.join(asked) or 'its requirements'}: "
            f"{reason} (an --override 'SPEC' or --package NAME==VER may help)")


def make_lock(eff: EffectiveSpec, tree: PreparedTree, mod_versions: list[dict],
              build_args: dict[str, str], engine: DockerEngine,
              closures: tuple[Closure, Closure], aot_tools: Closure | None = None) -> Lock:
    """The closure's lock with the tree, its kernel plan and CMake deps, the toolchain, the
    build tools (and --aot's on the cross road): built once here and not changed after."""
    closure, tools = closures
    mods = [ModLock(**m) for m in mod_versions] + tree.patch_locks()
    return base_lock(
        eff, closure, mod_versions, engine,
        {"toolchain": eff.toolchain,
         **subset_lock_settings(eff.spec.extensions, eff.target.leave_out)},
        vllm=tree.lock_entry("vllm"),
        flashinfer=tree.lock_entry("flashinfer"),
        mods=mods,
        build_args=build_args,
        cmake_deps=tree.cmake_deps,
        kernel_plan=tree.plan_summary(),
        build_closure=ClosureLock(**tools.to_dict()),
        aot_closure=ClosureLock(**aot_tools.to_dict()) if aot_tools is not None else None,
        compile_cache=url_without_password(eff.spec.compile_cache)
        if eff.spec.compile_cache else None,
    )
