"""Tasks: targets, render, build (the main job)."""

from __future__ import annotations

import json
from pathlib import Path

from edgevllm.cli._common import cli_task, flag_task
from edgevllm.cli.buildmany import ENGINE_HELP
from edgevllm.cli.flags import BUILD_FLAGS, OUT_FLAG, param, spec_overrides
from edgevllm.common import console


def spec_from_flags(values: dict, verify: bool = True):
    """The build spec that ``--spec``/``--lock``/``--target`` and the other flags describe."""
    from edgevllm.builder.distpool.client import refuse_stray_token

    spec = _spec_from_flags(values, verify)
    refuse_stray_token(spec)
    return spec


def _spec_from_flags(values: dict, verify: bool = True):
    from edgevllm.specs.buildspec import load_spec, lock_overrides, spec_from_dict
    from edgevllm.specs.lock import read_lock

    overrides = spec_overrides(_with_aot_config(aot_alias(_with_mod_names(values))))
    if not verify:
        overrides["verify"] = False
    target, spec, lock = values.get("target"), values.get("spec"), values.get("lock")
    if values.get("recipe"):
        return _recipe_spec(values["recipe"], target, spec, lock, overrides)
    if not (target or spec or lock):
        target = _device_target()
    if lock:
        base = lock_overrides(read_lock(lock), target)
        base.update({k: v for k, v in overrides.items() if k not in ("vllm", "flashinfer")})
        if "mode" in overrides:  # --compile / --mode: asked for, not only the lock's
            base["mode_from_lock"] = False
        return spec_from_dict(base, str(lock))
    return load_spec(target, spec, overrides)


def _with_mod_names(values: dict) -> dict:
    """``--add-mod PATH`` of an eugr mod folder: imported into the user's mods, by its name."""
    from edgevllm.common.kv import split_csv

    given = split_csv(values.get("add_mod") or [])
    if not any("/" in item or Path(item).is_dir() for item in given):
        return values
    from edgevllm.common.paths import user_data_dir
    from edgevllm.mods.eugr import import_eugr_mod
    from edgevllm.specs.targets import all_targets

    targets = [t.name for t in all_targets()]
    names = [import_eugr_mod(Path(item), user_data_dir("mods"), targets).name
             if "/" in item or Path(item).is_dir() else item for item in given]
    for item, name in zip(given, names, strict=True):
        if item != name:
            console.info(f"eugr mod {item} → mod {name} (runs at build time)")
    return {**values, "add_mod": names}


def aot_alias(values: dict) -> dict:
    """``--warm X`` (the flag's name before) is ``--aot X``, said in one line."""
    old = values.get("warm")
    if not old:
        return values
    from edgevllm.common.errors import ConfigError

    if values.get("aot") and values["aot"] != old:
        raise ConfigError(f"--warm {old} and --aot {values['aot']}: --warm is the old name of "
                          "--aot; give --aot alone")
    console.warn("--warm is now --aot (FlashInfer's AOT modules built into the image; "
                 "inv warm harvests a running server's JIT caches)")
    return {**values, "aot": old, "warm": None}


def _with_aot_config(values: dict) -> dict:
    """``--aot recipe:NAME`` → the recipe's model's config.json in the local Hugging Face cache;
    ``--aot PATH`` → that file, absolute (the spec is read from elsewhere than the shell)."""
    aot = values.get("aot")
    if not aot:
        return values
    from edgevllm.common.errors import ConfigError

    if aot.startswith("recipe:"):
        path = _recipe_model_config(aot.removeprefix("recipe:"))
    else:
        path = Path(aot).expanduser().absolute()
    if not path.is_file():
        raise ConfigError(f"--aot {aot}: {path} is not a file; give a model's config.json")
    from edgevllm.builder.aot.modules import read_config

    read_config(path)  # a broken config is one line here, before preflight and any download
    return {**values, "aot": str(path)}


