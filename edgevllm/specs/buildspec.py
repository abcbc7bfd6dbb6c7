"""The build spec: one typed, validated object describing what to build.

It comes from CLI flags, a YAML spec file (flags override the file), or a lock. ``resolve()``
merges it with its target's defaults into the ``EffectiveSpec`` the renderer and driver use.
"""

from __future__ import annotations

import errno
import stat
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, AliasChoices, Field, field_validator

from edgevllm.common.errors import SpecError
from edgevllm.common.grammar import (
    AptPackage,
    CompileCacheUrl,
    EnvName,
    HostPath,
    ImageRef,
    ImageRepo,
    ImageTagOrRef,
    Line,
    ModName,
    Name,
    PackageName,
    PackagePin,
    PlainName,
    Platform,
    PythonCommand,
    PythonModule,
    Requirement,
    Version,
)
from edgevllm.common.schema import Strict, parse_model
from edgevllm.common.secrets import check_no_secrets
from edgevllm.specs.cross import CrossRoad, Toolchain, compile_toolchain
from edgevllm.specs.moderecord import ModeRecord, check_mode, mode_record
from edgevllm.specs.moderule import Builder, TreeChange, choose_mode, release_of
from edgevllm.specs.modselect import select_mod_names
from edgevllm.specs.refs import UPSTREAM_REPOS
from edgevllm.specs.targets import BaseImages, Target, TorchSource, load_target

# A recent vLLM release that builds for both targets with CUDA 13.0 (pins torch 2.14.0,
# flashinfer 0.7.2.post1, cutlass-dsl 4.8.0). Spark needs the keep-12.1a CMake patch with it.
DEFAULT_VLLM_REF = "v0.33.0"
DEFAULT_IMAGE_REPO = "edgevllm/vllm"


class SourceSpec(Strict):
    """A git source: a repo (URL, ``owner/name`` or local path) at a ref, a PR head, plus picks."""

    repo: Line = UPSTREAM_REPOS["vllm"]
    ref: Line | None = None
    pr: int | None = Field(default=None, ge=1, le=10**9)
    cherry_picks: list[Line] = Field(default_factory=list)
    allow_doc_conflicts: bool = False

    def describe(self) -> str:
        where = f"PR #{self.pr}" if self.pr else (self.ref or "default branch")
        picks = f" + {len(self.cherry_picks)} pick(s)" if self.cherry_picks else ""
        return f"{self.repo} @ {where}{picks}"


class FlashInferSpec(Strict):
    """FlashInfer from PyPI (``version``; default: the target's pin) or built from ``source``."""

    version: Version | None = None
    source: SourceSpec | None = None


# A build mode: a name with a record (builder/modes/<name>.yaml, specs/moderecord.py).
BuildMode = Annotated[Name, AfterValidator(check_mode)]


