"""The build spec: one typed, validated object describing what to build.

It comes from CLI flags, a YAML spec file (flags override the file), or a lock. ``resolve()``
merges it with its target's defaults into the ``EffectiveSpec`` the renderer and driver use.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field, field_validator

from edgevllm.kernel.errors import SpecError
from edgevllm.kernel.schema import Strict, parse_model
from edgevllm.model.targets import BaseImages, Target, TorchSource, load_target

UPSTREAM_VLLM = "https://github.com/vllm-project/vllm.git"
UPSTREAM_FLASHINFER = "https://github.com/flashinfer-ai/flashinfer.git"
# A recent vLLM release that builds for both targets with CUDA 13.0 (pins torch 2.14.0,
# flashinfer 0.7.2.post1, cutlass-dsl 4.8.0). Spark needs the keep-12.1a CMake patch with it.
DEFAULT_VLLM_REF = "v0.33.0"
DEFAULT_IMAGE_REPO = "edgevllm/vllm"




class SourceSpec(Strict):
    """A git source: a repo (URL, ``owner/name`` or local path) at a ref, a PR head, plus picks."""

    repo: str = UPSTREAM_VLLM
    ref: str | None = None
    pr: int | None = Field(default=None, ge=1)
    cherry_picks: list[str] = Field(default_factory=list)
    allow_doc_conflicts: bool = False

    def describe(self) -> str:
        where = f"PR #{self.pr}" if self.pr else (self.ref or "default branch")
        picks = f" + {len(self.cherry_picks)} pick(s)" if self.cherry_picks else ""
        return f"{self.repo} @ {where}{picks}"


class FlashInferSpec(Strict):
    """FlashInfer from PyPI (``version``; default: the target's pin) or built from ``source``."""

    version: str | None = None
    source: SourceSpec | None = None


class BuildSpec(Strict):
    target: str
    vllm: SourceSpec = Field(default_factory=lambda: SourceSpec(ref=DEFAULT_VLLM_REF))
    flashinfer: FlashInferSpec = Field(default_factory=FlashInferSpec)
    # Pins over the target's; a null value drops the target's pin of that package.
    packages: dict[str, str | None] = Field(default_factory=dict)
    mods: list[str] | None = None
    add_mods: list[str] = Field(default_factory=list)
    remove_mods: list[str] = Field(default_factory=list)
    max_jobs: int | None = Field(default=None, ge=1)
    nvcc_threads: int | None = Field(default=None, ge=1)
    image_repo: str = DEFAULT_IMAGE_REPO
    tags: list[str] = Field(default_factory=list)
    build_args: dict[str, str] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    images: BaseImages | None = None
    torch: TorchSource | None = None
    apt_packages: list[str] | None = None
    python: str | None = None
    platform: str | None = None
    wheelhouse: str | None = None
    offline: bool = False
    verify: bool = True
    probe_required: list[str] | None = None

    @field_validator("env", "build_args")
    @classmethod
    def _no_secrets(cls, value: dict[str, str]) -> dict[str, str]:
        # Env values become image ENV, build args reach the log and the lock label: a token in
        # either would ship with the image. Secrets are given at run time (recipes pass them by name).
        from edgevllm.model.lock import _SECRET_RE

        bad = sorted(k for k in value if _SECRET_RE.search(k))
        if bad:
            raise ValueError(f"{', '.join(bad)} looks like a secret; never bake a secret into an "
                             "image: pass it when the container runs (inv serve passes HF_TOKEN by name)")
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
    platform: str
    images: BaseImages
    torch: TorchSource
    apt_packages: list[str]
    python: str
    packages: dict[str, str]
    mods: list[str]
    max_jobs: int
    nvcc_threads: int
    env: dict[str, str]


def load_spec_file(path: Path, overrides: dict | None = None) -> BuildSpec:
    """A YAML spec file, with CLI values in ``overrides`` taking precedence."""
    from edgevllm.kernel.schema import read_yaml

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


def select_mods(spec: BuildSpec, target: Target) -> list[str]:
    chosen = list(spec.mods if spec.mods is not None else target.default_mods)
    chosen += [m for m in spec.add_mods if m not in chosen]
    return [m for m in chosen if m not in spec.remove_mods]


def resolve(spec: BuildSpec) -> EffectiveSpec:
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
            packages[name] = version
    if spec.offline and not spec.wheelhouse:
        raise SpecError("field 'offline': an offline build needs 'wheelhouse' (a folder of wheels)")
    return EffectiveSpec(
        spec=spec,
        target=target,
        platform=spec.platform or target.platform,
        images=spec.images or target.images,
        torch=spec.torch if spec.torch is not None else target.torch,
        apt_packages=spec.apt_packages if spec.apt_packages is not None else target.apt_packages,
        python=spec.python or target.python,
        packages=packages,
        mods=select_mods(spec, target),
        max_jobs=spec.max_jobs or target.max_jobs,
        nvcc_threads=spec.nvcc_threads or target.nvcc_threads,
        env={**target.runtime_env, **spec.env},
    )


def load_spec(target: str | None = None, spec_file: str | None = None,
              overrides: dict | None = None) -> BuildSpec:
    """The spec from a file and/or CLI values; ``target`` is required one way or the other."""
    overrides = {k: v for k, v in (overrides or {}).items() if v not in (None, [], {})}
    if target:
        overrides["target"] = target
    if spec_file:
        return load_spec_file(Path(spec_file), overrides)
    if "target" not in overrides:
        raise SpecError("no target given: pass --target thor|spark (inv targets lists them) "
                        "or --spec FILE")
    return spec_from_dict(overrides)


def _pairs(values: list[str] | None, flag: str) -> dict[str, str]:
    """``["A=1", "B=2"]`` → ``{"A": "1", "B": "2"}``; a value without ``=`` fails with one line."""
    out: dict[str, str] = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SpecError(f"{flag} '{item}': expected KEY=VALUE")
        out[key] = value
    return out


def cli_overrides(*, vllm_repo=None, vllm_ref=None, vllm_pr=None, cherry_picks=None,
                  allow_doc_conflicts=False, flashinfer_version=None, flashinfer_repo=None,
                  flashinfer_ref=None, flashinfer_pr=None, flashinfer_cherry_picks=None, mods=None, add_mods=None, remove_mods=None, max_jobs=None,
                  nvcc_threads=None, image_repo=None, tags=None, build_args=None, env=None,
                  packages=None, wheelhouse=None, offline=False, platform=None,
                  verify=True) -> dict:
    """CLI flag values → a partial spec dict (only what was given), for ``load_spec``."""
    vllm = {k: v for k, v in {"repo": vllm_repo, "ref": vllm_ref, "pr": _int(vllm_pr, "--vllm-pr"),
                              "cherry_picks": cherry_picks or None,
                              "allow_doc_conflicts": allow_doc_conflicts or None}.items()
            if v is not None}
    flashinfer: dict = {}
    if flashinfer_version:
        flashinfer["version"] = flashinfer_version
    if flashinfer_repo or flashinfer_ref or flashinfer_pr or flashinfer_cherry_picks:
        source = {"repo": flashinfer_repo or UPSTREAM_FLASHINFER, "ref": flashinfer_ref,
                  "pr": _int(flashinfer_pr, "--flashinfer-pr"),
                  "cherry_picks": flashinfer_cherry_picks or [],
                  "allow_doc_conflicts": bool(allow_doc_conflicts)}
        flashinfer["source"] = {k: v for k, v in source.items() if v is not None}
    out = {
        "vllm": vllm or None, "flashinfer": flashinfer or None, "mods": mods,
        "add_mods": add_mods, "remove_mods": remove_mods, "max_jobs": _int(max_jobs, "--max-jobs"),
        "nvcc_threads": _int(nvcc_threads, "--nvcc-threads"), "image_repo": image_repo,
        "tags": tags, "build_args": _pairs(build_args, "--build-arg") or None,
        "env": _pairs(env, "--env") or None, "packages": _pairs(packages, "--package") or None,
        "wheelhouse": wheelhouse, "offline": offline or None, "platform": platform,
        "verify": None if verify else False,
    }
    if vllm and "ref" not in vllm and "pr" not in vllm and vllm_repo:
        vllm["ref"] = None  # a custom repo without a ref means its default branch
    return {k: v for k, v in out.items() if v is not None}


def _int(value, flag: str) -> int | None:
    if value in (None, ""):
        return None
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if flag.endswith("-pr"):  # a PR URL is accepted too; the sources module parses it fully
        match = re.search(r"(\d+)/?$", text)
        text = match.group(1) if match else text
    if not text.isdigit():
        raise SpecError(f"{flag} '{value}': expected a whole number")
    return int(text)


def lock_overrides(lock, target: str | None = None) -> dict:
    """Spec fields that rebuild ``lock`` (its sources are pinned by the pipeline, by SHA).

    Packages are the lock's exact set: a target pin the lock does not have is dropped (null).
    """
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
    for key in ("platform", "python", "apt_packages", "torch", "env", "max_jobs", "nvcc_threads"):
        if key in settings:
            data[key] = settings[key]
    if "build" in images and "runtime" in images:
        # A recorded digest pins the base exactly: the rebuild uses the very same base image.
        data["images"] = {stage: f"{images[stage].ref}@{images[stage].digest}"
                          if images[stage].digest else images[stage].ref
                          for stage in ("build", "runtime")}
    return data
