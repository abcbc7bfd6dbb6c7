"""Steps every build mode shares (compile, prebuilt, precompiled): staging mods, the lock's base
images and settings, the image's labels, the mods record, the checks and their outcome labels.

The modes (``builder/modes/``) and the shared tail (``builder/tail.py``) import them from here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from edgevllm.builder.runner import Workspace
from edgevllm.builder.subset.plan import label as subset_label
from edgevllm.common import console, labels
from edgevllm.common.errors import ArchGateFailed, ImageNotFoundError, ProbeError
from edgevllm.containers.docker import DockerEngine
from edgevllm.image.records import read_image_record as read_image_record  # the tail's
from edgevllm.specs.buildspec import EffectiveSpec
from edgevllm.specs.lock import (
    LOCK_LABEL,
    BaseImageLock,
    Lock,
    label_value,
    now_utc,
)

if TYPE_CHECKING:
    from edgevllm.verify.judge import Verdict

LOCK_FILE_IN_IMAGE = labels.LOCK_FILENAME  # the meta context is copied to labels.HOME


def stage_mods(eff: EffectiveSpec, ws: Workspace, locked: Lock | None = None,
               fetch: bool = True):
    """The mods staged into the build context; their downloads fetched (``fetch``) and held to
    the pins of the lock being rebuilt (``locked``)."""
    from edgevllm.mods.catalog import stage_mods as stage

    pins = {m.name: m.downloads for m in locked.mods} if locked is not None else None
    return stage(eff.mods, eff.target.name, ws.context / "edgevllm-mods", pins, fetch)


def base_image_lock(ref: str, engine: DockerEngine) -> BaseImageLock:
    """A base image as ref + digest: pinned (``ref@sha256:...``) as given, else asked of its
    registry (None when unknown: a local-only image, or no network)."""
    name, at, digest = ref.partition("@")
    if at:
        return BaseImageLock(ref=name, digest=digest)
    return BaseImageLock(ref=ref, digest=engine.manifest_digest(ref, timeout=60))


def base_image_locks(eff: EffectiveSpec, engine: DockerEngine, build: str) -> dict:
    """The lock's ``base_images``: the ``build`` base given, the runtime base, and the build
    platform's base of the closure's byte-code (``eff.bytecode_image``), each ref asked once."""
    asked: dict[str, BaseImageLock] = {}

    def locked(ref: str) -> BaseImageLock:
        if ref not in asked:
            asked[ref] = base_image_lock(ref, engine)
        return asked[ref]

    return {"build": locked(build), "runtime": locked(eff.images.runtime),
            "bytecode": locked(eff.bytecode_image)}


def check_base_images(eff: EffectiveSpec, engine: DockerEngine, origin: str) -> None:
    """A rebuild from a lock: every base it names is on the engine or in its registry (by its
    digest where the lock has one), or the build stops here in one line naming it, before
    anything is fetched."""
    bases = {"build": eff.images.build, "runtime": eff.images.runtime,
             "bytecode": eff.bytecode_image}
    used = [(role.replace("bytecode", "byte-code"), bases[role])
            for role in eff.record.bases]
    roles: dict[str, list[str]] = {}
    for role, ref in used:  # a prebuilt image's one base: build and runtime are the same
        roles.setdefault(ref, []).append(role)
    for ref, named in roles.items():
        if engine.image_exists(ref) or engine.manifest_digest(ref, timeout=60):
            continue
        raise ImageNotFoundError(
            f"{origin}: the {' and '.join(named)} base image {ref} cannot be had: engine "
            f"{engine.describe()} does not hold it and its registry does not serve it; pull or "
            f"load it there (docker pull {ref}), or build without --lock")


def lock_settings(eff: EffectiveSpec) -> dict:
    """What else shapes the image; ``spec.lock_overrides`` turns it back into spec fields
    (all but ``aot``: the modules --aot builds in, which give such an image its own tag; a
    lock rebuild builds them again only with --aot given again; a lock from before the rename
    holds them as ``warm``, which nothing reads back either)."""
    return {
        **_aot_setting(eff),
        "platform": eff.platform,
        "python": eff.python,
        "apt_packages": eff.apt_packages,
        "torch": eff.torch.model_dump(),
        "env": eff.env,
        "max_jobs": eff.max_jobs,
        "nvcc_threads": eff.nvcc_threads,
        "forbidden_packages": eff.target.forbidden_packages,
        # a compile's runtime packages, where its base is not the build's
        **({"runtime_apt_packages": eff.runtime_apt_packages}
           if eff.runtime_apt_packages != eff.apt_packages else {}),
    }


def _aot_setting(eff: EffectiveSpec) -> dict:
    if not eff.spec.aot:
        return {}
    from edgevllm.builder.aot.plan import aot_plan

    plan = aot_plan(eff.spec.aot)
    return {"aot": {"config": plan["config"], "modules": [m["name"] for m in plan["modules"]]}}


def static_labels(eff: EffectiveSpec, lock: Lock, tag: str) -> dict[str, str]:
    vllm = lock.vllm
    prs = [str(p.pr) for p in vllm.picks if p.pr and not p.skipped] if vllm else []
    return {
        "org.opencontainers.image.created": lock.created_at or now_utc(),
        "org.opencontainers.image.source": vllm.repo if vllm else "",
        "org.opencontainers.image.revision": vllm.commit if vllm else "",
        "org.opencontainers.image.version": vllm.version if vllm else "",
        labels.VLLM_SHA: vllm.base_sha if vllm else "",
        labels.VLLM_PR: str(vllm.pr or "") if vllm else "",
        labels.PRS: ",".join(prs),
        labels.MODS_VERSIONS: ",".join(f"{m.name}={m.version}" for m in lock.mods),
        labels.TAG: tag,
        labels.KERNEL_PLAN: json.dumps(
            {k: lock.kernel_plan.get(k) for k in ("cuda_archs", "none")}, separators=(",", ":")
        ),
        labels.VLLM_RS: lock.kernel_plan.get("vllm_rs") or "not in the tree",
        LOCK_LABEL: label_value(lock),
        **subset_label(lock.settings),
    }


def read_mods_record(engine: DockerEngine, image: str) -> dict | None:
    return read_image_record(engine, image, labels.MODS_RECORD)


def print_mods(record: dict | None) -> None:
    if not record:
        console.info("mods: none applied")
        return
    for mod in record.get("mods", []):
        console.info(
            f"  mod {mod.get('name')}: {mod.get('outcome')}  {mod.get('detail', '')}".rstrip()
        )


def run_checks(
    eff: EffectiveSpec, engine: DockerEngine, image: str, ws: Workspace,
    timings: dict[str, float] | None = None, planned: dict[str, list[str]] | None = None,
) -> tuple[dict, dict, Verdict]:
    """Arch verify and probe level 1, side by side: the probe's container imports the image's
    code while verify reads its layers on the host; raises (leaving only the unverified tag)
    when either fails. The verdict itself comes back too: the plan is compared with it in
    memory. ``timings``: the seconds of each check are added to it. ``planned``: the compile's
    kernel plan by extension (its ``+PTX`` units pass the gate as planned)."""
    import time

    from edgevllm.probe.level1 import Level1Run
    from edgevllm.verify.api import verify as arch_verify
    from edgevllm.verify.policy import mode_policy

    console.step("checks: kernel-arch coverage, and probe level 1 (imports, torch arch list, "
                 "mods record, env) in the image meanwhile")
    started = time.perf_counter()
    pending = Level1Run(engine, image, eff.target.name, required=eff.spec.probe_required,
                        runtime_env=eff.env)
    try:
        verdict = arch_verify(eff.target.name, image=image, engine=engine,
                              json_out=ws.root / "verify.json", policy=mode_policy(eff.mode),
                              planned=planned)
    except BaseException:
        pending.cancel()
        raise
    verified = time.perf_counter()
    verify_summary = verdict.summary_dict()
    probe = pending.result(first_start=verify_summary["first_start"])
    if timings is not None:
        timings["verify"] = round(verified - started, 1)
        timings["probe"] = probe.duration_s or 0.0
        timings["probe_after_verify"] = round(time.perf_counter() - verified, 1)
    probe_summary = {"passed": probe.passed, "summary": probe.summary()}
    if probe.facts.get("from_cache"):
        console.info("  probe level 1: the facts of the probe cache (the same layers, config, "
                     "engine and check script were probed before; judged afresh)")
    first = probe.get("first-start")
    if first is not None:
        console.info(f"  first start: {first.message}")
    if not verdict.passed:
        raise ArchGateFailed(
            f"{image}: kernel-arch gate failed for {eff.target.name}; "
            f"see {ws.root / 'verify.json'} (inv verify --image {image})"
        )
    if not probe.passed:
        raise ProbeError(f"{image}: probe level 1 failed: {probe.summary()}")
    return verify_summary, probe_summary, verdict


def checks_or_skip(
    eff: EffectiveSpec, engine: DockerEngine, image: str, ws: Workspace,
    timings: dict[str, float] | None = None, planned: dict[str, list[str]] | None = None,
) -> tuple[dict, dict, Verdict | None]:
    if eff.spec.verify:
        return run_checks(eff, engine, image, ws, timings, planned)
    console.warn("checks skipped (--no-verify); the image's labels say so")
    return {"skipped": True}, {"skipped": True}, None


def outcome_labels(record: dict | None, verify: dict, probe: dict,
                   aot: dict | None = None) -> dict[str, str]:
    """What is only known once the image is built and checked (added config-only); ``aot``:
    the FlashInfer AOT modules --aot built in (builder/aot/plan.py ``aot_summary``)."""
    compact = (",", ":")
    found = {
        labels.MODS: json.dumps(_mods_summary(record), separators=compact),
        labels.VERIFY: json.dumps(verify, separators=compact),
        labels.PROBE: json.dumps(probe, separators=compact),
    }
    if aot is not None:
        found[labels.AOT] = json.dumps(aot, separators=compact)
    return found


def _mods_summary(record: dict | None) -> list[dict]:
    return [
        {"name": m.get("name"), "version": m.get("version"), "outcome": m.get("outcome")}
        for m in (record or {}).get("mods", [])
    ]


def prime_publish_cache(engine: DockerEngine, image: str) -> dict:
    """The optional last step (``--publish-cache``): the image's layers compressed into the
    publish layer cache now, as ``inv publish`` would compress them, so its first publish only
    assembles cached frames. The time is what the build pays for that; the image is unchanged."""
    import time

    from edgevllm.image.publish import prime_layer_cache

    console.step("publish cache: compressing the image's layers for inv publish")
    started = time.perf_counter()
    stats = prime_layer_cache(engine, image)
    seconds = round(time.perf_counter() - started, 1)
    console.info(
        f"  {stats.compressed_layers} layer(s) compressed, {stats.cached_layers} already cached, "
        f"{seconds}s; inv publish --image {image} needs no docker save"
    )
    return {
        "seconds": seconds,
        "compressed_layers": stats.compressed_layers,
        "cached_layers": stats.cached_layers,
        "from_store": stats.from_store,
    }


def supply_chain(engine: DockerEngine, image: str, lock_file: Path) -> dict | None:
    """The SBOM beside the lock, and the signed provenance when $EDGEVLLM_SIGNING_KEY names
    a key file (docs/inside.md). A failure here is reported, not fatal: the image passed its
    checks; ``inv sbom --image`` makes the files again."""
    import os

    from edgevllm.common.errors import EdgeVllmError
    from edgevllm.inspect.supplychain import supply_chain_after_build

    console.step("SBOM: the installed distributions and the lock's inputs")
    key = os.environ.get("EDGEVLLM_SIGNING_KEY") or None
    try:
        record = supply_chain_after_build(engine, image, lock_file, Path(key) if key else None)
    except EdgeVllmError as exc:
        console.warn(f"SBOM / provenance not written: {exc}")
        return None
    console.info(f"  {record['sbom']} ({record['distributions']} distributions"
                 + (", signed" if "provenance" in record else "") + f", {record['seconds']}s)")
    return record
