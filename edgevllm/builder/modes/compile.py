"""compile: vLLM (and FlashInfer from source, when asked) compiled for the target's arch list.

Prepares, in order (seconds, before any container): the mods (cheapest check first), the tree
(sources, source patches, build layout, kernel plan, CMake deps: ``builder/tree.py``), the
Dockerfile, the lock, and the compile key: every input of the ``wheels`` stage, so unchanged
inputs reuse the exported wheels. Runs ``wheels`` (exported) then ``runtime``.
"""

from __future__ import annotations

from edgevllm.builder.prepared import Job, PreparedBuild, engine_of, named_contexts
from edgevllm.builder.render import render_dockerfile
from edgevllm.builder.runner import compile_key
from edgevllm.builder.steps import base_image_lock, lock_settings, stage_mods
from edgevllm.builder.tree import PreparedTree, TreeOptions, prepare_tree
from edgevllm.common.secrets import url_without_password
from edgevllm.containers.docker import DockerEngine
from edgevllm.specs.buildspec import EffectiveSpec
from edgevllm.specs.lock import Lock, ModLock, now_utc

name = "compile"
VERSION_PLACEHOLDER = "<from the resolved source>"


def prepare(job: Job) -> PreparedBuild:
    eff = job.eff
    staged = stage_mods(eff, job.ws)
    tree = prepare_tree(eff, job.ws.root, job.locked, TreeOptions(fetch=job.fetch), job.sources)
    version = tree.vllm.pep440_version if tree.fetched else VERSION_PLACEHOLDER
    build_args = {"VLLM_VERSION": version, **eff.spec.build_args}
    dockerfile = render_dockerfile(eff, staged.env, tree.layout)  # rendered once per build
    lock = key = None
    plan = tree.kernel_plan
    units = sum(e.cuda_sources for e in plan.extensions if e.language == "CUDA") if plan else 0
    if tree.fetched:
        lock = make_lock(eff, tree, staged.versions, build_args, engine_of(job))
        key = compile_key(dockerfile, tree.key_inputs(), build_args)
    return PreparedBuild(eff=eff, dockerfile=dockerfile, contexts=named_contexts(job, tree),
                         stages=("wheels", "runtime"), lock=lock, build_args=build_args,
                         compile_key=key, compiles=True, compile_units=units)


def make_lock(eff: EffectiveSpec, tree: PreparedTree, mod_versions: list[dict],
              build_args: dict[str, str], engine: DockerEngine) -> Lock:
    """The lock, whole: built once here and not changed after."""
    images = {
        "build": base_image_lock(eff.images.build, engine),
        "runtime": base_image_lock(eff.images.runtime, engine),
    }
    packages = dict(eff.packages)
    if eff.torch.version:
        packages["torch"] = eff.torch.version
    return Lock(
        created_at=now_utc(),
        target=eff.target.name,
        base_images=images,
        vllm=tree.lock_entry("vllm"),
        flashinfer=tree.lock_entry("flashinfer"),
        packages=packages,
        mods=[ModLock(**m) for m in mod_versions] + tree.patch_locks(),
        build_args=build_args,
        cmake_deps=tree.cmake_deps,
        kernel_plan=tree.plan_summary(),
        settings=lock_settings(eff),
        tags=list(eff.spec.tags),
        compile_cache=url_without_password(eff.spec.compile_cache)
        if eff.spec.compile_cache else None,
    )
