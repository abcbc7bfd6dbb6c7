"""``inv diff A B``: what changed between two images, published sets or locks, section by section.

Every section is a mapping read from one side's facts (``facts.py``); two mappings compare as
added / removed / changed keys. A section one side does not record (a lock has no layers, an
image built without checks has no coverage record) is named under ``not_recorded`` instead of
showing everything as added. Kernel coverage compares the verify records the build labelled
(failing libraries and their levels); ``inv verify --diff`` rescans the libraries themselves.
"""

from __future__ import annotations

import json
from typing import Callable

from edgevllm.common import escape, labels
from edgevllm.inspect.facts import Facts

STRUCTURED_LABELS = {labels.LOCK, labels.MODS, labels.VERIFY, labels.PROBE}


def mapping_diff(old: dict, new: dict) -> dict:
    added = {k: new[k] for k in sorted(set(new) - set(old))}
    removed = {k: old[k] for k in sorted(set(old) - set(new))}
    changed = {k: {"old": old[k], "new": new[k]} for k in sorted(set(old) & set(new))
               if old[k] != new[k]}
    return {k: v for k, v in (("added", added), ("removed", removed), ("changed", changed)) if v}


# --- sections: Facts -> mapping, or None when the side does not record it ------------------
def wheels(f: Facts) -> dict | None:
    if f.lock is None or f.lock.closure is None:
        return None
    return {w.name: {"version": w.version, "sha256": w.sha256} for w in f.lock.closure.wheels}


def packages(f: Facts) -> dict | None:
    return dict(f.lock.packages) if f.lock else None


def sources(f: Facts) -> dict | None:
    if f.lock is None:
        return None
    found = {}
    for name, src in f.lock.sources().items():
        for key in ("repo", "ref", "pr", "base_sha", "commit", "tree", "version"):
            found[f"{name}.{key}"] = getattr(src, key)
    return found


def picks(f: Facts) -> dict | None:
    if f.lock is None:
        return None
    return {f"{name} {pick.spec}": {"head_sha": pick.head_sha, "diff_sha256": pick.diff_sha256,
                                    "skipped": pick.skipped}
            for name, src in f.lock.sources().items() for pick in src.picks}


def cmake_deps(f: Facts) -> dict | None:
    if f.lock is None:
        return None
    return {name: {"commit": dep.commit, "tree": dep.tree}
            | ({"supplied": "a folder standing in, unproven"} if dep.supplied else {})
            for name, dep in f.lock.cmake_deps.items()}


def build_inputs(f: Facts) -> dict | None:
    if f.lock is None:
        return None
    lock = f.lock
    found: dict = {"target": lock.target, "mode": lock.mode}
    found.update({f"base.{stage}": f"{img.ref}@{img.digest or '?'}"
                  for stage, img in lock.base_images.items()})
    found.update({f"build_arg.{k}": v for k, v in lock.build_args.items()})
    found.update({f"setting.{k}": v for k, v in lock.settings.items()})
    if lock.kernels_from:
        found["kernels_from"] = lock.kernels_from.release
    return found


def _key(value) -> str:
    """A record's name as a mapping key, whatever another wrote there."""
    return value if isinstance(value, str) else json.dumps(value, default=str)


def mods(f: Facts) -> dict | None:
    record = f.records.get("mods")
    if isinstance(record, list):
        return {_key(m.get("name")): {"version": m.get("version"), "outcome": m.get("outcome")
                                      or m.get("status")} for m in record if isinstance(m, dict)}
    if f.lock is not None:
        return {m.name: {"version": m.version} for m in f.lock.mods}
    return None


def coverage(f: Facts) -> dict | None:
    record = f.records.get("verify")
    if not isinstance(record, dict):
        return None
    if record.get("skipped"):
        return {"checked": False}
    found = {k: record.get(k) for k in ("passed", "target", "cuda_arch", "gated", "scanned")}
    failures = record.get("failures")
    for failure in failures if isinstance(failures, list) else []:
        if isinstance(failure, dict):
            found[f"failing {_key(failure.get('path'))}"] = failure.get("level")
    return found


def probe(f: Facts) -> dict | None:
    record = f.records.get("probe")
    return {"passed": record.get("passed")} if isinstance(record, dict) else None


def env(f: Facts) -> dict | None:
    if f.kind == "lock" or not f.config:
        return None
    items = f.config.get("Env")
    return dict(_key(item).partition("=")[::2] for item in items) \
        if isinstance(items, list) else {}


def run_config(f: Facts) -> dict | None:
    if f.kind == "lock" or not f.config:
        return None
    return {k: v for k, v in f.config.items() if k != "Env"}


