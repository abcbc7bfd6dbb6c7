"""The steps of one build, in order. ``build()`` is the entry point; each step is a function.

1. sources   resolve refs/PRs to SHAs, apply cherry-picks, then source patches (seconds;
             fails early)
2. mods      select and stage the mods for the target (fails early on unknown/conflicting mods)
3. lock      every input pinned; the immutable tag derives from it
4. render    the Dockerfile and the named build contexts
5. wheels    compile stage, exported to the host (skipped when its inputs did not change)
6. runtime   the image, with wheels bind-mounted from the wheel folder (no wheel in a layer)
7. checks    arch verify + probe level 1 (unless --no-verify, which is recorded)
8. labels    outcomes as labels; final tags only when the checks passed
"""

from __future__ import annotations

import json
from pathlib import Path

from edgevllm.builder.render import render_dockerfile
from edgevllm.builder.runner import (
    BuildResult,
    BuildRunner,
    Workspace,
    compile_key,
    copy_lock_beside,
    export_wheels,
    preflight,
    relabel,
    timestamp,
    with_options,
    write_context,
)
from edgevllm.builder.steps import (
    LOCK_FILE_IN_IMAGE,
    base_image_lock,
    build_layout,
    checks_or_skip,
    exported_tree,
    lock_settings,
    outcome_labels,
    prime_publish_cache,
    print_mods,
    read_mods_record,
    stage_mods,
    static_labels,
)
from edgevllm.common import console
from edgevllm.common.errors import BuildError
from edgevllm.containers.docker import BuildOptions, DockerEngine
from edgevllm.sources.prepare import (
    PreparedSource,
    SourceRequest,
    prepare_sources,
    source_request,
    summarize,
)
from edgevllm.specs.buildspec import BuildSpec, EffectiveSpec, resolve
from edgevllm.specs.lock import (
    Lock,
    ModLock,
    image_tag,
    label_value,
    now_utc,
    read_lock,
    write_lock,
)


def prepare_all_sources(
    eff: EffectiveSpec, ws: Workspace, locked: Lock | None
) -> dict[str, PreparedSource]:
    """Step 1: every source tree, resolved and exported under ws.root/src/<name>."""
    names = ["vllm"] + (["flashinfer"] if eff.spec.flashinfer.source else [])
    prepared = {}
    for name in names:
        entry = locked.sources().get(name) if locked else None
        request = SourceRequest.from_lock_entry(entry) if entry else source_request(eff, name)
        console.step(f"sources: {'; '.join(request.plan())}")
        prepared[name] = prepare_sources(request, ws.root / "src" / name)
        for line in summarize(prepared[name]):
            console.info(f"  {line}")
    return prepared


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


def make_lock(
    eff: EffectiveSpec,
    prepared: dict[str, PreparedSource],
    staged,
    patches: list[dict],
    build_args: dict[str, str],
    engine: DockerEngine,
) -> Lock:
    images = {
        "build": base_image_lock(eff.images.build, engine),
        "runtime": base_image_lock(eff.images.runtime, engine),
    }
    packages = dict(eff.packages)
    if eff.torch.version:
        packages["torch"] = eff.torch.version
    mods = [ModLock(**m) for m in staged.versions]
    mods += [
        ModLock(name=f"patch:{p['name']}", version=str(p.get("version", "1"))) for p in patches
    ]
    return Lock(
        created_at=now_utc(),
        target=eff.target.name,
        base_images=images,
        vllm=prepared["vllm"].to_lock_entry(),
        flashinfer=prepared["flashinfer"].to_lock_entry() if "flashinfer" in prepared else None,
        packages=packages,
        mods=mods,
        build_args=build_args,
        settings=lock_settings(eff),
        tags=list(eff.spec.tags),
    )


