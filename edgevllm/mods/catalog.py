"""Mods (host side): the catalog of mods, listing, selection for a target, conflict checks,
staging.

A mod is a folder ``mods/<name>/`` with ``manifest.yaml`` and its data files (the manifest's
schema and loading: ``mods/manifest.py``). The selected mods are resolved into ``plan.json``,
which the self-contained applier (``edgevllm/mods/inimage_applier.py``) executes inside the image
at build time, or on any Python environment through ``inv mods-apply``. See docs/mods.md.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from edgevllm.common.dataload import load_json
from edgevllm.common.errors import ManifestError, ModConflictError, ModNotForTargetError
from edgevllm.common.fdtree import copy_tree
from edgevllm.common.fsutil import atomic_dir, atomic_write_json
from edgevllm.mods.downloads import Pins, Wanted, fetch_downloads
from edgevllm.mods.manifest import (
    DistFilesStep,
    EditStep,
    Mod,
    PipInstallStep,
    ScriptStep,
    load_mod,
)
from edgevllm.specs.modselect import check_mod_names, mod_folders
from edgevllm.specs.outcomes import FAILED


@dataclass
class StagedMods:
    names: list[str]
    versions: list[dict]  # [{name, version}] for the lock
    env: dict[str, str]
    pip_packages: list[str] = field(default_factory=list)  # what the wheelhouse should hold
    plan_path: Path | None = None


# --- the catalog -------------------------------------------------------------------------------
def all_mods() -> list[Mod]:
    return [load_mod(folder) for folder in mod_folders().values()]


def get_mod(name: str) -> Mod:
    folders = mod_folders()
    check_mod_names([name], folders)
    return load_mod(folders[name])


# --- selection ---------------------------------------------------------------------------------
def select_mods(names: list[str], target_name: str) -> list[Mod]:
    """Load the named mods in order, check they support the target and do not conflict."""
    mods = [get_mod(name) for name in dict.fromkeys(names)]
    for mod in mods:
        if target_name not in mod.manifest.targets:
            raise ModNotForTargetError(
                f"mod {mod.name} does not support target '{target_name}' (targets: "
                f"{', '.join(mod.manifest.targets)}); drop it with --no-mod {mod.name}")
    check_conflicts(mods)
    return mods


def _edit_keys(mod: Mod) -> list[tuple[str, str | None, str]]:
    keys: list[tuple[str, str | None, str]] = []
    for step in mod.manifest.steps:
        if isinstance(step, EditStep):
            if step.diff:
                text = (mod.folder / step.diff).read_text()
                old = "\n".join(line[1:] for line in text.splitlines()
                                if line.startswith(("-", " ")) and not line.startswith("---"))
                keys.append((step.path, None, old))
            for rep in step.replacements:
                keys.append((step.path, rep.in_class, rep.anchor))
    return keys


def _overlap(a: tuple, b: tuple) -> bool:
    (path_a, cls_a, text_a), (path_b, cls_b, text_b) = a, b
    if path_a != path_b or (cls_a and cls_b and cls_a != cls_b):
        return False
    return text_a.strip() in text_b or text_b.strip() in text_a


def check_conflicts(mods: list[Mod]) -> None:
    """Two mods editing the same anchor (or overlapping text) of one file, or setting one env
    var to different values, cannot both be applied: the second would fail or undo the first."""
    for i, first in enumerate(mods):
        for second in mods[i + 1:]:
            for key_a in _edit_keys(first):
                for key_b in _edit_keys(second):
                    if _overlap(key_a, key_b):
                        line = key_a[2].strip().splitlines()[0][:60]
                        raise ModConflictError(
                            f"mod {second.name} edits the same anchor as mod {first.name} in "
                            f"{key_a[0]} ('{line}'); select only one of them (--no-mod)")
            for var, value in second.env.items():
                if var in first.env and first.env[var] != value:
                    raise ModConflictError(
                        f"mod {second.name} sets {var}={value} but mod {first.name} sets "
                        f"{var}={first.env[var]}; select only one of them (--no-mod)")


# --- plan and staging --------------------------------------------------------------------------
def plan_for(mods: list[Mod], target_name: str, pins: Pins | None = None) -> dict:
    """The JSON plan the applier runs: concrete steps, data paths relative to the plan folder,
    each download with the sha256 the build pinned (``pins``)."""
    entries = []
    for mod in mods:
        steps = []
        for step in mod.manifest.steps:
            data = step.model_dump(exclude_none=True)
            for key in ("source", "diff"):
                if key in data:
                    data[key] = f"{mod.name}/{data[key]}"
            for download in data.get("downloads", []):
                if download["url"] in (pins or {}).get(mod.name, {}):
                    download["sha256"] = (pins or {})[mod.name][download["url"]]
            steps.append(data)
        entries.append({"name": mod.name, "version": mod.lock_version(),
                        "description": mod.manifest.description.strip(),
                        "applies_to": mod.manifest.applies_to, "steps": steps})
    return {"format": 1, "target": target_name, "mods": entries}


def stage_mods(mod_names: list[str], target_name: str, dest: Path, locked: Pins | None = None,
               fetch: bool = True) -> StagedMods:
    """Write the applier, plan.json and the mods' data files into ``dest`` (a build context),
    each download fetched and pinned (``locked``: a lock's pins; ``fetch`` off: none fetched)."""
    mods = select_mods(mod_names, target_name)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(Path(__file__).with_name("inimage_applier.py"), dest / "inimage_applier.py")
    for mod in mods:
        with atomic_dir(dest / mod.name) as tmp:  # an older copy goes only if edgevllm wrote it
            copy_tree(mod.folder, tmp, what=f"mod {mod.name}", error=ManifestError,
                      skip=("__pycache__",))  # others' folder: by descriptors, no link followed
    wanted = [Wanted(mod.name, d.url, d.file, d.sha256) for mod in mods
              for step in mod.manifest.steps if isinstance(step, ScriptStep)
              for d in step.downloads]
    pins = fetch_downloads(wanted, dest, locked, fetch)
    plan_path = dest / "plan.json"
    atomic_write_json(plan_path, plan_for(mods, target_name, pins))
    env: dict[str, str] = {}
    for mod in mods:
        env.update(mod.env)
    return StagedMods(names=[m.name for m in mods],
                      versions=[{"name": m.name, "version": m.lock_version(),
                                 **({"downloads": pins[m.name]} if m.name in pins else {})}
                                for m in mods],
                      env=env, pip_packages=_pip_packages(mods), plan_path=plan_path)


def _pip_packages(mods: list[Mod]) -> list[str]:
    wanted: list[str] = []
    for mod in mods:
        for step in mod.manifest.steps:
            if isinstance(step, PipInstallStep):
                wanted += step.requirements
            elif isinstance(step, DistFilesStep):
                wanted.append(f"{step.package}=={step.version}" if step.version else step.package)
    return list(dict.fromkeys(wanted))


# --- listing -----------------------------------------------------------------------------------
def list_rows(target_name: str | None = None) -> list[dict]:
    rows = []
    for mod in all_mods():
        if target_name and target_name not in mod.manifest.targets:
            continue
        rows.append({
            "name": mod.name, "version": mod.lock_version(), "targets": mod.manifest.targets,
            "applies_to": mod.manifest.applies_to, "env": mod.env,
            "steps": [s.kind for s in mod.manifest.steps], "tuned": mod.manifest.tuned,
            "description": _summary(mod.manifest.description),
        })
    return rows


def _summary(text: str, limit: int = 72) -> str:
    """The description up to its first ': ' or '. ' (the part a table has room for)."""
    flat = " ".join(text.split())
    cut = min([i for i in (flat.find(": "), flat.find(". ")) if i > 0] or [len(flat)])
    flat = flat[:cut]
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def format_rows(rows: list[dict]) -> str:
    table = [("NAME", "TARGETS", "APPLIES TO", "DESCRIPTION")]
    for row in rows:
        ranges = "; ".join(f"{k} {v}" for k, v in row["applies_to"].items()) or "any"
        table.append((row["name"], ",".join(row["targets"]), ranges, row["description"]))
    widths = [max(len(r[i]) for r in table) for i in range(3)]
    return "\n".join(f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}"
                     for r in table)


