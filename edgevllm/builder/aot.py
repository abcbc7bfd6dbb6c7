"""FlashInfer's AOT modules for one model, built into the image (``inv build --aot CONFIG``).

The host decides (``aotlist.aot_modules`` reads the model's config.json); the image builds:
``stage_aot`` writes the plan and the in-image script (``aot_inimage.py``) into the
``edgevllm-aot`` build context, and the template's AOT step (``dockerfiles/_aot.j2``) runs it
after the closure and the mods. Every module name is checked against FlashInfer's own grammar
before it is staged; it reaches the image as data (plan.json), never as Dockerfile text.
``aot_summary`` turns the in-image record into the build summary's and the label's form.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from edgevllm.builder.aotlist import aot_modules, read_config
from edgevllm.common.errors import ConfigError
from edgevllm.common.fsutil import atomic_write_json
from edgevllm.specs.buildspec import Builder

AOT_CONTEXT = "edgevllm-aot"
SCRIPT = "aot_inimage.py"
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
        "modules": [{"name": m.get("name"), "bytes": m.get("bytes"), "sha256": m.get("sha256")}
                    for m in record.get("modules", [])],
        "notes": (record.get("toolchain") or {}).get("notes", []),
    }


def describe_aot(summary: dict | None) -> list[str]:
    if not summary:
        return []
    lines = [f"flashinfer aot: {len(summary['modules'])} module(s) for "
             f"{summary['arch_list']} in {summary['seconds']}s (from {summary['config']})"]
    lines += [f"  {m['name']}: {m['bytes'] / 1e6:.1f} MB, sha256 {m['sha256'][:16]}"
              for m in summary["modules"]]
    lines += [f"  note: {note}" for note in summary["notes"]]
    return lines


def aot_road(platform: str, builder: Builder | None) -> str:
    """Where the AOT step runs on this builder, for preflight (``Builder.emulates``, the
    fact the compile's toolchain rule reads too)."""
    if builder is None or not builder.emulates(platform):
        return "in the image, FlashInfer's JIT with the image's own nvcc (native)"
    return (f"in the image under emulation ({platform} on this {builder.arch} builder: nvcc "
            "runs about 10x slower than natively); inv build has no cross road for the AOT "
            "step yet (docs/first-start.md)")
