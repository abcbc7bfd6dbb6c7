"""``inv sources``: resolve vLLM/FlashInfer refs, PRs and cherry-picks; prepare trees; write
the lock."""

from __future__ import annotations

import json

from edgevllm.cli._common import flag_task
from edgevllm.cli.flags import SOURCE_FLAGS, param, spec_overrides
from edgevllm.common import console
from edgevllm.common.errors import ConfigError
from edgevllm.common.labels import LOCK_FILENAME

# The build's source flags, less FlashInfer's PyPI version (no source tree to prepare).
TASK_FLAGS = tuple(f for f in SOURCE_FLAGS if f.name != "flashinfer_version")


def build_requests(values: dict) -> list:
    """Requests from flag values, parsed as ``inv build`` parses them (the flag table's
    ``spec_overrides``); FlashInfer only when one of its flags is given."""
    from edgevllm.sources.requests import SourceRequest
    from edgevllm.specs.buildspec import DEFAULT_VLLM_REF

    data = spec_overrides(values, TASK_FLAGS)
    vllm = data.get("vllm") or {"ref": DEFAULT_VLLM_REF}  # the same default as `inv build`
    sections = {"vllm": vllm}
    if "source" in data.get("flashinfer", {}):
        sections["flashinfer"] = data["flashinfer"]["source"]
    return [
        SourceRequest.from_cli(
            name,
            section.get("repo"),
            section.get("ref"),
            section.get("pr"),
            section.get("cherry_picks"),
            bool(section.get("allow_doc_conflicts")),
        )
        for name, section in sections.items()
    ]


def _requests_and_lock(values: dict):
    """(requests, the lock they come from or None): a --lock rebuilds exactly what it records,
    so it takes no source flag and no other target."""
    from edgevllm.sources.requests import requests_from_lock
    from edgevllm.specs.lock import check_lock_target, read_lock

    lock, target = values.get("lock"), values.get("target")
    if not lock:
        return build_requests(values), None
    if any(values.get(f.name) for f in TASK_FLAGS if f.kind != "bool"):
        raise ConfigError(
            "--lock rebuilds exactly what the lock records; drop the "
            "--vllm-*/--flashinfer-*/--cherry-pick flags"
        )
    base_lock = read_lock(lock)
    check_lock_target(base_lock, target, lock)
    return requests_from_lock(base_lock), base_lock


@flag_task(
    TASK_FLAGS,
    param("out"),
    param("dry_run", False),
    param("lock"),
    param("target"),
    param("force", False),
    help_extra={
        "force": "write into an --out folder that holds files edgevllm did not write "
        "(they stay)",
        "out": f"folder for the prepared trees (<out>/vllm, <out>/flashinfer) and "
        f"<out>/{LOCK_FILENAME}",
        "dry_run": "print the plan and exit; nothing is fetched or written",
        "lock": "rebuild the sources of this lock file exactly (by SHA)",
        "target": "target name recorded in the lock (thor, spark, ...)",
    },
)
def sources(c, **values):
    """Resolve and prepare source trees and write their lock, without building an image."""
    from edgevllm.common.fsutil import check_output_dir
    from edgevllm.sources.prepare import prepare_into, summarize
    from edgevllm.specs.lock import image_tag, lock_hash
    from edgevllm.specs.targets import load_target

    out, target = values.get("out"), values.get("target")
    if target is not None:
        load_target(target)  # an unknown target fails here, naming the known ones
    requests, base_lock = _requests_and_lock(values)
    if values.get("dry_run"):
        for request in requests:
            for line in request.plan():
                print(line)
        return
    if not out:
        raise ConfigError(
            "sources: give --out DIR for the prepared trees and the lock (or --dry-run)"
        )
    check_output_dir(out, bool(values.get("force")), "sources")  # before any fetch
    console.step(f"preparing {', '.join(r.name for r in requests)} sources into {out}")
    result, prepared = prepare_into(requests, out, target=target, base_lock=base_lock,
                                    force=bool(values.get("force")))
    for source in prepared.values():
        for line in summarize(source):
            console.info(line)
    print(
        json.dumps(
            {
                "lock": f"{out}/{LOCK_FILENAME}",
                "lock_sha256": lock_hash(result),
                "image_tag": image_tag(result),
                "sources": {
                    name: {
                        "dir": str(src.tree_dir),
                        "base_sha": src.base_sha,
                        "commit": src.commit,
                        "tree": src.tree_hash,
                        "version": src.version,
                        "applied": [p.spec for p in src.applied],
                        "skipped": [p.spec for p in src.skipped],
                    }
                    for name, src in prepared.items()
                },
            },
            indent=2,
            sort_keys=True,
        )
    )
