"""``inv plan``: what the vLLM tree will compile for a target, from the tree's own CMake (seconds).

Takes the same source flags as ``inv build`` (``--vllm-repo``, ``--vllm-ref``, ``--vllm-pr``,
``--cherry-pick``, ``--spec``, ``--lock``), prepares the tree as the build does (picks, source
patches the target's ``kernel_plan.code`` selects) and prints the kernel plan. A group the target
needs that gets too little fails with one line after the table.
"""

from __future__ import annotations

import json as jsonlib
import tempfile
from pathlib import Path

from edgevllm.cli._common import cli_task
from edgevllm.cli.flags import SOURCE_FLAGS, SPEC_FLAGS, help_for, iterable_for, param, signature
from edgevllm.common.errors import ConfigError, EdgeVllmError

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
    from edgevllm.builder.tree import TreeOptions, prepare_tree
    from edgevllm.cli.build import spec_from_flags
    from edgevllm.common.fsutil import atomic_write_text
    from edgevllm.sources.plan import check_target, print_plan
    from edgevllm.specs.buildspec import resolve
    from edgevllm.specs.lock import read_lock

    eff = resolve(spec_from_flags(values))
    locked = read_lock(values["lock"]) if values.get("lock") else None
    given = Path(values["tree"]) if values.get("tree") else None
    # The build's own preparation (sources, picks, source patches), the plan checked after the
    # table is printed, and nothing the plan does not read (no layout, no CMake deps).
    options = TreeOptions(cmake_deps=False, check_plan=False, layout=False, given=given,
                          flashinfer=False)
    with tempfile.TemporaryDirectory(prefix="edgevllm-plan-") as tmp:
        try:
            tree = prepare_tree(eff, Path(tmp), locked, options)
        except EdgeVllmError as exc:  # name the user's tree, never the copy it was read from
            if given is not None:
                for copy in {Path(tmp) / "vllm", Path(tmp).resolve() / "vllm"}:
                    exc.message = exc.message.replace(str(copy), str(given))
                exc.args = (exc.message,)
            raise
        vllm = tree.vllm
        title = str(given) if given else f"vllm {vllm.version} ({vllm.commit[:12]})"
    kernel_plan = tree.kernel_plan
    if kernel_plan is None:
        raise ConfigError("no kernel plan was made for the tree")  # kernels are on above
    print_plan(kernel_plan, title=f"{title}: {eff.target.torch_cuda_arch_list} → CUDA_ARCHS "
                                  f"{';'.join(kernel_plan.cuda_archs) or 'none'}")
    if values.get("json"):
        data = dict(kernel_plan.to_dict(), target=eff.target.name, source=title)
        atomic_write_text(Path(values["json"]), jsonlib.dumps(data, indent=2) + "\n")
    check_target(kernel_plan, eff.target)
