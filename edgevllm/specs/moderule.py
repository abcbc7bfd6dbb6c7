"""The mode rule: which build mode a spec builds, why, and what it refuses.

``choose_mode`` is the one rule (``buildspec.resolve`` alone asks it): the least work that gives
what was asked, for the builder that would run it. What a mode accepts is never decided here by
its name but by its record (``specs/moderecord.py``): ``MODE_FIELDS`` says which fact of the
record each spec field needs (``--vllm-wheel`` a mode whose kernels are a release's,
``--extensions`` and FlashInfer from source a mode that compiles), and a field the chosen mode's
record cannot honour is one line, never silently dropped. The only names spelt here are the
default rule's own picks (``COMPILE``, ``PREBUILT``, ``PYTHON_ONLY``): a new mode is named by a
spec, a lock or ``--mode``, and this module changes only for the default rule to pick it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Protocol

from edgevllm.common.errors import SpecError
from edgevllm.containers.host import platform_arch
from edgevllm.specs.cross import compile_toolchain
from edgevllm.specs.moderecord import ModeRecord, mode_record, mode_records
from edgevllm.specs.refs import UPSTREAM_REPOS, normalize_repo
from edgevllm.specs.targets import load_target

# The default rule's picks (what a build with no mode asked becomes).
COMPILE = "compile"          # vLLM compiled from source for the target's arch list
PREBUILT = "prebuilt"        # a released wheel and its locked closure
PYTHON_ONLY = "precompiled"  # a Python-only change over the compiled kernels of its release


class SourceAsked(Protocol):
    """A git source as the rule reads it (``buildspec.SourceSpec``)."""

    @property
    def repo(self) -> str: ...
    @property
    def ref(self) -> str | None: ...
    @property
    def pr(self) -> int | None: ...
    @property
    def cherry_picks(self) -> list[str]: ...
    def describe(self) -> str: ...


class FlashInferAsked(Protocol):
    @property
    def source(self) -> SourceAsked | None: ...


class SpecAsked(Protocol):
    """The spec as far as the rule reads it (``buildspec.BuildSpec``, which imports this module:
    the rule reads the spec's fields, never its class)."""

    @property
    def target(self) -> str: ...
    @property
    def mode(self) -> str | None: ...
    @property
    def mode_from_lock(self) -> bool: ...
    @property
    def vllm_wheel(self) -> str | None: ...
    @property
    def extensions(self) -> list[str] | None: ...
    @property
    def platform(self) -> str | None: ...
    @property
    def toolchain(self) -> str | None: ...
    @property
    def vllm(self) -> SourceAsked: ...
    @property
    def flashinfer(self) -> FlashInferAsked: ...
    @property
    def dist(self) -> str | None: ...


class TreeChange(Protocol):
    """What a prepared tree says about its change against the release below it
    (``sources.pythononly.PythonOnlyCheck``)."""

    @property
    def applies(self) -> bool: ...  # Python-only: the release's compiled kernels still fit

    @property
    def release(self) -> str | None: ...

    def reason(self) -> str: ...


@dataclass(frozen=True)
class Builder:
    """The machine that would run the build, as far as the mode rule needs it (the builder
    layer asks the engine: ``builder.modes.builder_of``)."""

    arch: str                           # the engine's architecture, docker's word: amd64, arm64
    compiled_wheels: str | None = None  # a folder of wheels for this very build's compile key
    source_patches: tuple[str, ...] = ()  # the target's patches of compiled code beyond its
    #                                       compile-only settings (kernel_plan.native_patches)

    def emulates(self, platform: str) -> bool:
        return platform_arch(platform) != self.arch


@dataclass(frozen=True)
class ModeField:
    """A spec field that only some modes honour, and the fact of a mode's record it needs."""

    field: str                                # the spec's field (dotted)
    flags: str                                # the flags that set it
    does: str                                 # what it does
    honoured: Callable[[ModeRecord], bool]    # by a mode with this record

    def given(self, spec: SpecAsked) -> bool:
        value: object = spec
        for part in self.field.split("."):
            value = getattr(value, part)
        return bool(value)

    def modes(self) -> list[str]:
        """The modes whose records honour it."""
        return sorted(name for name, record in mode_records().items() if self.honoured(record))


MODE_FIELDS: tuple[ModeField, ...] = (
    ModeField("vllm_wheel", "--vllm-wheel", "installs a released wheel",
              lambda record: record.kernels_from_release),
    ModeField("extensions", "--extensions", "picks extensions to compile",
              lambda record: record.compiles),
    ModeField("flashinfer.source", "--flashinfer-repo, --flashinfer-ref, --flashinfer-pr, "
              "--flashinfer-cherry-pick", "compiles FlashInfer", lambda record: record.compiles),
    ModeField("dist", "--dist, --dist-token-file", "sends the compile to an sccache-dist pool",
              lambda record: record.compiles),
)


def unhonoured(spec: SpecAsked, record: ModeRecord) -> list[ModeField]:
    """The fields ``spec`` gives that a mode with ``record`` cannot honour."""
    return [field for field in MODE_FIELDS if field.given(spec) and not field.honoured(record)]


def refuse_unhonoured(spec: SpecAsked, mode: str, reason: str) -> None:
    """One line for the first field the mode's record cannot honour (never dropped silently)."""
    for field in unhonoured(spec, mode_record(mode)):
        chosen = "" if spec.mode and not spec.mode_from_lock else f" (chosen: {reason})"
        raise SpecError(f"field '{field.field}' ({field.flags}) {field.does}: it needs mode "
                        f"{' or '.join(field.modes()) or '(none has it)'}, not {mode}{chosen}")


def wants_tree_check(spec: SpecAsked) -> bool:
    """Whether the prepared tree takes part in the mode: a mode asked whose record checks the
    tree (``precompiled``), or none asked, no wheel, a change requested on top of a ref (a PR
    or picks) and nothing the Python-only mode cannot honour (FlashInfer from source compiles)."""
    if spec.mode:
        return mode_record(spec.mode).checks_tree
    change = bool(spec.vllm.pr or spec.vllm.cherry_picks)
    return (change and not spec.vllm_wheel
            and not unhonoured(spec, mode_record(PYTHON_ONLY)))


_RELEASE_REF = re.compile(r"^v?(\d+\.\d+\.\d+(?:\.post\d+)?)\Z")


def release_of(spec: SpecAsked) -> str | None:
    """The vLLM release the spec builds with nothing on top (upstream's repository at a release
    tag, no PR, no picks, no FlashInfer from source), e.g. ``0.33.0``; None otherwise."""
    source = spec.vllm
    if source.pr or source.cherry_picks or spec.flashinfer.source is not None:
        return None
    try:
        upstream = normalize_repo(source.repo) == normalize_repo(UPSTREAM_REPOS["vllm"])
    except SpecError:
        return None
    found = _RELEASE_REF.match(source.ref or "") if upstream else None
    return found[1] if found else None


def choose_mode(spec: SpecAsked, tree: TreeChange | None = None,
                builder: Builder | None = None) -> tuple[str, str]:
    """The build mode and why (preflight prints both): the one rule, the least work that gives
    what was asked. ``tree`` is the prepared tree's change where ``wants_tree_check`` (None
    before the sources are prepared, or when nothing is fetched); ``builder`` the machine that
    would build (None: not known here, e.g. ``inv plan``; then a release compiles). A field the
    chosen mode's record cannot honour is one line."""
    mode, reason = _decide(spec, tree, builder)
    refuse_unhonoured(spec, mode, reason)
    return mode, reason


def _decide(spec: SpecAsked, tree: TreeChange | None,
            builder: Builder | None) -> tuple[str, str]:
    if tree is not None and wants_tree_check(spec):
        return _by_tree(spec, tree)
    if spec.extensions and not spec.mode:
        return COMPILE, (f"--extensions {','.join(spec.extensions)}: a partial kernel build "
                         "compiles those extensions of the tree")
    if spec.mode and spec.mode_from_lock:
        return spec.mode, f"the lock's mode ({spec.mode}): the lock rebuilds the image it made"
    if spec.mode:
        return spec.mode, f"mode {spec.mode} asked for"
    if spec.vllm_wheel:
        return PREBUILT, (f"--vllm-wheel {spec.vllm_wheel}: the released wheel and its locked "
                          "closure; nothing is compiled")
    if builder is None:
        return COMPILE, "vLLM compiled from source for the target's arch list"
    return _default_mode(spec, builder)


def _by_tree(spec: SpecAsked, tree: TreeChange) -> tuple[str, str]:
    """A mode that checks the tree (asked, or the default's Python-only pick): its change must
    leave the release's kernels fitting; else a compile, or one line where that mode was asked."""
    if tree.applies:
        return spec.mode or PYTHON_ONLY, (f"Python-only change: reusing the compiled kernels of "
                                          f"vllm {tree.release}; --compile to compile")
    if spec.mode:
        raise SpecError(f"mode {spec.mode}: {tree.reason()}; build it with --mode {COMPILE}")
    return COMPILE, tree.reason()


def _default_mode(spec: SpecAsked, builder: Builder) -> tuple[str, str]:
    """No mode asked and no wheel given: reuse, compile what must be compiled, else the least."""
    if builder.compiled_wheels:
        return COMPILE, (f"compiled wheels for this compile key are in "
                         f"{builder.compiled_wheels}: the wheels stage is skipped when its "
                         "folder holds wheels, so nothing compiles")
    target = load_target(spec.target)
    platform = spec.platform or target.platform
    release = release_of(spec)
    if spec.flashinfer.source is not None:
        return COMPILE, "FlashInfer from source: compiled for the target's arch list"
    if builder.source_patches:
        return COMPILE, (f"source patch(es) of compiled code {', '.join(builder.source_patches)}"
                         " for this target: compiled")
    if release is None:
        return COMPILE, (f"{spec.vllm.describe()} is not a vLLM release (no released wheel to "
                         "install): compiled for the target's arch list")
    if not builder.emulates(platform):
        return COMPILE, (f"vllm {release} on a native {builder.arch} builder: compiled for the "
                         f"target's arch list ({target.cuda_arch})")
    toolchain, _, _ = compile_toolchain(spec.toolchain, builder.arch, platform,
                                        target.cuda_version, target.name)
    how = (f"cross-compiles {target.cuda_arch} on this {builder.arch} builder"
           if toolchain == "cross" else f"compiles {platform} under emulation")
    return PREBUILT, (f"vllm {release} with nothing on top: the released wheel, stock "
                      f"kernels, the stock-kernel gate; --compile {how} (a native "
                      f"{platform_arch(platform)} builder compiles too)")
