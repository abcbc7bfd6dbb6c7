"""FlashInfer's AOT modules for one model, built into the image (``inv build --aot CONFIG``).

The host decides (``modules.aot_modules`` reads the model's config.json); the image builds:
``stage_aot`` writes the plan and the in-image script (``inimage_build.py``) into the
``edgevllm-aot`` build context, and the template's AOT step (``dockerfiles/_aot.j2``) runs it
after the closure and the mods. On a compile's cross road (``cross_aot``: an emulated image on
this builder) the script runs in the ``aot-build`` stage on the builder's platform instead
(dockerfiles/_aot.j2's build_stage, FROM the compile's build-env, FlashInfer for it from the
``aot-tools`` context: ``builder/cross/context.py`` ``cross_aot_tools``) and the runtime stage
COPYs the
modules and the record. Every module name is checked against FlashInfer's own grammar before it
is staged; it reaches the image as data (plan.json), never as Dockerfile text.
``aot_summary`` turns the in-image record into the build summary's and the label's form.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from edgevllm.builder.aot.modules import aot_modules, read_config
from edgevllm.common.errors import ConfigError
from edgevllm.common.fsutil import atomic_write_json
from edgevllm.specs.buildspec import Builder, EffectiveSpec

AOT_CONTEXT = "edgevllm-aot"
SCRIPT = "inimage_build.py"
PLAN = "plan.json"
# FlashInfer's module URIs: lower-case words, digits and underscores, with its dtype names and
# True/False (``get_batch_prefill_uri``); they become folder and file names in the image.
MODULE_NAME = re.compile(r"[A-Za-z0-9_]{1,200}", re.A)


def aot_plan(config_path: str) -> dict:
    """The plan the in-image step builds: the config's modules, with FlashInfer's arguments."""
    config = read_config(config_path)
    modules = aot_modules(config, source=config_path)
    for module in modules:
        if not MODULE_NAME.fullmatch(module.name):
            raise ConfigError(f"{config_path}: module name {module.name!r} is not a FlashInfer "
                              "module name")
    return {"config": Path(config_path).name, "modules": [m.to_dict() for m in modules]}


def stage_aot(config_path: str, dest: Path) -> list[str]:
    """Write the in-image script and plan.json into ``dest`` (a build context); the names."""
    plan = aot_plan(config_path)
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(Path(__file__).with_name(SCRIPT), dest / SCRIPT)
    atomic_write_json(dest / PLAN, plan)
    return [m["name"] for m in plan["modules"]]


def aot_summary(record: dict | None) -> dict | None:
    """The in-image record as the build summary and the image label keep it."""
    if not record:
        return None
    return {
        "arch_list": record.get("arch_list"),
        "flashinfer": record.get("flashinfer"),
        "config": record.get("config"),
        "seconds": record.get("seconds"),
        # machine: the ELF machine each library was built for (aarch64 from a cross road too)
        "modules": [{"name": m.get("name"), "bytes": m.get("bytes"), "sha256": m.get("sha256"),
                     "machine": m.get("machine")} for m in record.get("modules", [])],
        "notes": (record.get("toolchain") or {}).get("notes", []),
    }


def describe_aot(summary: dict | None) -> list[str]:
    if not summary:
        return []
    lines = [f"flashinfer aot: {len(summary['modules'])} module(s) for "
             f"{summary['arch_list']} in {summary['seconds']}s (from {summary['config']})"]
    lines += [f"  {m['name']}: {m['bytes'] / 1e6:.1f} MB, {m.get('machine') or '?'}, "
              f"sha256 {m['sha256'][:16]}" for m in summary["modules"]]
    lines += [f"  note: {note}" for note in summary["notes"]]
    return lines


def cross_aot(eff: EffectiveSpec) -> bool:
    """Whether ``--aot`` builds its modules on the builder's own platform (the ``aot-build``
    stage of dockerfiles/compile.Dockerfile.j2, FROM the cross road's build-env) and the image
    COPYs them: a compile on the cross road (``EffectiveSpec.toolchain``, the compile's own
    rule) with PyPI's FlashInfer, whose build-platform wheel the build Python installs."""
    return (eff.spec.aot is not None and eff.record.compiles
            and eff.toolchain == "cross" and eff.cross is not None
            and eff.spec.flashinfer.source is None)


def aot_road(eff: EffectiveSpec, builder: Builder | None) -> str:
    """Where the AOT step runs on this builder, for preflight (``Builder.emulates``, the
    fact the compile's toolchain rule reads too); where the cross road is not taken, why."""
    platform = eff.platform
    if builder is None or not builder.emulates(platform):
        return "in the image, FlashInfer's JIT with the image's own nvcc (native)"
    if cross_aot(eff):
        assert eff.cross is not None
        return (f"cross: on this {builder.arch} builder's own platform ({eff.cross.build_platform}"
                f", stage aot-build: the build Python's FlashInfer and nvcc, "
                f"{eff.cross.host_compiler} for {platform}); the modules copied into the image")
    return (f"in the image under emulation ({platform} on this {builder.arch} builder: nvcc "
            f"runs about 10x slower than natively): {no_cross_reason(eff)}")


def no_cross_reason(eff: EffectiveSpec) -> str:
    """Why an emulated image's AOT step takes no cross road (one clause)."""
    if not eff.record.compiles:
        return (f"the {eff.mode} mode has no build stage on the builder's platform; the AOT "
                "step's cross road is the compile's (--compile)")
    if eff.spec.flashinfer.source is not None:
        return ("FlashInfer from source is compiled for the target only: the build platform "
                "has no FlashInfer of that tree to run the JIT")
    return f"the compile's toolchain is {eff.toolchain} ({eff.toolchain_reason})"