def record_summary(record: dict) -> str:
    """``name=outcome,...`` from an applier record (for a label or a log line)."""
    return ",".join(f"{m['name']}={m['outcome']}" for m in record.get("mods", []))


def read_record(path: Path) -> dict:
    record = load_json(Path(path).read_bytes(), str(path), ManifestError)
    if not isinstance(record, dict):
        raise ManifestError(f"{path}: not a mods record (a JSON object)")
    return record


# --- applying to an existing environment (inv mods-apply) --------------------------------------
def default_mod_names(target_name: str) -> list[str]:
    from edgevllm.specs.targets import load_target

    return list(load_target(target_name).default_mods)


def apply_to_environment(target_name: str, mod_names: list[str], site_packages: list[Path],
                         python: str | None = None, json_out: Path | None = None,
                         find_links: Sequence[str] = (), no_index: bool = False
                         ) -> tuple[dict, str]:
    """Stage the mods in a temporary folder and run the applier with ``python`` (default: this
    interpreter) on ``site_packages`` (default: that interpreter's own). Returns (record, table);
    raises ModFailedError naming the first failed mod after the record is written."""
    import subprocess
    import sys
    import tempfile

    from edgevllm.common.errors import ModError, ModFailedError

    names = mod_names or default_mod_names(target_name)
    with tempfile.TemporaryDirectory(prefix="edgevllm-mods-") as tmp:
        staged = stage_mods(names, target_name, Path(tmp) / "stage")
        record_path = Path(tmp) / "record.json"
        argv = [python or sys.executable, str(Path(tmp) / "stage" / "inimage_applier.py"), "apply",
                "--plan", str(staged.plan_path), "--record", str(record_path)]
        if json_out:
            argv += ["--env-file", str(Path(json_out).with_suffix(".env"))]
        else:
            argv.append("--no-env-file")
        for folder in site_packages:
            argv += ["--site-packages", str(folder)]
        for link in find_links:
            argv += ["--pip-find-links", str(link)]
        if no_index:
            argv.append("--pip-no-index")
        try:
            proc = subprocess.run(argv, capture_output=True, text=True)
        except OSError as exc:
            raise ModError(f"cannot run the applier with {argv[0]}: {exc.strerror}") from None
        if not record_path.is_file():
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise ModError(f"the applier wrote no record ({argv[0]}): {last}")
        record = load_json(record_path.read_bytes(), str(record_path), ModError)
    if json_out:
        atomic_write_json(json_out, record)
    table = proc.stdout
    failed = [m for m in record["mods"] if m["outcome"] == FAILED]
    if failed:
        raise ModFailedError(failed[0]["detail"], record, table)
    return record, table