def base_options(
    eff: EffectiveSpec,
    ws: Workspace,
    prepared: dict[str, PreparedSource],
    build_args: dict[str, str],
) -> BuildOptions:
    contexts = {
        "vllm-src": str(prepared["vllm"].tree_dir),
        "cmake-deps": str(ws.root / "deps"),
        "edgevllm-mods": str(ws.context / "edgevllm-mods"),
        "edgevllm-meta": str(ws.context / "edgevllm-meta"),
    }
    if "flashinfer" in prepared:
        contexts["flashinfer-src"] = str(prepared["flashinfer"].tree_dir)
    if eff.spec.wheelhouse:
        contexts["wheelhouse"] = str(Path(eff.spec.wheelhouse).resolve())
    return BuildOptions(
        context=ws.context,
        dockerfile=ws.context / "Dockerfile",
        platform=eff.platform,
        build_args=build_args,
        build_contexts=contexts,
    )


def prepare(
    eff: EffectiveSpec,
    ws: Workspace,
    engine: DockerEngine,
    locked: Lock | None,
    prepared: dict[str, PreparedSource] | None = None,
):
    """Steps 1-3, all in seconds: mods (cheapest check first), sources (unless already
    ``prepared``: the mode check needed them), patches, the lock."""
    staged = stage_mods(eff, ws)
    prepared = prepared or prepare_all_sources(eff, ws, locked)
    patches = apply_patches(eff, prepared["vllm"])
    layout = build_layout(prepared["vllm"])
    kernel_plan, deps = kernel_preflight(eff, ws, prepared["vllm"], locked)
    build_args = {"VLLM_VERSION": prepared["vllm"].pep440_version, **eff.spec.build_args}
    lock = make_lock(eff, prepared, staged, patches, build_args, engine)
    lock.cmake_deps, lock.kernel_plan = deps, kernel_plan.summary()
    dockerfile = render_dockerfile(eff, staged.env, layout)  # rendered once per build
    key = compile_key(
        dockerfile,
        {n: p.tree_hash for n, p in prepared.items()}
        | {f"cmake-dep:{n}": d.tree for n, d in deps.items()}
        | {"patches": json.dumps(patches, sort_keys=True)},
        build_args,
    )
    return prepared, staged, lock, build_args, key, dockerfile


def kernel_preflight(
    eff: EffectiveSpec, ws: Workspace, prepared: PreparedSource, locked: Lock | None
):
    """Step 1b, seconds: the kernel plan from the tree's own CMake (a needed group that gets no
    code fails here, naming the CMake line), then every repository that CMake would clone,
    fetched on the host by commit into ws.root/deps (the "cmake-deps" build context)."""
    from edgevllm.sources.cmakedeps import fetch_cmake_deps
    from edgevllm.sources.cmakedeps import summarize as deps_summary
    from edgevllm.sources.plan import check_rust_env, plan_for_target

    plan = plan_for_target(
        exported_tree(prepared),
        eff.target,
        torch_version=eff.torch.version or "",
        nvcc_threads=eff.nvcc_threads,
    )
    check_rust_env(plan, eff.env)
    none = [g.key for g in plan.groups if g.kind == "none"]
    console.info(
        f"  kernel plan: CUDA_ARCHS {';'.join(plan.cuda_archs)}; {len(plan.groups)} "
        f"groups, none for {eff.target.cuda_arch}: {', '.join(none) or '-'}"
    )
    deps = fetch_cmake_deps(plan.deps, ws.root / "deps", locked.cmake_deps if locked else None)
    for line in deps_summary(deps):
        console.info(f"  {line}")
    return plan, deps


def build(
    spec: BuildSpec, out: Path, engine: DockerEngine | None = None, lock_path: Path | None = None
) -> BuildResult:
    """Build (or rebuild from a lock) one image; returns where everything went."""
    engine = engine or DockerEngine()
    eff = resolve(spec)
    ws = Workspace(out / eff.target.name)
    preflight(eff, engine, out)
    result = run(eff, ws, engine, lock_path=lock_path)
    if eff.spec.publish_cache:
        result.publish_cache = prime_publish_cache(engine, result.image)
    return result