class BuildSpec(Strict):
    target: Name
    # compile: vLLM from source for the target's arches; prebuilt: a released wheel and its locked
    # closure, nothing compiled; precompiled: a Python-only tree over a release's kernels.
    # None: chosen from the other fields (choose_mode says which and why).
    mode: BuildMode | None = None
    # True where ``mode`` is the lock's (``lock_overrides``) rather than asked for (a flag, a spec
    # file): a lock's compile is not a user's --compile, so a refused wheel-cache artifact stops
    # its rebuild as it stops any other build (builder/wheelcache.py).
    mode_from_lock: bool = False
    vllm_wheel: Line | None = None  # prebuilt: a version, a local .whl or a URL
    overrides: list[Requirement] = Field(default_factory=list)  # resolver overrides (uv)
    base_image: ImageRef | None = None  # replaces the target's base image(s)
    # The runtime base for the build platform, where a closure's byte-code is compiled (default:
    # the runtime base's own reference, which a registry serves for every platform); a local
    # single-platform image needs its build-platform twin with the same Python here.
    bytecode_image: ImageRef | None = None
    vllm: SourceSpec = Field(default_factory=lambda: SourceSpec(ref=DEFAULT_VLLM_REF))
    flashinfer: FlashInferSpec = Field(default_factory=FlashInferSpec)
    # Pins over the target's; a null value drops the target's pin of that package.
    packages: dict[PackageName, PackagePin | None] = Field(default_factory=dict)
    mods: list[ModName] | None = None
    add_mods: list[ModName] = Field(default_factory=list)
    remove_mods: list[ModName] = Field(default_factory=list)
    max_jobs: int | None = Field(default=None, ge=1, le=1024)
    nvcc_threads: int | None = Field(default=None, ge=1, le=1024)
    image_repo: ImageRepo = DEFAULT_IMAGE_REPO
    tags: list[ImageTagOrRef] = Field(default_factory=list)
    build_args: dict[EnvName, Line] = Field(default_factory=dict)
    env: dict[EnvName, Line] = Field(default_factory=dict)
    images: BaseImages | None = None
    torch: TorchSource | None = None
    apt_packages: list[AptPackage] | None = None
    # The runtime stage's packages where its base is not the build's (a compile: the target's
    # lean runtime base; default: the target's prebuilt.apt_packages, or apt_packages if given).
    runtime_apt_packages: list[AptPackage] | None = None
    python: PythonCommand | None = None
    platform: Platform | None = None
    # How a compile for another platform than the builder's runs: cross (the builder's own CUDA
    # compiler and a cross g++, specs/cross.py; the default where a road exists) or emulated
    # (the target's compiler under qemu). None: cross where a road goes, else emulated.
    toolchain: Literal["cross", "emulated"] | None = None
    # A partial kernel build: only these CMake extensions of the tree (the kernel plan's names)
    # are compiled; the image cannot serve (builder/subset/plan.py). None: every one.
    extensions: list[PythonModule] | None = Field(default=None, min_length=1)  # []: names none
    verify: bool = True
    # BuildKit cache-mount id of the local compiler cache (default ccache-<target>); a new name
    # starts from an empty cache, e.g. to measure a truly cold compile.
    compile_cache_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]+$")
    # A shared ccache remote storage (redis://, http://) behind the local cache, for every
    # builder. Passed as a BuildKit secret: it never changes the Dockerfile, the compile key
    # or the image; the lock records it with its password redacted.
    compile_cache: CompileCacheUrl | None = None
    # --dist sccache://HOST:PORT: the compile step's C, C++ and CUDA compiles go through sccache
    # to an sccache-dist pool (builder/distpool; its client token from ``dist_token_file``, a
    # BuildKit secret). Like the compile cache it changes no compile key, lock or image; the
    # Dockerfile gains its block only when it is set (docs/dist.md).
    dist: Line | None = None
    dist_token_file: HostPath | None = None
    # A registry repository (HOST[:PORT]/REPOSITORY) of compiled wheels by compile key
    # (image/wheelcache.py): a build of a key it holds compiles nothing, a compile publishes.
    # Like the compile cache it changes no Dockerfile, compile key, lock or image.
    wheel_cache: Line | None = None
    # Every build step runs again instead of coming from BuildKit's cached layers: what a
    # builder that never built this does (the compiler caches still apply).
    rerun_steps: bool = False
    # inv build --reproducible: the times the build wrote set to the lock's created_at after
    # BuildKit (image/clamp.py), so two builds of one lock give the same image. Changes no
    # Dockerfile and no build argument of the BuildKit build (its layer cache serves it).
    reproducible: bool = False
    probe_required: list[PythonModule] | None = None
    # After the checks pass, compress the image's layers into the publish layer cache, so the
    # first `inv publish` assembles cached frames (no docker save). Does not change the image.
    publish_cache: bool = False
    # inv build --aot: a model's config.json; FlashInfer's modules vLLM asks for that model are
    # built into the image (builder/aot/plan.py, docs/first-start.md). ``warm:``, its name before,
    # is still read.
    aot: HostPath | None = Field(default=None, validation_alias=AliasChoices("aot", "warm"))
    # --cmake-dep NAME=FOLDER: a folder in place of what the tree's CMake clones as NAME, never
    # fetched (sources/depfolder.py's gate; proven against --lock's tree hash where given).
    cmake_deps: dict[PlainName, HostPath] = Field(default_factory=dict)

    @field_validator("cmake_deps")
    @classmethod
    def _folders(cls, value: dict[str, str]) -> dict[str, str]:
        # Every render and build, whatever the mode: a FOLDER that is none (/dev/null, a file,
        # nothing) is refused here; sources/depfolder.py walks it where a compile takes it.
        for name, folder in value.items():
            try:
                found = Path(folder).expanduser().stat()
            except OSError as exc:
                what = ("no such folder" if exc.errno == errno.ENOENT
                        else f"cannot be read ({exc.strerror})")
                raise ValueError(f"--cmake-dep {name}={folder}: {what}; give the folder that "
                                 f"holds {name}'s files") from None
            if not stat.S_ISDIR(found.st_mode):
                raise ValueError(f"--cmake-dep {name}={folder}: not a folder; give the folder "
                                 f"that holds {name}'s files")
        return value

    @field_validator("env", "build_args")
    @classmethod
    def _no_secrets(cls, value: dict[str, str]) -> dict[str, str]:
        # Env values become image ENV, build args reach the log and the lock label: a token in
        # either would ship with the image, whatever its key is called (common/secrets).
        check_no_secrets(value, "an image must not hold it")
        return value

    @field_validator("image_repo")
    @classmethod
    def _repo(cls, value: str) -> str:
        if not value or value != value.lower() or " " in value:
            raise ValueError("must be a lower-case image repository such as edgevllm/vllm")
        return value


