"""``inv render``: the Dockerfile and its build context written to a folder for inspection.

Nothing is fetched: the sources appear in ``build-plan.json`` as the plan the build would follow.
"""

from __future__ import annotations

from pathlib import Path

from edgevllm.builder.render import BuildPlan, render_dockerfile
from edgevllm.common.fsutil import atomic_dir
from edgevllm.specs.buildspec import BuildSpec, resolve


def render_to(spec: BuildSpec, out: Path) -> Path:
    from edgevllm.mods.catalog import stage_mods
    from edgevllm.sources.prepare import source_request

    eff = resolve(spec)
    with atomic_dir(out) as tmp:
        staged = stage_mods(eff.mods, eff.target.name, tmp / "edgevllm-mods")
        dockerfile = render_dockerfile(eff, staged.env)
        (tmp / "Dockerfile").write_text(dockerfile)
        contexts = {
            "vllm-src": "<prepared vLLM tree: " + "; ".join(source_request(eff).plan()) + ">",
            "cmake-deps": "<what the tree's CMake would clone, fetched by commit>",
            "edgevllm-mods": "edgevllm-mods/",
            "edgevllm-meta": "<lock.json, at build time>",
            "wheels": "<exported wheels folder, runtime build only>",
        }
        if eff.spec.flashinfer.source:
            contexts["flashinfer-src"] = (
                "<prepared FlashInfer tree: "
                + "; ".join(source_request(eff, "flashinfer").plan())
                + ">"
            )
        if eff.spec.wheelhouse:
            contexts["wheelhouse"] = eff.spec.wheelhouse
        plan = BuildPlan(
            target=eff.target.name,
            platform=eff.platform,
            dockerfile="Dockerfile",
            contexts=contexts,
            build_args={"VLLM_VERSION": "<from the resolved source>"},
        )
        (tmp / "build-plan.json").write_text(plan.to_json())
    return out / "Dockerfile"
