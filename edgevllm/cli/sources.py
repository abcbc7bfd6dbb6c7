"""``inv sources``: resolve vLLM/FlashInfer refs, PRs and cherry-picks; prepare trees; write
the lock."""

from __future__ import annotations

import json

from edgevllm.cli._common import cli_task
from edgevllm.kernel import console
from edgevllm.kernel.errors import ConfigError
from edgevllm.kernel.kv import split_csv
from edgevllm.kernel.labels import LOCK_FILENAME
from edgevllm.model.flags import SOURCE_FLAGS, help_for

_HELP = {
    **help_for(f for f in SOURCE_FLAGS if f.name != "flashinfer_version"),  # PyPI only
    "out": f"folder for the prepared trees (<out>/vllm, <out>/flashinfer) and "
    f"<out>/{LOCK_FILENAME}",
    "dry-run": "print the plan and exit; nothing is fetched or written",
    "lock": "rebuild the sources of this lock file exactly (by SHA)",
    "target": "target name recorded in the lock (thor, spark, ...)",
}


def build_requests(
    vllm_repo=None,
    vllm_ref=None,
    vllm_pr=None,
    cherry_pick=None,
    allow_doc_conflicts=False,
    flashinfer_repo=None,
    flashinfer_ref=None,
    flashinfer_pr=None,
    flashinfer_cherry_pick=None,
) -> list:
    """Requests from flag values; FlashInfer only when one of its flags is given."""
    from edgevllm.sources.prepare import SourceRequest

    if not (vllm_repo or vllm_ref or vllm_pr):  # the same default as `inv build`
        from edgevllm.model.spec import DEFAULT_VLLM_REF

        vllm_ref = DEFAULT_VLLM_REF
    requests = [
        SourceRequest.from_cli(
            "vllm", vllm_repo, vllm_ref, vllm_pr, split_csv(cherry_pick), allow_doc_conflicts
        )
    ]
    if flashinfer_repo or flashinfer_ref or flashinfer_pr or flashinfer_cherry_pick:
        requests.append(
            SourceRequest.from_cli(
                "flashinfer",
                flashinfer_repo,
                flashinfer_ref,
                flashinfer_pr,
                split_csv(flashinfer_cherry_pick),
                allow_doc_conflicts,
            )
        )
    return requests


@cli_task(
    help={k.replace("_", "-"): v for k, v in _HELP.items()},
    iterable=["cherry_pick", "flashinfer_cherry_pick"],
    auto_shortflags=False,
)
def sources(
    c,
    vllm_repo=None,
    vllm_ref=None,
    vllm_pr=None,
    cherry_pick=None,
    allow_doc_conflicts=False,
    flashinfer_repo=None,
    flashinfer_ref=None,
    flashinfer_pr=None,
    flashinfer_cherry_pick=None,
    out=None,
    dry_run=False,
    lock=None,
    target=None,
):
    """Resolve and prepare source trees and write their lock, without building an image."""
    from edgevllm.model.lock import image_tag, lock_hash, read_lock
    from edgevllm.model.targets import load_target
    from edgevllm.sources.prepare import prepare_into, requests_from_lock, summarize

    if target is not None:
        load_target(target)  # an unknown target fails here, naming the known ones
    base_lock = None
    if lock:
        flags = [
            vllm_repo,
            vllm_ref,
            vllm_pr,
            cherry_pick,
            flashinfer_repo,
            flashinfer_ref,
            flashinfer_pr,
            flashinfer_cherry_pick,
        ]
        if any(flags):
            raise ConfigError(
                "--lock rebuilds exactly what the lock records; drop the "
                "--vllm-*/--flashinfer-*/--cherry-pick flags"
            )
        base_lock = read_lock(lock)
        if target and base_lock.target and target != base_lock.target:
            raise ConfigError(
                f"--target {target} differs from the lock's target {base_lock.target}; drop "
                f"--target"
            )
        requests = requests_from_lock(base_lock)
    else:
        requests = build_requests(
            vllm_repo,
            vllm_ref,
            vllm_pr,
            cherry_pick,
            allow_doc_conflicts,
            flashinfer_repo,
            flashinfer_ref,
            flashinfer_pr,
            flashinfer_cherry_pick,
        )
    if dry_run:
        for request in requests:
            for line in request.plan():
                print(line)
        return
    if not out:
        raise ConfigError(
            "sources: give --out DIR for the prepared trees and the lock (or --dry-run)"
        )
    console.step(f"preparing {', '.join(r.name for r in requests)} sources into {out}")
    result, prepared = prepare_into(requests, out, target=target, base_lock=base_lock)
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
