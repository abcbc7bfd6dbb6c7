"""The prepared tree: everything a build reads from vLLM's (and FlashInfer's) sources, in one
object, from one function that ``inv build``, ``inv render`` and ``inv plan`` all call.

``prepare_tree`` runs, in order (each fails in seconds, before any container starts):
1. sources   resolve refs/PRs/picks to SHAs and export each tree (``sources.prepare``)
2. patches   the target's source patches (``mods.patches``: they run on the mods applier's
             engine, which is why this sits above both stages and not in sources/)
3. layout    what the build stage installs and runs (``sources.buildreqs``)
4. kernels   the kernel plan from the tree's own CMake (``sources.plan``) and every repository
             that CMake would clone, fetched by commit (``sources.cmakedeps``)

With ``fetch`` off (``inv render``) nothing is fetched or read: the same object comes back with
the plan of each source as its placeholder, so the render shows what the build would do.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from edgevllm.common import console
from edgevllm.common.errors import BuildError, ConfigError
from edgevllm.sources.buildreqs import (
    BuildLayout,
    ProjectRequirements,
    read_build_layout,
    read_project,
    unread_layout,
)
from edgevllm.sources.prepare import PreparedSource, prepare_sources, summarize
from edgevllm.sources.requests import SourceRequest, source_request
from edgevllm.specs.buildspec import EffectiveSpec
from edgevllm.specs.lock import CMakeDepLock, Lock, ModLock, SourceLock

if TYPE_CHECKING:
    from edgevllm.sources.depfolder import Supplied
    from edgevllm.sources.plan import KernelPlan

TITLES = {"vllm": "vLLM", "flashinfer": "FlashInfer"}


@dataclass(frozen=True)
class TreeOptions:
    """What to prepare. A compile wants it all; precompiled only the sources and the layout;
    ``inv plan`` the kernel plan unchecked (it prints the table first), without CMake deps."""

    fetch: bool = True          # False: nothing fetched or read; placeholders (inv render)
    kernels: bool = True        # source patches and the kernel plan
    cmake_deps: bool = True     # what the tree's CMake would clone, fetched by commit
    check_plan: bool = True     # a needed kernel group that gets no code fails here
    layout: bool = True         # read the build layout (False: placeholders)
    given: Path | None = None   # inv plan --tree: this folder, copied, instead of fetched sources
    flashinfer: bool = True     # FlashInfer's tree too, where the spec builds it from source


@dataclass(frozen=True)
class PreparedTree:
    requests: dict[str, SourceRequest]
    sources: dict[str, PreparedSource] = field(default_factory=dict)  # empty: nothing fetched
    patches: list[dict] = field(default_factory=list)
    layout: BuildLayout = field(default_factory=unread_layout)
    kernel_plan: KernelPlan | None = None
    cmake_deps: dict[str, CMakeDepLock] = field(default_factory=dict)
    deps_dir: Path | None = None               # the "cmake-deps" context (a compile's only)
    supplied: tuple[str, ...] = ()             # the dependencies --cmake-dep gives folders for
    # FlashInfer from source: what its pyproject.toml lists (sources/buildreqs.py): the closure
    # takes its runtime requirements in place of PyPI's FlashInfer's, the build tools its
    # [build-system] requires.
    flashinfer_project: ProjectRequirements = field(default_factory=ProjectRequirements)

    @property
    def fetched(self) -> bool:
        return bool(self.sources)

    @property
    def vllm(self) -> PreparedSource:
        if "vllm" not in self.sources:
            raise BuildError("the vLLM tree was not prepared (nothing is fetched here)")
        return self.sources["vllm"]

    def context_dirs(self) -> dict[str, str]:
        """The named build contexts this tree provides (placeholders when nothing was fetched)."""
        found = {}
        for name, request in self.requests.items():
            prepared = self.sources.get(name)
            found[f"{name}-src"] = (str(exported_tree(prepared)) if prepared else
                                    f"<prepared {TITLES[name]} tree: {'; '.join(request.plan())}>")
        if self.deps_dir is not None:
            given = f"; {', '.join(self.supplied)} from --cmake-dep" if self.supplied else ""
            found["cmake-deps"] = (str(self.deps_dir) if self.fetched else
                                   f"<what the tree's CMake would clone, fetched by commit{given}>")
        return found

    def lock_entry(self, name: str) -> SourceLock | None:
        return self.sources[name].to_lock_entry() if name in self.sources else None

    def patch_locks(self) -> list[ModLock]:
        return [ModLock(name=f"patch:{p['name']}", version=str(p.get("version", "1")))
                for p in self.patches]

    def plan_summary(self) -> dict:
        return self.kernel_plan.summary() if self.kernel_plan is not None else {}

    def key_inputs(self) -> dict[str, str]:
        """What of the tree a compile key hashes: tree hashes, CMake deps, patch outcomes."""
        return ({n: p.tree_hash for n, p in self.sources.items()}
                | {f"cmake-dep:{n}": d.tree for n, d in self.cmake_deps.items()}
                | {"patches": json.dumps(self.patches, sort_keys=True)})


def requests_for(eff: EffectiveSpec, locked: Lock | None,
                 flashinfer: bool = True) -> dict[str, SourceRequest]:
    """Each source's request: pinned by the lock's entry when rebuilding, else from the spec."""
    out = {}
    for name in ["vllm"] + (["flashinfer"] if flashinfer and eff.spec.flashinfer.source else []):
        entry = locked.sources().get(name) if locked else None
        out[name] = SourceRequest.from_lock_entry(entry) if entry else source_request(eff, name)
    return out


def fetch_sources(requests: dict[str, SourceRequest], root: Path) -> dict[str, PreparedSource]:
    """Step 1: every source tree, resolved and exported under root/src/<name>."""
    prepared = {}
    for name, request in requests.items():
        console.step(f"sources: {'; '.join(request.plan())}")
        prepared[name] = prepare_sources(request, root / "src" / name)
        for line in summarize(prepared[name]):
            console.info(f"  {line}")
    return prepared


def given_tree(given: Path, root: Path) -> dict[str, PreparedSource]:
    """``inv plan --tree``: a copy of the folder (patched like the build; the folder is not)."""
    if not given.is_dir():
        raise ConfigError(f"--tree {given}: no such folder")
    copy = root / "vllm"
    shutil.copytree(given, copy, symlinks=True)
    return {"vllm": PreparedSource(name="vllm", repo=str(given), base_sha="", commit="",
                                   tree_hash="", version="", tree_dir=copy)}


def prepare_tree(eff: EffectiveSpec, root: Path, locked: Lock | None = None,
                 options: TreeOptions = TreeOptions(),
                 sources: dict[str, PreparedSource] | None = None) -> PreparedTree:
    """The one prepared tree (``sources`` when the mode check already fetched them)."""
    requests = requests_for(eff, locked, options.flashinfer)
    deps_dir = root / "deps" if options.kernels and options.cmake_deps else None
    if not options.fetch:
        return PreparedTree(requests=requests, deps_dir=deps_dir)
    if options.given is not None:
        sources = given_tree(options.given, root)
    sources = sources or fetch_sources(requests, root)
    patches = apply_patches(eff, sources["vllm"]) if options.kernels else []
    layout = build_layout(sources["vllm"]) if options.layout else unread_layout()
    plan, deps = None, {}
    if options.kernels:
        plan = kernel_plan(eff, sources["vllm"], options.check_plan)
    if deps_dir is not None and plan is not None:
        from edgevllm.sources.cmakedeps import preflight_supplied

        deps = cmake_deps(plan, deps_dir, locked, preflight_supplied(eff.spec.cmake_deps, locked))
    flashinfer = (flashinfer_project(sources["flashinfer"])
                  if options.layout and "flashinfer" in sources else ProjectRequirements())
    return PreparedTree(requests=requests, sources=sources, patches=patches, layout=layout,
                        kernel_plan=plan, cmake_deps=deps, deps_dir=deps_dir,
                        flashinfer_project=flashinfer)


def exported_tree(prepared: PreparedSource) -> Path:
    """The exported tree of a prepared source (every source the build uses is exported)."""
    if prepared.tree_dir is None:
        raise BuildError(f"{prepared.name}: the source was resolved but not exported")
    return prepared.tree_dir


def apply_patches(eff: EffectiveSpec, prepared: PreparedSource) -> list[dict]:
    from edgevllm.mods.patches import apply_patch, load_patches
    from edgevllm.sources.plan import patches_skipped

    skipped = patches_skipped(eff.target)  # kernel_plan.code: family keeps vLLM's own arches
    tree = exported_tree(prepared)
    outcomes = [
        apply_patch(patch, tree, prepared.version)
        for patch in load_patches()
        if eff.target.name in patch.manifest.targets and patch.name not in skipped
    ]
    for outcome in outcomes:
        console.info(f"  patch {outcome['name']}: {outcome['outcome']} {outcome.get('detail', '')}")
    return outcomes


def build_layout(prepared: PreparedSource) -> BuildLayout:
    """What the build stage installs and runs, read from the tree (a missing file fails here)."""
    layout = read_build_layout(exported_tree(prepared))
    for line in layout.summary():
        console.info(f"  {line}")
    return layout


def flashinfer_project(prepared: PreparedSource) -> ProjectRequirements:
    """What a FlashInfer tree needs, read as data, and a line saying so: its wheel is installed
    over the closure with --no-deps, so its runtime requirements are resolved into the closure."""
    found = read_project(exported_tree(prepared))
    files = sorted({where for _, where in found.runtime})
    console.info(f"  FlashInfer tree: {len(found.runtime)} runtime requirements from "
                 f"{', '.join(files)}, {len(found.build)} build requires" if found.runtime else
                 "  FlashInfer tree: no runtime requirements listed as data (pyproject.toml); "
                 "its wheel is installed without dependencies")
    return found


def kernel_plan(eff: EffectiveSpec, prepared: PreparedSource, check: bool = True) -> KernelPlan:
    """The kernel plan from the tree's own CMake (with ``check``, a needed group that gets no
    code fails here, naming the CMake line)."""
    from edgevllm.sources.plan import check_rust_env, plan_for_target

    plan = plan_for_target(exported_tree(prepared), eff.target,
                           torch_version=eff.torch.version or "",
                           nvcc_threads=eff.nvcc_threads, check=check)
    if eff.spec.extensions:  # a partial kernel build: the plan of what it compiles
        from edgevllm.builder.subset.plan import partial_note, restrict

        whole, plan = plan, restrict(plan, eff.spec.extensions)
        console.warn(partial_note(eff.spec.extensions, whole))
    if not check:
        return plan
    check_rust_env(plan, eff.env)
    none = [g.key for g in plan.groups if g.kind == "none"]
    console.info(
        f"  kernel plan: CUDA_ARCHS {';'.join(plan.cuda_archs)}; {len(plan.groups)} "
        f"groups, none for {eff.target.cuda_arch}: {', '.join(none) or '-'}"
    )
    if eff.target.leave_out:  # what the compile's cmake drops (builder/subset/plan.py)
        from edgevllm.builder.subset.plan import left_out_note

        console.info(f"  {left_out_note(eff.target.leave_out)}")
    return plan


def cmake_deps(plan: KernelPlan, dest: Path, locked: Lock | None,
               supplied: dict[str, Supplied] | None = None) -> dict[str, CMakeDepLock]:
    """Every repository the tree's CMake would clone, fetched on the host by commit into ``dest``
    (the "cmake-deps" build context), or taken from a folder the user ``supplied``
    (``--cmake-dep``: ``sources/cmakedeps.preflight_supplied`` checked it first)."""
    from edgevllm.sources.cmakedeps import fetch_cmake_deps
    from edgevllm.sources.cmakedeps import summarize as deps_summary

    deps = fetch_cmake_deps(plan.deps, dest, locked.cmake_deps if locked else None,
                            supplied=supplied)
    for line in deps_summary(deps):
        console.info(f"  {line}")
    return deps
