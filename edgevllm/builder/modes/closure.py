"""What every mode shares: the locked closure its image installs, and the lock built around it.

The modes stand side by side over this module and import it, never each other:
- the closure's platform, its overrides (the torch pin, target and spec pins, forbidden packages,
  ``--override``) and its inputs for ``sources.wheels.resolve_closure`` (one function: the
  mode gives the requirements its vLLM comes with: the release wheel, or a tree's runtime file)
- a closure taken from ``--lock`` instead (``from_lock``), or the release's (``release_closure``,
  ``release_inputs``)
- the shared wheelhouse and a closure's folder in it (``prepare_wheelhouse``)
- the build stages' tools, pinned like the closure (``build_tools``); a closure's part of a
  compile key (``pins_key``)
- the one lock builder (``base_lock``), which each mode extends with what is its own, and the
  mode labels read from a lock (``mode_labels``)
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Sequence

from edgevllm.builder.runner import Workspace
from edgevllm.builder.steps import base_image_locks, lock_settings
from edgevllm.common import console, labels
from edgevllm.common.errors import SpecError
from edgevllm.containers.docker import DockerEngine
from edgevllm.sources.wheelhouse import Wheelhouse, local_pin
from edgevllm.sources.wheels import (
    Closure,
    python_platform,
    python_version_of,
    resolve_closure,
    uv_version,
    vllm_requirement,
)
from edgevllm.specs.buildspec import EffectiveSpec, prebuilt_wheel
from edgevllm.specs.lock import ClosureLock, Lock, ModLock, now_utc

# What the stage vllm-files installs over the closure where the release wheel is the mode's vLLM
# (prebuilt; precompiled's build reads it from the wheelhouse): the closure stages install the
# rest, so a prebuilt and a precompiled image of one release share them.
OVER_CLOSURE = ("vllm",)
NEVER = "sys_platform == 'edgevllm-never'"   # an override with a false marker removes a package


def closure_platform(eff: EffectiveSpec) -> tuple[str, str]:
    """(uv --python-platform, Python version) of the image."""
    version = python_version_of(eff.python)
    if not version:
        raise SpecError(f"field 'python' is '{eff.python}': a closure resolves for one Python "
                        "version; name it (python3.12)")
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


def closure_inputs(eff: EffectiveSpec, head: list[str], mod_packages: list[str],
                   removed: Sequence[str] = ()) -> dict:
    """Keyword arguments for ``resolve_closure``: ``head`` (what the mode's vLLM comes with: the
    release wheel's requirement, or a tree's runtime requirements), uv (the in-image installer),
    the pinned packages and the mods' packages; ``removed``: packages the mode builds itself."""
    platform, version = closure_platform(eff)
    # The pinned packages are installed whether or not vLLM asks for them: a recipe's
    # InstantTensor is nobody's dependency (an override alone would drop it), a cross road's
    # target CUDA runtime neither.
    pinned = [f"{name}=={pin}" for name, pin in sorted(eff.packages.items())]
    requirements = [*head, f"uv=={uv_version()}", *pinned, *mod_packages]
    overrides = closure_overrides(eff, mod_packages) + [f"{name} ; {NEVER}" for name in removed]
    indexes = [eff.torch.index_url] if eff.torch.index_url else []
    return {"requirements": list(dict.fromkeys(requirements)), "platform": platform,
            "python_version": version, "overrides": overrides, "indexes": indexes}


def from_lock(locked: Lock | None, field: str = "closure") -> Closure | None:
    """The lock's closure (``closure`` or ``build_closure``), where it records one."""
    found = getattr(locked, field) if locked is not None else None
    return Closure.from_dict(found.model_dump()) if found is not None else None


def resolved(inputs: dict, what: str) -> Closure:
    """``inputs`` resolved with uv, saying what and for which platform, and each override."""
    console.step(f"closure: resolving {what} for {inputs['platform']} / Python "
                 f"{inputs['python_version']} (uv)")
    for override in inputs["overrides"]:
        console.info(f"  override {override}")
    return resolve_closure(**inputs)


def release_closure(eff: EffectiveSpec, locked: Lock | None, mod_packages: list[str]) -> Closure:
    """The release wheel's closure (prebuilt, precompiled): the lock's, else resolved."""
    closure = from_lock(locked)
    if closure is not None:
        console.step(f"closure: {len(closure.pins)} wheels from the lock (no resolve)")
        return closure
    inputs = release_inputs(eff, mod_packages)
    return resolved(inputs, inputs["requirements"][0])


def release_inputs(eff: EffectiveSpec, mod_packages: list[str]) -> dict:
    """The release closure's inputs: the requirement list starts with the release wheel's."""
    head = [vllm_requirement(prebuilt_wheel(eff.spec), *closure_platform(eff))]
    return closure_inputs(eff, head, mod_packages)


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


def build_tools(eff: EffectiveSpec, requires: list[str], closure: Closure,
                locked: Lock | None) -> Closure:
    """The tree's build requirements (``requires``), pinned like the closure, at its versions
    where they overlap (from the lock when rebuilding)."""
    tools = from_lock(locked, "build_closure")
    if tools is not None:
        return tools
    platform, version = closure_platform(eff)
    console.step(f"build tools: {', '.join(requires)} (the tree's build requirements, at the "
                 "closure's versions)")
    overrides = [f"{p.name}=={p.version}" for p in closure.pins]
    return resolve_closure(list(requires), platform=platform,
                           python_version=version, overrides=overrides,
                           indexes=list(closure.indexes))


def pins_key(closure: Closure) -> str:
    """A closure's part of a compile key: its wheels' hashes."""
    text = json.dumps(sorted(p.sha256 for p in closure.pins))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def base_lock(eff: EffectiveSpec, closure: Closure, mod_versions: list[dict],
              engine: DockerEngine, settings: dict | None = None, **own: Any) -> Lock:
    """The one lock builder, whole and validated once: what every mode's lock holds (the target,
    the mode, the base images its record says its stages start from, the pinned packages at the
    closure's versions, the mods, the settings, the closure), with the mode's own ``settings``
    and fields (``own``: its tree, build tools, kernels...) over it."""
    mode = eff.mode
    build = eff.images.build if "build" in eff.record.bases else eff.images.runtime
    packages = {n: p.version for n in ("torch", *eff.packages) if (p := closure.pin(n))}
    common = {"created_at": now_utc(), "target": eff.target.name, "mode": mode,
              "base_images": base_image_locks(eff, engine, build=build), "packages": packages,
              "mods": [ModLock(**m) for m in mod_versions], "tags": list(eff.spec.tags),
              "settings": {**lock_settings(eff), "mode": mode,
                           "overrides": list(eff.spec.overrides), **(settings or {})},
              "closure": ClosureLock(**closure.to_dict())}
    return Lock(**{**common, **own})


def mode_labels(lock: Lock) -> dict[str, str]:
    """The mode's labels, from its lock: its name, the release wheel's sha256 where the closure
    holds vLLM's wheel, and that wheel's version where no tree gives one."""
    wheel = lock.closure.wheel("vllm") if lock.closure else None
    found: dict[str, str] = {labels.MODE: lock.mode}
    if wheel:
        found[labels.VLLM_WHEEL_SHA] = wheel.sha256
    if wheel and lock.vllm is None:  # precompiled: the tree's version (static labels) stays
        found["org.opencontainers.image.version"] = wheel.version
    return found


def print_preflight(eff: EffectiveSpec) -> None:
    console.info(f"  base image: {eff.images.runtime}; platform {eff.platform}, {eff.python}")
