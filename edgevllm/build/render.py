"""Rendering: an EffectiveSpec → the multi-stage Dockerfile (Jinja2 templates in dockerfiles/).

The same spec always renders byte-identical text: nothing here depends on time, the host or the
resolved sources (those reach the build as build args and labels).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from edgevllm import __version__
from edgevllm.kernel.paths import templates_dir
from edgevllm.model.spec import EffectiveSpec

TEMPLATE = "vllm.Dockerfile.j2"
RELABEL_DOCKERFILE = "relabel.Dockerfile"


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def pip_options(eff: EffectiveSpec) -> str:
    if eff.spec.offline:
        return "--no-index --find-links /wheelhouse"
    return "--find-links /wheelhouse" if eff.spec.wheelhouse else ""


def applier_options(eff: EffectiveSpec) -> str:
    if eff.spec.offline:
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
        "wheelhouse": bool(eff.spec.wheelhouse),
        "pip_opts": pip_options(eff),
        "applier_opts": applier_options(eff),
        "packages": eff.packages,
        "forbidden_packages": eff.target.forbidden_packages,
        "mods": eff.mods,
        "env": eff.env,
        "max_jobs": eff.max_jobs,
        "nvcc_threads": eff.nvcc_threads,
        "flashinfer_source": eff.spec.flashinfer.source is not None,
    }


def render_dockerfile(eff: EffectiveSpec, extra_env: dict[str, str] | None = None) -> str:
    """The Dockerfile text; ``extra_env`` adds runtime env (e.g. what the selected mods set)."""
    values = template_values(eff)
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