def _recipe_model_config(name: str) -> Path:
    from huggingface_hub import try_to_load_from_cache

    from edgevllm.common.errors import ConfigError
    from edgevllm.common.paths import host_hf_cache
    from edgevllm.serve.recipe.load import load_recipe

    model = load_recipe(name).recipe.model
    found = try_to_load_from_cache(model, "config.json", cache_dir=str(host_hf_cache() / "hub"))
    if not isinstance(found, str):
        raise ConfigError(f"--aot recipe:{name}: no local copy of {model}'s config.json under "
                          f"{host_hf_cache()}; run 'inv model-fetch {name}' first, or give the "
                          "config.json's path")
    return Path(found)


def _device_target() -> str | None:
    """No --target, --spec or --lock: on a Thor or a Spark, build for it (and say so)."""
    from edgevllm.specs.targets import device_target

    found = device_target()
    if found:
        console.info(f"this machine is {found[1]}: target {found[0]}")
    return found[0] if found else None


def _recipe_spec(recipe: str, target, spec, lock, overrides: dict):
    """The recipe's needs over the user's ``--spec`` (where torch and the bases come from): the
    recipe's fields win only where it says something (its lists add to the spec's), and the
    command line wins over both. A lock is exact: it takes no recipe."""
    from edgevllm.common.errors import SpecError
    from edgevllm.common.schema import read_yaml
    from edgevllm.serve.recipe.build import recipe_spec_fields, with_overrides
    from edgevllm.specs.buildspec import spec_from_dict

    if lock:
        raise SpecError("--recipe and --lock: a lock rebuilds exactly what it records; give one "
                        "of them (or --recipe with --spec)")
    mine = read_yaml(Path(spec), SpecError) if spec else {}
    if not isinstance(mine, dict):
        raise SpecError(f"{spec}: expected a mapping of spec fields")
    fields = recipe_spec_fields(recipe, target or mine.get("target"))
    combined = with_overrides(mine, fields)
    if mine.get("probe_required") and fields.get("probe_required"):
        combined["probe_required"] = list(dict.fromkeys([*mine["probe_required"],
                                                         *fields["probe_required"]]))
    source = f"recipe {recipe}" + (f" over {spec}" if spec else "")
    return spec_from_dict(with_overrides(combined, overrides), source)


@cli_task(help={"as_json": "print the targets as JSON"})
def targets(c, as_json=False):
    """List the build targets (one YAML file each under targets/)."""
    from edgevllm.common.tables import print_targets
    from edgevllm.specs.targets import all_targets

    found = all_targets()
    if as_json:
        print(json.dumps([t.model_dump() for t in found], indent=2))
    else:
        print_targets(found)


@flag_task(
    BUILD_FLAGS,
    param("out", "out/render"),
    param("force", False),
    help_extra={"out": "folder for the Dockerfile and build context",
                "force": "write into an --out folder that holds files edgevllm did not "
                         "write (they stay)"},
)
def render(c, **values):
    """Render the build's plan: the Dockerfile and build-plan.json it would run (no network)."""
    from edgevllm.builder.renderout import render_to

    lock = values.get("lock")
    written = render_to(spec_from_flags(values), Path(values.get("out") or "out/render"),
                        force=bool(values.get("force")), lock_path=Path(lock) if lock else None)
    console.info(f"wrote {written}")