def precompiled_or_sources(
    eff: EffectiveSpec, ws: Workspace, engine: DockerEngine, locked: Lock | None
):
    """A Python-only change (or --mode precompiled) builds over a release's kernels
    (builder/mode_precompiled.py) → (eff, None, result);
    otherwise (eff, prepared sources or None, None)
    and the compile goes on."""
    from edgevllm.builder import mode_precompiled as precompiled

    if not precompiled.wants_tree_check(eff):
        return eff, None, None
    prepared = prepare_all_sources(eff, ws, locked)
    eff, check = precompiled.decide(eff, prepared)
    if eff.mode != "precompiled":
        return eff, prepared, None
    return eff, prepared, precompiled.run_precompiled(eff, ws, engine, locked, prepared, check)


def run(
    eff: EffectiveSpec, ws: Workspace, engine: DockerEngine, lock_path: Path | None = None
) -> BuildResult:
    locked = read_lock(lock_path) if lock_path else None
    if locked and locked.target and locked.target != eff.target.name:
        raise BuildError(
            f"{lock_path}: the lock is for target '{locked.target}', not "
            f"'{eff.target.name}'; drop --target or use the matching lock"
        )
    if eff.mode == "prebuilt":
        from edgevllm.builder.mode_prebuilt import run_prebuilt

        return run_prebuilt(eff, ws, engine, locked)
    eff, prepared, result = precompiled_or_sources(eff, ws, engine, locked)
    if result is not None:
        return result
    console.step(f"mode: {eff.mode} ({eff.mode_reason})")
    prepared, staged, lock, build_args, key, dockerfile = prepare(eff, ws, engine, locked, prepared)
    tag = image_tag(lock)
    repo = eff.spec.image_repo
    final_tags = [f"{repo}:{tag}"] + [t if ":" in t else f"{repo}:{t}" for t in eff.spec.tags]
    console.step(f"image {final_tags[0]}")
    write_context(ws, dockerfile, {LOCK_FILE_IN_IMAGE: label_value(lock) + "\n"})
    lock_file = write_lock(lock, ws.root / f"{tag}.lock.json")

    runner = BuildRunner(engine, ws.logs / f"build-{timestamp()}.log")
    options = base_options(eff, ws, prepared, build_args)
    wheels = ws.wheels(key)
    compiled = export_wheels(runner, options, wheels)
    candidate = f"{repo}:{tag}-unverified"
    runner.run(
        with_options(
            options,
            target="runtime",
            tags=[candidate],
            build_contexts={**options.build_contexts, "wheels": str(wheels)},
            labels=static_labels(eff, lock, tag),
        ),
        "runtime image",
    )
    record = read_mods_record(engine, candidate)
    print_mods(record)
    verify, probe = checks_or_skip(eff, engine, candidate, ws)
    if not verify.get("skipped"):
        verify["plan"] = plan_against_binaries(lock, ws.root / "verify.json")
    image_id = relabel(
        runner,
        engine,
        candidate,
        outcome_labels(record, verify, probe),
        final_tags,
        eff.platform,
        ws.context,
    )
    engine.remove_image(candidate)
    copy_lock_beside(lock_file, ws.root / "latest.lock.json")
    return BuildResult(
        image=final_tags[0],
        tags=final_tags,
        image_id=image_id,
        lock_path=lock_file,
        log_path=runner.log_path,
        wheels_dir=wheels,
        compiled=compiled,
        mods_record=record,
        verify=verify,
        probe=probe,
    )


def plan_against_binaries(lock: Lock, verify_json: Path) -> list[str]:
    """ "plan: 12.1a; binary: sm_121a ✔" for each planned extension that verify scanned."""
    from edgevllm.sources.plan import compare_with_binaries

    planned = {n: e["arches"] for n, e in lock.kernel_plan.get("extensions", {}).items()}
    try:
        libraries = json.loads(verify_json.read_text()).get("libraries", [])
    except (OSError, ValueError):
        return []
    found = {lib["path"]: lib.get("sass", []) + lib.get("ptx", []) for lib in libraries}
    lines = []
    for ext, text, agrees in compare_with_binaries(planned, found):
        lines.append(f"{ext}: {text} {'✔' if agrees else '✘ differs from the plan'}")
        console.info(f"  {lines[-1]}")
    return lines