def other_labels(f: Facts) -> dict | None:
    if f.kind == "lock":
        return None
    return {k: v for k, v in f.labels.items() if k not in STRUCTURED_LABELS}


SECTIONS: dict[str, Callable[[Facts], dict | None]] = {
    "wheels": wheels, "packages": packages, "sources": sources, "picks": picks,
    "cmake_deps": cmake_deps, "build_inputs": build_inputs, "mods": mods,
    "coverage": coverage, "probe": probe, "env": env, "run_config": run_config,
    "labels": other_labels,
}


def layers(old: Facts, new: Facts) -> dict | None:
    if old.layers is None or new.layers is None:
        return None
    before = {_key(layer.diff_id): _size(layer.size) for layer in old.layers}
    after = {_key(layer.diff_id): _size(layer.size) for layer in new.layers}
    found = mapping_diff(before, after)
    shared = set(before) & set(after)
    found["shared"] = {"count": len(shared), "bytes": _total(before[d] for d in shared)}
    found["total_bytes"] = {"old": _total(before.values()), "new": _total(after.values())}
    return found


def _size(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None


def _total(sizes) -> int | None:
    sizes = list(sizes)
    return None if any(s is None for s in sizes) else sum(sizes)


def compare(old: Facts, new: Facts, extra: dict[str, tuple[dict | None, dict | None]] | None = None
            ) -> dict:
    """The whole diff as JSON-able data; ``extra`` adds sections read elsewhere (installed
    distributions, bench records) as (old, new) mappings."""
    result: dict = {"old": _side(old), "new": _side(new), "sections": {}, "not_recorded": {}}
    pairs = {name: (read(old), read(new)) for name, read in SECTIONS.items()}
    pairs.update(extra or {})
    for name, (before, after) in pairs.items():
        if before is None or after is None:
            if before is not None or after is not None:
                result["not_recorded"][name] = old.source if before is None else new.source
            continue
        changes = mapping_diff(before, after)
        if changes:
            result["sections"][name] = changes
    layer_changes = layers(old, new)
    if layer_changes is not None:
        result["layers"] = layer_changes
    return result


def _side(f: Facts) -> dict:
    return {"source": f.source, "kind": f.kind, "image_id": f.image_id,
            "lock_sha256": f.labels.get(labels.LOCK_SHA)}


# --- markdown ------------------------------------------------------------------------------
def _value(value) -> str:
    """A value for a markdown line, whatever its shape, escaped (common/escape.py)."""
    return escape.markdown(_plain(value))


def _plain(value) -> str:
    if isinstance(value, dict) and set(value) >= {"version", "sha256"}:
        return f"{value['version']} (sha256 {str(value['sha256'])[:12]})"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_plain(v)}" for k, v in value.items() if v is not None)
    if isinstance(value, str):
        return value
    return json.dumps(value, default=str)


def markdown(diff: dict) -> str:
    """The diff for a person: every name and value from the sides escaped for the terminal and
    for markdown, so that nothing a label holds can forge a line of the report."""
    lines = [f"# {escape.markdown(diff['old']['source'])} → "
             f"{escape.markdown(diff['new']['source'])}", ""]
    if not diff["sections"]:
        lines += ["No differences in what both sides record.", ""]
    for name, changes in diff["sections"].items():
        lines.append(f"## {escape.markdown(name)}")
        lines += [f"- added {escape.code(k)}: {_value(v)}"
                  for k, v in changes.get("added", {}).items()]
        lines += [f"- removed {escape.code(k)}: {_value(v)}"
                  for k, v in changes.get("removed", {}).items()]
        lines += [f"- changed {escape.code(k)}: {_value(v['old'])} → {_value(v['new'])}"
                  for k, v in changes.get("changed", {}).items()]
        lines.append("")
    lines += _layer_lines(diff.get("layers"))
    for name, source in diff["not_recorded"].items():
        lines.append(f"_{escape.markdown(name)}: not recorded by {escape.markdown(source)}_")
    return "\n".join(lines).rstrip() + "\n"


def _layer_lines(changes: dict | None) -> list[str]:
    if changes is None:
        return []
    total, shared = changes["total_bytes"], changes["shared"]
    lines = ["## layers",
             f"- {shared['count']} shared ({_bytes(shared['bytes'])}); total "
             f"{_bytes(total['old'])} → {_bytes(total['new'])}"]
    lines += [f"- added {escape.code(str(k)[:19])}: {_bytes(v)}"
              for k, v in changes.get("added", {}).items()]
    lines += [f"- removed {escape.code(str(k)[:19])}: {_bytes(v)}"
              for k, v in changes.get("removed", {}).items()]
    return lines + [""]


def _bytes(whole: int | None) -> str:
    if whole is None:
        return "size not recorded"
    size = float(whole)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{whole} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size} B"