class EffectiveSpec(Strict):
    """A spec with every default filled in from its target: what the renderer sees."""

    spec: BuildSpec
    target: Target
    platform: Platform
    images: BaseImages
    torch: TorchSource
    apt_packages: list[AptPackage]
    python: PythonCommand
    packages: dict[PackageName, Version]
    runtime_apt_packages: list[AptPackage] = Field(default_factory=list)
    mods: list[ModName]
    max_jobs: int
    nvcc_threads: int
    env: dict[EnvName, Line]
    mode: BuildMode
    mode_reason: str = ""
    # A compile's toolchain on this builder (specs/cross.compile_toolchain): native, cross (the
    # build stages on the builder's platform, with ``cross`` its road) or emulated.
    toolchain: Toolchain = "native"
    toolchain_reason: str = ""
    cross: CrossRoad | None = None

    @property
    def record(self) -> ModeRecord:
        """The mode's record: what the mode is and does (``eff.record.compiles``), asked by
        attribute, never by comparing the mode's name."""
        return mode_record(self.mode)

    @property
    def bytecode_image(self) -> str:
        """The build platform's base where the closure's byte-code compiles (dockerfiles/
        _install.j2): the spec's twin, else the runtime base's own reference (a registry serves
        it for every platform)."""
        return self.spec.bytecode_image or self.images.runtime


def decided_spec(spec: BuildSpec, mode: str, tree: TreeChange | None) -> BuildSpec:
    """The spec as decided: a Python-only tree builds its mode (one that checks the tree) over
    its release's wheel."""
    if mode_record(mode).checks_tree and tree is not None:
        return spec.model_copy(update={"mode": mode,
                                       "vllm_wheel": spec.vllm_wheel or tree.release})
    return spec


def stock_kernel_note(eff: EffectiveSpec) -> str:
    """What a prebuilt device loses against the target's own compile (preflight prints it)."""
    arch = eff.target.cuda_arch
    return (f"against a {arch} compile the device runs the stock wheel's kernels (upstream's "
            f"arch list, no {arch}-native code; PTX-only units JIT-compile at first start); "
            "`inv verify --target "
            f"{eff.target.name} --path <the vllm wheel>` lists the units that are not native")


def prebuilt_wheel(spec: BuildSpec) -> str:
    """The wheel a prebuilt build installs: --vllm-wheel, else the spec's release (its ref), else
    the pinned release's version."""
    return spec.vllm_wheel or release_of(spec) or DEFAULT_VLLM_REF.lstrip("v")


def base_images(spec: BuildSpec, target: Target, mode: str) -> BaseImages:
    """--base-image / spec.images / the target's images for this mode's base, in that order."""
    if spec.base_image:
        return BaseImages(build=spec.base_image, runtime=spec.base_image)
    if spec.images:
        return spec.images
    if mode_record(mode).base == "prebuilt-image":
        return BaseImages(build=target.prebuilt.image, runtime=target.prebuilt.image)
    return target.images  # devel-image: the devel image builds, the lean runtime base runs


def load_spec_file(path: Path, overrides: dict | None = None) -> BuildSpec:
    """A YAML spec file, with CLI values in ``overrides`` taking precedence."""
    from edgevllm.common.schema import read_yaml

    data = read_yaml(path, SpecError)
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a mapping of spec fields")
    merged = _deep_merge(data, overrides or {})
    return parse_model(BuildSpec, merged, str(path), SpecError)


def spec_from_dict(data: dict, source: str = "command line") -> BuildSpec:
    return parse_model(BuildSpec, data, source, SpecError)


