"""Tasks: targets, render, build (the main job)."""

from __future__ import annotations

import json
from pathlib import Path

from edgevllm.kernel import console
from edgevllm.cli._common import cli_task, split_csv

SPEC_HELP = {
    "target": "thor | spark (inv targets lists them)",
    "spec": "a YAML build spec; flags override its fields",
    "lock": "rebuild exactly what a lock file pins (fetching every source by SHA)",
    "vllm_repo": "vLLM repository: URL, owner/name or local path (default: upstream)",
    "vllm_ref": "tag, branch or SHA to build (default: the pinned release)",
    "vllm_pr": "build a PR's head: number or PR URL",
    "cherry_pick": "PR number, PR URL or commit SHA to apply (repeatable, in order)",
    "allow_doc_conflicts": "resolve conflicts that touch only docs/tests by keeping the base's side",
    "flashinfer_version": "FlashInfer version from PyPI (default: the target's pin)",
    "flashinfer_repo": "build FlashInfer from this repository instead of PyPI",
    "flashinfer_ref": "FlashInfer tag/branch/SHA when built from source",
    "flashinfer_pr": "build FlashInfer from a PR's head (number or URL)",
    "flashinfer_cherry_pick": "PR/SHA to apply onto FlashInfer (repeatable, in order)",
    "mod": "apply only these mods (repeatable or comma-separated; default: the target's list)",
    "add_mod": "add a mod to the target's default list (repeatable)",
    "no_mod": "drop a mod from the list (repeatable)",
    "max_jobs": "parallel compile jobs (default: the target's, sized for its memory)",
    "nvcc_threads": "threads per nvcc job",
    "image_repo": "image repository (default edgevllm/vllm)",
    "tag": "extra image tag (repeatable); the immutable tag comes from the lock",
    "build_arg": "KEY=VALUE passed to the build (repeatable; never a secret)",
    "env": "KEY=VALUE runtime environment variable (repeatable)",
    "package": "NAME=VERSION pin for the runtime (repeatable)",
    "wheelhouse": "a folder of wheels pip may install from (for air-gapped builds)",
    "offline": "install only from --wheelhouse (pip --no-index)",
    "platform": "override the target's docker platform (e.g. linux/amd64 for a test build)",
    "out": "where locks, logs, wheels and contexts go (default: ./out)",
}
ITERABLE = ["cherry_pick", "flashinfer_cherry_pick", "mod", "add_mod", "no_mod", "tag", "build_arg", "env", "package"]


def _spec(target, spec, lock, verify=True, **flags):
    from edgevllm.model.lock import read_lock
    from edgevllm.model.spec import cli_overrides, load_spec, lock_overrides, spec_from_dict

    overrides = cli_overrides(
        vllm_repo=flags.get("vllm_repo"), vllm_ref=flags.get("vllm_ref"),
        vllm_pr=flags.get("vllm_pr"), cherry_picks=flags.get("cherry_pick") or None,
        allow_doc_conflicts=flags.get("allow_doc_conflicts"),
        flashinfer_version=flags.get("flashinfer_version"),
        flashinfer_repo=flags.get("flashinfer_repo"), flashinfer_ref=flags.get("flashinfer_ref"),
        flashinfer_pr=flags.get("flashinfer_pr"),
        flashinfer_cherry_picks=flags.get("flashinfer_cherry_pick") or None,
        mods=split_csv(flags.get("mod")) or None, add_mods=split_csv(flags.get("add_mod")) or None,
        remove_mods=split_csv(flags.get("no_mod")) or None, max_jobs=flags.get("max_jobs"),
        nvcc_threads=flags.get("nvcc_threads"), image_repo=flags.get("image_repo"),
        tags=flags.get("tag") or None, build_args=flags.get("build_arg"), env=flags.get("env"),
        packages=flags.get("package"), wheelhouse=flags.get("wheelhouse"),
        offline=flags.get("offline"), platform=flags.get("platform"), verify=verify)
    if lock:
        base = lock_overrides(read_lock(lock), target)
        base.update({k: v for k, v in overrides.items() if k not in ("vllm", "flashinfer")})
        return spec_from_dict(base, str(lock))
    return load_spec(target, spec, overrides)


