"""``inv plan``: what the vLLM tree will compile for a target, from the tree's own CMake (seconds).

Takes the same source flags as ``inv build`` (``--vllm-repo``, ``--vllm-ref``, ``--vllm-pr``,
``--cherry-pick``, ``--spec``, ``--lock``), prepares the tree as the build does (picks, source
patches the target's ``kernel_plan.code`` selects) and prints the kernel plan. A group the target
needs that gets too little fails with one line after the table.
"""

from __future__ import annotations

import json as jsonlib
import shutil
import tempfile
from pathlib import Path

from edgevllm.cli._common import cli_task
from edgevllm.cli.flags import SOURCE_FLAGS, SPEC_FLAGS, help_for, iterable_for, param, signature
from edgevllm.common import console
from edgevllm.common.errors import ConfigError, SourceError

PLAN_FLAGS = SPEC_FLAGS + tuple(f for f in SOURCE_FLAGS if not f.name.startswith("flashinfer"))


def _task(fn):
    extra = (param("json"), param("tree"))
    fn.__signature__ = signature(PLAN_FLAGS, *extra)
    return cli_task(help={**help_for(PLAN_FLAGS),
                          "json": "also write the plan as JSON to this file",
                          "tree": "evaluate this vLLM folder (a copy, patched like the build) "
                                  "instead of fetching sources"},
                    iterable=iterable_for(PLAN_FLAGS), auto_shortflags=False)(fn)


@_task
def plan(c, **values):
    """Kernel plan: every kernel group and extension, and the arches it gets for the target."""
    from edgevllm.cli.build import spec_from_flags
    from edgevllm.common.fsutil import atomic_write_text
    from edgevllm.sources.plan import check_target, plan_for_target, print_plan
    from edgevllm.specs.buildspec import resolve

    eff = resolve(spec_from_flags(values))
    with tempfile.TemporaryDirectory(prefix="edgevllm-plan-") as tmp:
        tree, title = _tree(eff, values, Path(tmp))
        kernel_plan = plan_for_target(tree, eff.target, torch_version=eff.torch.version or "",
                                      nvcc_threads=eff.nvcc_threads, check=False)
    print_plan(kernel_plan, title=f"{title}: {eff.target.torch_cuda_arch_list} → CUDA_ARCHS "
                                  f"{';'.join(kernel_plan.cuda_archs) or 'none'}")
    if values.get("json"):
        data = dict(kernel_plan.to_dict(), target=eff.target.name, source=title)
        atomic_write_text(Path(values["json"]), jsonlib.dumps(data, indent=2) + "\n")
    check_target(kernel_plan, eff.target)


def _tree(eff, values: dict, tmp: Path) -> tuple[Path, str]:
    """The tree to evaluate: ``--tree`` as it is, or the build's sources prepared and patched."""
    from edgevllm.builder.pipeline import apply_patches
    from edgevllm.sources.prepare import (
        PreparedSource,
        SourceRequest,
        prepare_sources,
        source_request,
    )
    from edgevllm.specs.lock import read_lock

    if values.get("tree"):
        given = Path(values["tree"])
        if not given.is_dir():
            raise ConfigError(f"--tree {given}: no such folder")
        copy = tmp / "vllm"
        shutil.copytree(given, copy, symlinks=True)
        apply_patches(eff, PreparedSource(name="vllm", repo=str(given), base_sha="", commit="",
                                          tree_hash="", version="", tree_dir=copy))
        return copy, str(given)
    locked = read_lock(values["lock"]).vllm if values.get("lock") else None
    request = SourceRequest.from_lock_entry(locked) if locked else source_request(eff)
    console.step(f"sources: {'; '.join(request.plan())}")
    prepared = prepare_sources(request, tmp / "vllm")
    apply_patches(eff, prepared)
    if prepared.tree_dir is None:
        raise SourceError(f"vllm {prepared.commit[:12]}: prepared, but not exported to a folder")
    return prepared.tree_dir, f"vllm {prepared.version} ({prepared.commit[:12]})"
