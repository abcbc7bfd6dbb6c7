"""A build's compiled wheels by compile key: where they come from, and where they go after.

``compiled_wheels`` is the one place that says whether a build of a compile key has its wheels
already: the output's ``wheels/<key>/`` folder (when it is the user's: ``runner.own_wheels``),
else the wheel cache (``--wheel-cache REF``), fetched with every sha256 checked. The mode rule
(``builder.modes``) and the pipeline both ask it; the tail then skips the compile where the
folder holds wheels. A refused artifact stops the build with one line, unless the build was
told to compile (``--compile``): then it compiles.
``share`` publishes a key's wheels to the wheel cache once the image has passed its checks,
signed with the builder's ``EDGEVLLM_SIGNING_KEY`` (the key ``inv sign`` and the provenance use).

Trust: an artifact is taken only when a trusted key signed its wheel list (image/wheelcache.py):
the public keys in ``EDGEVLLM_WHEEL_CACHE_KEYS`` (files, separated by ``os.pathsep``) and the
builder's own signing key. Whoever can push to the repository could otherwise write a key's
artifact first (a compile key is computable from public inputs); docs/workstation.md says who
must be trusted.
"""

from __future__ import annotations

import os
from pathlib import Path

from edgevllm.builder.prepared import Job, PreparedBuild
from edgevllm.builder.runner import Workspace, own_wheels
from edgevllm.common import console
from edgevllm.common.errors import ConfigError, RegistryError, WheelCacheError
from edgevllm.specs.buildspec import BuildSpec
from edgevllm.specs.moderecord import mode_record


def may_reuse(spec: BuildSpec, ws: Workspace) -> bool:
    """Whether a build of ``spec`` may find compiled wheels before its key is known: some
    compile's wheels lie in the output, or a wheel cache is given (``compiled_wheels`` decides
    once the compile is prepared)."""
    return bool(spec.wheel_cache) or any(ws.root.glob("wheels/*/*.whl"))


def compiled_wheels(job: Job, build: PreparedBuild) -> Path | None:
    """The folder of this build's compiled wheels (the output's, or fetched from the wheel
    cache into it); None where there are none: the build compiles."""
    from edgevllm.image.wheelcache import check_ref

    key, ref = build.compile_key, job.eff.spec.wheel_cache
    if ref:
        check_ref(ref)  # a wrong REF fails now, not after the compile
    if key is None or not build.compiles:  # a mode that compiles nothing keeps its own
        return None
    folder = job.ws.wheels(key)
    if any(folder.glob("*.whl")) and own_wheels(folder, job.ws.root):
        return folder
    return _fetch(ref, key, folder, compile_instead=told_to_compile(job)) if ref else None


def told_to_compile(job: Job) -> bool:
    """--compile (or mode compile in a spec): a refused artifact compiles instead. A lock's
    own mode is not that: without --compile its rebuild stops like any other build."""
    spec = job.eff.spec
    if spec.mode is None or spec.mode_from_lock:
        return False
    return mode_record(spec.mode).compiles


def _fetch(ref: str, key: str, folder: Path, compile_instead: bool) -> Path | None:
    from edgevllm.image.wheelcache import fetch

    try:
        got = fetch(ref, key, folder, trusted_keys())
    except WheelCacheError as exc:
        if not compile_instead:
            raise WheelCacheError(f"{exc}; --compile compiles instead") from None
        console.warn(f"{exc}; --compile: compiling instead")
        return None
    if got is None:
        console.info(f"no compiled wheels for key {key} in {ref}: the wheels are compiled")
        return None
    console.step(f"compiled wheels for key {key} from {ref}: nothing to compile "
                 f"({len(got.wheels)} wheel(s), every sha256 checked)")
    return folder


KEYS_SETTING = "EDGEVLLM_WHEEL_CACHE_KEYS"
SIGNING_SETTING = "EDGEVLLM_SIGNING_KEY"


def signing_key():
    """The builder's Ed25519 private key (``EDGEVLLM_SIGNING_KEY``), None without one."""
    from edgevllm.inspect.dsse import load_private_key

    path = os.environ.get(SIGNING_SETTING)
    return load_private_key(path) if path else None


def trusted_keys() -> list:
    """The public keys whose signature makes a wheel cache artifact taken: every file in
    ``EDGEVLLM_WHEEL_CACHE_KEYS`` and the builder's own signing key."""
    from edgevllm.inspect.dsse import load_public_key

    paths = [p for p in os.environ.get(KEYS_SETTING, "").split(os.pathsep) if p.strip()]
    own = os.environ.get(SIGNING_SETTING)
    try:
        return [load_public_key(p) for p in [*paths, *([own] if own else [])]]
    except ConfigError as exc:  # --key … in its words: here the setting names the file
        raise ConfigError(f"{KEYS_SETTING} / {SIGNING_SETTING}: "
                          f"{str(exc).removeprefix('--key ')}") from None


def share(job: Job, build: PreparedBuild, folder: Path) -> dict | None:
    """Publish the key's wheels to the wheel cache (where one is given): what happened, for the
    summary. A registry that fails here costs the build nothing: its image is done."""
    ref, key = job.eff.spec.wheel_cache, build.compile_key
    if not ref or key is None or not build.compiles or not any(folder.glob("*.whl")):
        return None
    from edgevllm.image.wheelcache import publish

    signer = signing_key()
    if signer is None:
        console.warn(f"the compiled wheels go to {ref} unsigned (no EDGEVLLM_SIGNING_KEY): no "
                     "builder takes them from there")
    try:
        sent = publish(ref, key, folder, signer)
    except RegistryError as exc:
        console.warn(f"the compiled wheels were not published to {ref}: {exc}")
        return {"ref": f"{ref}:{key}", "action": "failed"}
    said = {"pushed": "published", "unchanged": "already there",
            "kept": "the registry keeps another builder's wheels of this key"}[sent.action]
    console.info(f"wheel cache {sent.ref}: {said} ({sent.digest[:19]}…)")
    return {"ref": sent.ref, "digest": sent.digest, "action": sent.action,
            "wheels": {w.name: w.sha256 for w in sent.wheels}}