@cli_task(help={"as_json": "print the targets as JSON"})
def targets(c, as_json=False):
    """List the build targets (one YAML file each under targets/)."""
    from edgevllm.model.targets import all_targets
    from edgevllm.kernel.tables import print_targets

    found = all_targets()
    if as_json:
        print(json.dumps([t.model_dump() for t in found], indent=2))
    else:
        print_targets(found)


@cli_task(help={**SPEC_HELP, "out": "folder for the Dockerfile and build context"},
          iterable=ITERABLE)
def render(c, target=None, spec=None, lock=None, out="out/render", vllm_repo=None, vllm_ref=None,
           vllm_pr=None, cherry_pick=None, allow_doc_conflicts=False, flashinfer_version=None,
           flashinfer_repo=None, flashinfer_ref=None, flashinfer_pr=None,
           flashinfer_cherry_pick=None, mod=None, add_mod=None, no_mod=None, max_jobs=None,
           nvcc_threads=None, image_repo=None, tag=None, build_arg=None, env=None, package=None,
           wheelhouse=None, offline=False, platform=None):
    """Render the Dockerfile and build context for inspection (no build, no network)."""
    from edgevllm.build.renderout import render_to

    flags = {k: v for k, v in locals().items() if k not in ("c", "target", "spec", "lock", "out")}
    build_spec = _spec(target, spec, lock, **flags)
    written = render_to(build_spec, Path(out))
    console.info(f"wrote {written}")


@cli_task(help={**SPEC_HELP, "verify": "run arch verify and probe level 1 (default on)",
                "json": "write a JSON summary of the build to this file"},
          iterable=ITERABLE)
def build(c, target=None, spec=None, lock=None, out="out", vllm_repo=None, vllm_ref=None,
          vllm_pr=None, cherry_pick=None, allow_doc_conflicts=False, flashinfer_version=None,
          flashinfer_repo=None, flashinfer_ref=None, flashinfer_pr=None,
          flashinfer_cherry_pick=None, mod=None, add_mod=None, no_mod=None, max_jobs=None,
          nvcc_threads=None, image_repo=None, tag=None, build_arg=None, env=None, package=None,
          wheelhouse=None, offline=False, platform=None, verify=True, json=None):
    """Build an image: sources → Dockerfile → wheels → runtime image → checks → tags."""
    from edgevllm.build.runner import build as run_build, write_summary

    flags = {k: v for k, v in locals().items()
             if k not in ("c", "target", "spec", "lock", "out", "json", "run_build", "write_summary")}
    build_spec = _spec(target, spec, lock, **flags)
    result = run_build(build_spec, Path(out), lock_path=Path(lock) if lock else None)
    if json:
        write_summary(result, Path(json))
    console.step(f"built {', '.join(result.tags)}")
    console.info(f"  lock: {result.lock_path}\n  log:  {result.log_path}")
    print(result.image)


@cli_task(help={"target": "thor | spark", "out": "where builds will write (for the disk check)"})
def doctor(c, target="spark", out="out"):
    """Check that this machine can build for a target: engine, buildx, emulation, disk, git, registry."""
    from edgevllm.build.doctor import run_checks
    from edgevllm.engine.docker import DockerEngine
    from edgevllm.kernel.errors import MissingToolError
    from edgevllm.model.targets import load_target

    findings = run_checks(load_target(target), Path(out), DockerEngine())
    for finding in findings:
        mark = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}[finding.status]
        print(f"{mark}  {finding.name:22} {finding.detail}")
    failed = [f.name for f in findings if f.status == "fail"]
    if failed:
        raise MissingToolError(f"not ready to build for {target}: {', '.join(failed)} (see above)")
