"""prebuilt: a released vLLM wheel and its locked closure; nothing is compiled.

In order (everything that can fail in seconds before anything is downloaded):
1. mods      staged first (their pip packages join the closure, so they install offline)
2. closure   resolved on the host for the target's platform + Python (``sources.wheels``), or
             taken from ``--lock``; the pinned packages (target's and spec's) are requirements;
             overrides (torch pin, target pins, forbidden packages, the user's ``--override`` /
             ``--package``) are resolver overrides, recorded in the lock
3. wheels    downloaded into the shared content-addressed wheelhouse (cached), checked by hash,
             assembled as the ``wheelhouse`` build context with requirements.txt (by hash)
4. lock      the closure, the base image, the mods; then the shared tail (``builder/tail.py``)
             builds the one ``runtime`` target: the closure installed offline with uv
             (--no-deps --require-hashes), checks, labels and tags

``locked_or_resolved``, ``prepare_wheelhouse`` and ``prebuilt_lock`` are what the precompiled
mode reuses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from edgevllm.builder.prepared import Job, PreparedBuild, engine_of, named_contexts
from edgevllm.builder.render import render_dockerfile
from edgevllm.builder.runner import Workspace
from edgevllm.builder.steps import base_image_locks, lock_settings, stage_mods
from edgevllm.common import console, labels
from edgevllm.common.errors import SpecError
from edgevllm.containers.docker import DockerEngine
from edgevllm.sources.wheels import (
    Closure,
    Wheelhouse,
    local_pin,
    python_platform,
    python_version_of,
    resolve_closure,
    uv_version,
    vllm_requirement,
)
from edgevllm.specs.buildspec import EffectiveSpec, prebuilt_wheel
from edgevllm.specs.lock import ClosureLock, Lock, ModLock, now_utc

name = "prebuilt"
# What the stage vllm-files installs over the closure (the same for precompiled, whose build
# reads the release wheel from the wheelhouse): the closure stages install the rest, so a
# prebuilt and a precompiled image of one release share them and nothing is installed twice.
OVER_CLOSURE = ("vllm",)
NEVER = "sys_platform == 'edgevllm-never'"   # an override with a false marker removes a package


def closure_platform(eff: EffectiveSpec) -> tuple[str, str]:
    """(uv --python-platform, Python version) of the image."""
    version = python_version_of(eff.python)
    if not version:
        raise SpecError(f"field 'python' is '{eff.python}': a prebuilt closure resolves for one "
                        "Python version; name it (python3.12)")
    return python_platform(eff.platform), version


def closure_overrides(eff: EffectiveSpec, mod_packages: list[str]) -> list[str]:
    """The target's and the user's pins as resolver overrides, in a stable order."""
    overrides = []
    if eff.torch.version:
        overrides.append(f"torch=={eff.torch.version}")
    overrides += [f"{name}=={version}" for name, version in sorted(eff.packages.items())]
    overrides += [m for m in mod_packages if "==" in m]
    overrides += [f"{name} ; {NEVER}" for name in eff.target.forbidden_packages]
    overrides += list(eff.spec.overrides)
    return list(dict.fromkeys(overrides))


def closure_inputs(eff: EffectiveSpec, mod_packages: list[str]) -> dict:
    """Keyword arguments for ``resolve_closure`` (the requirement list starts with vLLM's)."""
    platform, version = closure_platform(eff)
    # The pinned packages are installed whether or not vLLM asks for them, as a compile installs
    # them: a recipe's InstantTensor is nobody's dependency (an override alone would drop it).
    pinned = [f"{name}=={pin}" for name, pin in sorted(eff.packages.items())]
    requirements = [vllm_requirement(prebuilt_wheel(eff.spec), platform, version),
                    f"uv=={uv_version()}", *pinned] + list(mod_packages)
    indexes = [eff.torch.index_url] if eff.torch.index_url else []
    return {"requirements": list(dict.fromkeys(requirements)), "platform": platform,
            "python_version": version, "overrides": closure_overrides(eff, mod_packages),
            "indexes": indexes}


def locked_or_resolved(eff: EffectiveSpec, locked: Lock | None, mod_packages: list[str]) -> Closure:
    if locked is not None and locked.closure is not None:
        console.step(f"closure: {len(locked.closure.wheels)} wheels from the lock (no resolve)")
        return Closure.from_dict(locked.closure.model_dump())
    inputs = closure_inputs(eff, mod_packages)
    console.step(f"closure: resolving {', '.join(inputs['requirements'][:1])} for "
                 f"{inputs['platform']} / Python {inputs['python_version']} (uv)")
    for override in inputs["overrides"]:
        console.info(f"  override {override}")
    return resolve_closure(**inputs)


def prepare_wheelhouse(eff: EffectiveSpec, closure: Closure, ws: Workspace,
                       wheelhouse: Wheelhouse | None = None, over: Sequence[str] = ()) -> Path:
    """Download what is missing into the shared cache; the build context: the closure's folder
    of links + pins, kept in the cache (``Wheelhouse.set_folder``; ``ws`` is not written).
    ``over``: the packages the mode installs over the closure in their own stage (its vLLM):
    their wheels are in the folder, their pins not in the closure's requirements.txt."""
    wheelhouse = wheelhouse or Wheelhouse()
    wheel = eff.spec.vllm_wheel or ""
    if wheel.endswith(".whl") and not wheel.startswith(("http://", "https://")):
        wheelhouse.add_file(Path(wheel).expanduser(), local_pin(Path(wheel).expanduser()))
    missing = wheelhouse.missing(closure.pins)
    size = sum(p.size or 0 for p in missing) / 1e9
    console.step(f"wheels: {len(closure.pins)} in the closure, {len(missing)} to download "
                 f"({size:.2f} GB) into {wheelhouse.root}")
    wheelhouse.fetch(closure.pins)
    return wheelhouse.assemble(closure, over=over)


def prebuilt_lock(eff: EffectiveSpec, closure: Closure, mod_versions: list[dict],
                  engine: DockerEngine) -> Lock:
    settings = {**lock_settings(eff), "mode": "prebuilt", "overrides": list(eff.spec.overrides),
                "vllm_wheel": prebuilt_wheel(eff.spec)}
    top = {p.name: p.version for p in closure.pins if p.name in ("torch", *eff.packages)}
    return Lock(created_at=now_utc(), target=eff.target.name, mode="prebuilt",
                base_images=base_image_locks(eff, engine, build=eff.images.runtime), packages=top,
                mods=[ModLock(**m) for m in mod_versions], settings=settings,
                tags=list(eff.spec.tags), closure=ClosureLock(**closure.to_dict()))


def print_preflight(eff: EffectiveSpec) -> None:
    console.info(f"  base image: {eff.images.runtime}; platform {eff.platform}, {eff.python}")


def prepare(job: Job) -> PreparedBuild:
    eff = job.eff
    print_preflight(eff)
    staged = stage_mods(eff, job.ws, job.locked, job.fetch)
    dockerfile = render_dockerfile(eff, staged.env)
    if not job.fetch:
        folders = {"wheelhouse": f"<the locked closure of vllm {prebuilt_wheel(eff.spec)}, "
                                 "every wheel by sha256>"}
        return PreparedBuild(eff=eff, dockerfile=dockerfile, stages=("runtime",), lock=None,
                             contexts=named_contexts(job, folders=folders))
    closure = locked_or_resolved(eff, job.locked, staged.pip_packages)
    vllm = closure.pin("vllm")
    console.info(f"  vllm {vllm.version if vllm else '?'}: {len(closure.pins)} wheels, "
                 f"{closure.total_bytes() / 1e9:.2f} GB")
    folder = prepare_wheelhouse(eff, closure, job.ws, over=OVER_CLOSURE)
    lock = prebuilt_lock(eff, closure, staged.versions, engine_of(job))
    return PreparedBuild(eff=eff, dockerfile=dockerfile, stages=("runtime",), lock=lock,
                         contexts=named_contexts(job, folders={"wheelhouse": str(folder)}),
                         wheelhouse=folder, labels=mode_labels(lock),
                         runtime_what="runtime image (prebuilt closure)")


def mode_labels(lock: Lock) -> dict[str, str]:
    wheel = lock.closure.wheel("vllm") if lock.closure else None
    found: dict[str, str] = {labels.MODE: lock.mode}
    if wheel:
        found[labels.VLLM_WHEEL_SHA] = wheel.sha256
    if wheel and lock.vllm is None:  # precompiled: the tree's version (static labels) stays
        found["org.opencontainers.image.version"] = wheel.version
    return found
