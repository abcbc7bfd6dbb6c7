"""Rendering: an EffectiveSpec → the multi-stage Dockerfile (Jinja2 templates in dockerfiles/).

The same spec and tree layout always render byte-identical text: nothing here depends on time or
the host. The build stage follows the prepared tree's ``BuildLayout`` (builder/buildreqs.py:
requirement files, use_existing_torch.py, jobs); other values of the resolved sources (version,
SHAs) reach the build as build args and labels.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from edgevllm import __version__
from edgevllm.builder.buildreqs import BuildLayout, unread_layout
from edgevllm.common import labels
from edgevllm.common.paths import templates_dir
from edgevllm.specs.buildspec import EffectiveSpec

TEMPLATE = "vllm.Dockerfile.j2"
RELABEL_DOCKERFILE = "relabel.Dockerfile"


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def installs_closure(eff: EffectiveSpec) -> bool:
    """The image installs a locked closure from the ``wheelhouse`` context (no index at all)."""
    return eff.mode in ("prebuilt", "precompiled")


def pip_options(eff: EffectiveSpec) -> str:
    if eff.spec.offline or installs_closure(eff):
        return "--no-index --find-links /wheelhouse"
    return "--find-links /wheelhouse" if eff.spec.wheelhouse else ""


def applier_options(eff: EffectiveSpec) -> str:
    if eff.spec.offline or installs_closure(eff):
        return " --pip-find-links /wheelhouse --pip-no-index"
    return " --pip-find-links /wheelhouse" if eff.spec.wheelhouse else ""


def template_values(eff: EffectiveSpec) -> dict:
    return {
        "tool_version": __version__,
        "target": eff.target,
        "platform": eff.platform,
        "images": eff.images,
        "python": eff.python,
        "apt_packages": eff.apt_packages,
        "torch": eff.torch,
        "offline": eff.spec.offline,
        "wheelhouse": bool(eff.spec.wheelhouse) or installs_closure(eff),
        "mode": eff.mode,
        "closure": installs_closure(eff),
        "pip_opts": pip_options(eff),
        "applier_opts": applier_options(eff),
        "packages": eff.packages,
        "forbidden_packages": eff.target.forbidden_packages,
        "mods": eff.mods,
        "env": eff.env,
        "max_jobs": eff.max_jobs,
        "nvcc_threads": eff.nvcc_threads,
        "flashinfer_source": eff.spec.flashinfer.source is not None,
        "compile_cache": eff.spec.compile_cache or f"ccache-{eff.target.name}",
        **labels.template_values(),
    }


def layout_values(eff: EffectiveSpec, layout: BuildLayout) -> dict:
    """The build stage's commands, from the tree's layout (shell-quoted where they are words)."""
    torch_args = " ".join(shlex.quote(a) for a in layout.use_existing_torch_args)
    return {
        "requirements_file": shlex.quote(layout.requirements_file),
        "pyproject_requires": " ".join(shlex.quote(r) for r in layout.pyproject_requires),
        "use_existing_torch": f"{shlex.quote(layout.use_existing_torch)} {torch_args}".rstrip(),
        "setuptools": layout.setuptools or "any",
        "max_jobs_env": layout.max_jobs_env(eff.max_jobs, eff.nvcc_threads),
        "divides_jobs": layout.divides_jobs,
    }


def render_dockerfile(eff: EffectiveSpec, extra_env: dict[str, str] | None = None,
                      layout: BuildLayout | None = None,
                      precompiled: dict[str, str] | None = None) -> str:
    """The Dockerfile text; ``extra_env`` adds runtime env (e.g. what the selected mods set);
    ``layout`` is the prepared tree's (placeholders when None: ``inv render`` reads no tree)."""
    values = template_values(eff)
    values["build"] = layout_values(eff, layout or unread_layout())
    # precompiled mode: {"release": "0.33.0", "wheel": "<the release wheel's file name>"}
    values["precompiled"] = precompiled or {"release": "<the release below the tree>",
                                            "wheel": "<the release wheel>"}
    values["env"] = {**(extra_env or {}), **eff.env}
    return _environment().get_template(TEMPLATE).render(**values)


def relabel_dockerfile() -> Path:
    return templates_dir() / RELABEL_DOCKERFILE


@dataclass
class BuildPlan:
    """What the driver will run, written beside the Dockerfile by ``inv render`` for inspection."""

    target: str
    platform: str
    dockerfile: str
    contexts: dict[str, str] = field(default_factory=dict)
    build_args: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    stages: list[str] = field(default_factory=lambda: ["wheels", "runtime"])

    def to_json(self) -> str:
        return json.dumps(self.__dict__, indent=2, sort_keys=True) + "\n"