@flag_task(
    BUILD_FLAGS,
    param("out", "out"),
    param("verify", True),
    param("json"),
    param("engine"),
    param("check_reproducible", False),
    help_extra={
        "out": OUT_FLAG.help,
        "verify": "run arch verify and probe level 1 (default on)",
        "json": "write a JSON summary of the build to this file",
        "engine": ENGINE_HELP,
        "check_reproducible": "build (--reproducible), then build the lock again with every "
                              "step rerun and compare the images layer by layer; one line "
                              "names the first differing file (docs/reproducible.md)",
    },
    iterable_extra=("engine",),
)
def build(c, **values):
    """Build an image: sources → Dockerfile → wheels → runtime image → checks → tags.
    --target a,b builds several at once (each on its --engine)."""
    from edgevllm.builder.pipeline import build as run_build
    from edgevllm.builder.runner import write_summary
    from edgevllm.cli.buildmany import build_many, engine_of, engines_for
    from edgevllm.common.kv import split_csv

    values = aot_alias(values)  # once, before a build per target would say it again
    targets = split_csv([values["target"]] if values.get("target") else [])
    if len(set(targets)) < len(targets):  # two builds of one target would share its out folder
        from edgevllm.common.errors import ConfigError

        raise ConfigError(f"--target {values['target']}: names a target twice; name each once")
    check = bool(values.pop("check_reproducible", False))
    if check and len(targets) > 1:
        from edgevllm.common.errors import ConfigError

        raise ConfigError("--check-reproducible builds one target twice; give one --target")
    if len(targets) > 1:
        return build_many(values, targets, engines_for(values.get("engine"), targets))
    if check:
        values["reproducible"] = True
    build_spec = spec_from_flags(values, verify=values.get("verify", True))
    if build_spec.wheel_cache:  # its grammar before preflight, not after the disk check
        from edgevllm.image.wheelcache import check_ref

        check_ref(build_spec.wheel_cache)
    engines = engines_for(values.get("engine"), [build_spec.target])
    lock = values.get("lock")
    result = run_build(build_spec, Path(values.get("out") or "out"),
                       engine=engine_of(engines, build_spec.target),
                       lock_path=Path(lock) if lock else None)
    if check:
        _check_reproducible(values, build_spec, result, engine_of(engines, build_spec.target))
    if values.get("json"):
        write_summary(result, Path(values["json"]))
    console.step(f"built {', '.join(result.tags)}")
    console.info(f"  lock: {result.lock_path}\n  log:  {result.log_path}")
    if result.compile_cache:
        from edgevllm.builder.buildlog import describe_compile_cache

        console.info(f"  {describe_compile_cache(result.compile_cache)}")
    print(result.image)


# What a lock does not record but the image's tags and checks follow: the first build's
# (from --spec, or the flags), so the rebuild checks and tags as it did.
KEPT_FOR_REBUILD = ("verify", "probe_required", "image_repo", "tags")


def _check_reproducible(values: dict, spec, first, engine) -> None:
    """--check-reproducible: the first build's lock built again, every step rerun, compared."""
    from edgevllm.builder.pipeline import build as run_build
    from edgevllm.builder.reprocheck import check_rebuild

    def rebuild(lock: Path):
        again = spec_from_flags({**values, "lock": str(lock)})
        again = again.model_copy(update={**{k: getattr(spec, k) for k in KEPT_FOR_REBUILD},
                                         "rerun_steps": True, "reproducible": True})
        return run_build(again, Path(values.get("out") or "out"), engine=engine, lock_path=lock)

    check_rebuild(engine, first, rebuild)


@cli_task(help={"target": "thor | spark", "out": "where builds will write (for the disk check)",
                "nodes": "check these cluster nodes' RDMA instead: engines, head first "
                         "(local,ssh://me@spark2)",
                "image": "with --nodes: the image the cluster runs (default edgevllm/vllm:TARGET)",
                "engine": "check this engine, as inv build --engine would use it"})
def doctor(c, target="spark", out="out", nodes=None, image=None, engine=None):
    """Check that this machine can build for a target: engine, buildx, emulation, disk, git,
    registry. With --nodes: that each cluster node reaches RDMA, and NCCL's transport."""
    if nodes:
        from edgevllm.cli.recipes import doctor_nodes

        doctor_nodes(target, nodes, image or f"edgevllm/vllm:{target}")
        return
    from edgevllm.builder.doctor import run_checks
    from edgevllm.common.errors import MissingToolError
    from edgevllm.containers.docker import DockerEngine
    from edgevllm.specs.targets import load_target

    findings = run_checks(load_target(target), Path(out), DockerEngine.named(engine))
    for finding in findings:
        mark = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}[finding.status]
        print(f"{mark}  {finding.name:22} {finding.detail}")
    failed = [f.name for f in findings if f.status == "fail"]
    if failed:
        raise MissingToolError(f"not ready to build for {target}: {', '.join(failed)} (see above)")