def _deep_merge(base: dict, top: dict) -> dict:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def resolve(spec: BuildSpec, tree: TreeChange | None = None,
            builder: Builder | None = None) -> EffectiveSpec:
    """Every default filled in from the target, for the mode ``choose_mode`` picks (a tree that
    turns out Python-only becomes precompiled over the release below it)."""
    mode, reason = choose_mode(spec, tree, builder)
    spec = decided_spec(spec, mode, tree)
    record = mode_record(mode)
    target = load_target(spec.target)
    packages = dict(target.packages)
    if spec.flashinfer.version:
        packages["flashinfer-python"] = spec.flashinfer.version
    if spec.flashinfer.source:
        packages.pop("flashinfer-python", None)
    for name, version in spec.packages.items():
        if version is None:
            packages.pop(name, None)
        else:
            packages[name] = version.lstrip("=")  # --package NAME==VER reads as NAME=VER too
    prebuilt = record.base == "prebuilt-image"  # the target's prebuilt image, Python and packages
    default_apt = target.prebuilt.apt_packages if prebuilt else target.apt_packages
    platform = spec.platform or target.platform
    toolchain, road, why = compile_toolchain(spec.toolchain, builder.arch if builder else None,
                                             platform, target.cuda_version, target.name)
    if road is not None and record.compiles and spec.apt_packages is None:
        default_apt = [*default_apt, *road.apt_packages]  # the cross g++ in the build base
    apt = spec.apt_packages if spec.apt_packages is not None else default_apt
    return EffectiveSpec(
        spec=spec,
        target=target,
        mode=mode,
        mode_reason=reason,
        platform=platform,
        toolchain=toolchain if record.compiles else "native",
        toolchain_reason=why if record.compiles else "",
        cross=road if record.compiles else None,
        images=base_images(spec, target, mode),
        torch=spec.torch if spec.torch is not None else target.torch,
        apt_packages=apt,
        runtime_apt_packages=_runtime_apt(spec, target, prebuilt, apt),
        python=spec.python or (target.prebuilt.python if prebuilt else target.python),
        packages=packages,
        mods=select_mod_names(target.default_mods, spec.mods, spec.add_mods, spec.remove_mods),
        max_jobs=spec.max_jobs or target.max_jobs,
        nvcc_threads=spec.nvcc_threads or target.nvcc_threads,
        env={**target.runtime_env, **spec.env},
    )


def _runtime_apt(spec: BuildSpec, target: Target, prebuilt: bool, apt: list[str]) -> list[str]:
    """The runtime stage's packages: the build base's where the stages share the prebuilt image
    (or the spec names them), else the prebuilt ones (the build toolchain stays in the devel)."""
    if spec.runtime_apt_packages is not None:
        return spec.runtime_apt_packages
    if prebuilt or spec.apt_packages is not None:
        return apt
    return target.prebuilt.apt_packages


def load_spec(
    target: str | None = None, spec_file: str | None = None, overrides: dict | None = None
) -> BuildSpec:
    """The spec from a file and/or CLI values; ``target`` is required one way or the other."""
    overrides = {k: v for k, v in (overrides or {}).items() if v not in (None, [], {})}
    if target:
        overrides["target"] = target
    if spec_file:
        return load_spec_file(Path(spec_file), overrides)
    if "target" not in overrides:
        raise SpecError("no target given: pass --target thor|spark (inv targets lists them) or "
                        "--spec FILE")
    return spec_from_dict(overrides)


def lock_overrides(lock, target: str | None = None) -> dict:
    """Spec fields that rebuild ``lock`` (its sources are pinned by the pipeline, by SHA).

    Packages are the lock's exact set: a target pin the lock does not have is dropped (null).
    """
    from edgevllm.specs.lock import check_lock_target

    check_lock_target(lock, target)
    name = target or lock.target
    images = lock.base_images
    settings = dict(lock.settings)
    packages: dict = {k: v for k, v in lock.packages.items() if k != "torch"}
    for pinned in load_target(name).packages:
        packages.setdefault(pinned, None)
    data = {
        "target": name,
        "packages": packages,
        "mods": [m.name for m in lock.mods if not m.name.startswith("patch:")],
        "build_args": {k: v for k, v in lock.build_args.items() if k != "VLLM_VERSION"},
    }
    # bytecode_image: absent from locks made before it was one of their base images;
    # extensions: a partial kernel build builds the same extensions again.
    for key in ("platform", "python", "apt_packages", "runtime_apt_packages", "torch", "env",
                "max_jobs", "nvcc_threads", "mode", "vllm_wheel", "overrides", "bytecode_image",
                "extensions"):
        if key in settings:
            data[key] = settings[key]
    # An emulated compile's lock asks for emulation again where the builder emulates (a cross
    # road is the default anyway, and a native builder compiles natively whatever was recorded).
    # A lock from before the cross road records none: a compile then ran natively or under
    # emulation, never cross, so an emulating builder rebuilds it emulated (its key). The field
    # means nothing to the modes that compile nothing.
    if settings.get("toolchain", "emulated") == "emulated":
        data["toolchain"] = "emulated"
    # The lock's mode, whatever builder rebuilds it: a compile lock compiles again (or reuses
    # its wheels by the compile key), never turns into prebuilt on an emulating builder.
    data.setdefault("mode", lock.mode)
    data["mode_from_lock"] = True
    # A recorded digest pins the base exactly: the rebuild uses the very same base image.
    if "build" in images and "runtime" in images:
        data["images"] = {stage: images[stage].pinned() for stage in ("build", "runtime")}
    if "bytecode" in images:
        data["bytecode_image"] = images["bytecode"].pinned()
    return data
