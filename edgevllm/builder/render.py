"""Rendering: an EffectiveSpec → the multi-stage Dockerfile of its mode (Jinja2 templates in
dockerfiles/: ``<mode>.Dockerfile.j2`` extends ``base.Dockerfile.j2``).

The same spec and tree layout always render byte-identical text: nothing here depends on time or
the host. Templates render in Jinja2's sandbox with StrictUndefined: a template reads data and
calls nothing, and a name it does not get fails the render. The build stage follows the prepared
tree's ``BuildLayout`` (sources/buildreqs.py: requirement files, use_existing_torch.py, jobs);
other values of the resolved sources (version, SHAs) reach the build as build args and labels.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path

from jinja2 import FileSystemLoader, StrictUndefined
from jinja2.sandbox import SandboxedEnvironment

from edgevllm import __version__
from edgevllm.builder.aot.plan import cross_aot
from edgevllm.builder.distpool import client as dist_client
from edgevllm.builder.subset.plan import template_values as subset_values
from edgevllm.common import labels
from edgevllm.common.paths import templates_dir
from edgevllm.sources.buildreqs import BuildLayout, unread_layout
from edgevllm.sources.wheelhouse import MODE_REQUIREMENTS_FILE
from edgevllm.sources.wheels import python_version_of
from edgevllm.specs.buildspec import EffectiveSpec
from edgevllm.specs.cross import CrossRoad

RELABEL_DOCKERFILE = "relabel.Dockerfile"
CROSS_TOOLCHAIN_TEMPLATE = "cross-toolchain.cmake.j2"
# Stands in for the release a precompiled tree sits on where none was read (inv render).
UNREAD_RELEASE = {"release": "<the release below the tree>", "wheel": "<the release wheel>"}


def template_name(mode: str) -> str:
    """One template per mode, on the shared base."""
    return f"{mode}.Dockerfile.j2"


def _environment() -> SandboxedEnvironment:
    return SandboxedEnvironment(
        loader=FileSystemLoader(str(templates_dir())),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def applier_options(eff: EffectiveSpec) -> str:
    """Every mode installs its locked closure from the ``wheelhouse`` context: a mod's pip step
    too, with no index at all."""
    return f" --pip-find-links {labels.WHEELHOUSE_MOUNT} --pip-no-index"


def mount_options(eff: EffectiveSpec) -> dict[str, str]:
    """The cache and wheelhouse mounts a pip step carries (each ends in a space)."""
    return {
        "mount_wheelhouse": f"--mount=type=bind,from=wheelhouse,target={labels.WHEELHOUSE_MOUNT} ",
        "mount_pip_cache": f"--mount=type=cache,target=/root/.cache/pip,id=pip-{eff.target.name} ",
    }


def closure_values(eff: EffectiveSpec) -> dict:
    """What the shared closure stages (dockerfiles/_install.j2) read. Nothing here may name the
    target: the interpreter's apt packages (``python3.12``, ``python3.12-venv``) come before the
    install, the target's other packages after it; the byte-code compiles on
    ``EffectiveSpec.bytecode_image``. The runtime's packages (a compile's build base has its
    own, ``apt_packages``)."""
    runtime = eff.runtime_apt_packages
    interpreter = [p for p in runtime if p == eff.python or p.startswith(eff.python + "-")]
    return {"interpreter_apt": interpreter,
            "target_apt": [p for p in runtime if p not in interpreter],
            "bytecode_image": eff.bytecode_image}


def mode_vllm_values(eff: EffectiveSpec) -> dict:
    """Where the stage ``vllm-files`` (dockerfiles/_install.j2) takes the mode's vLLM from (its
    record's ``vllm_from``): the exported ``wheels`` context where the mode builds one, else the
    release wheel the ``wheelhouse`` holds, by its pin in the file the closure's
    requirements.txt leaves it to."""
    return {"source": eff.record.vllm_from,
            "requirements": MODE_REQUIREMENTS_FILE}


def cross_values(eff: EffectiveSpec) -> dict | None:
    """A cross compile's road as the compile template reads it (None: the build stages run on
    the target's platform). Every value is a checked word of ``specs/crossroads.yaml``."""
    road = eff.cross
    if eff.toolchain != "cross" or road is None:
        return None
    return {"build_platform": road.build_platform, "target_platform": road.target_platform,
            "triple": road.triple, "host_compiler": road.host_compiler,
            "c_compiler": road.c_compiler, "min_gcc": road.min_gcc,
            "target_dir": road.cuda_target_dir, "aliases": road.cuda_target_aliases,
            "nvcc_flags": " ".join(road.nvcc_flags()),
            "cmake_args": " ".join(toolchain_cmake_args()),
            **setuptools_cross_values(road, python_version_of(eff.python) or ""),
            # what bdist_wheel writes into the wheel's tag (sysconfig.get_platform())
            "host_platform": road.wheel_platform.replace("_", "-", 1)}


def aot_cross_values(eff: EffectiveSpec) -> dict | None:
    """The AOT step's cross road (builder/aot/plan.py ``cross_aot``) as the templates read it (None:
    the step runs in the image): the target's CUDA library folder the ``aot-build`` stage links
    against (laid out in build-env by inimage_stage.py) and the closure's FlashInfer AOT folder
    the runtime stage copies the modules into. No module name: those are plan.json's."""
    road = eff.cross
    if not cross_aot(eff) or road is None:
        return None
    site = f"{labels.VENV}/lib/python{python_version_of(eff.python) or ''}/site-packages"
    return {"target_lib": f"${{CUDA_HOME:-/usr/local/cuda}}/targets/{road.cuda_target_dir}/lib",
            "aot_dir": f"{site}/flashinfer/data/aot"}


def setuptools_cross_values(road: CrossRoad, python_version: str) -> dict[str, str]:
    """What a ``setup.py`` that builds a torch extension with the build Python's
    ``torch.utils.cpp_extension`` (DeepGEMM's, inside vLLM's build on Spark) needs on a cross
    road: the target's torch and CUDA libraries first on the linker's path (the build
    interpreter's x86_64 ones come after, and the cross linker skips them), and the target's
    extension suffix (else the module is named for the build interpreter's platform)."""
    site = f"{labels.CROSS_TARGET}/lib/python{python_version}/site-packages"
    cuda = "${CUDA_HOME:-/usr/local/cuda}"
    return {"ldflags": f"-L{site}/torch/lib -L{cuda}/targets/{road.cuda_target_dir}/lib",
            "ext_suffix": f".cpython-{python_version.replace('.', '')}-{road.triple}.so"}


def toolchain_cmake_args() -> list[str]:
    """What a cross compile hands the tree's CMake on its command line (``CMAKE_ARGS``, which
    vLLM's setup.py forwards): the toolchain file, and CMP0190's default, which a project's
    ``cmake_minimum_required`` reads before ``project()`` reads the toolchain file (CMake >= 4.1
    then finds no Python when cross-compiling; vLLM's build requirements bring CMake 4)."""
    return [f"-DCMAKE_TOOLCHAIN_FILE={labels.CROSS_TOOLCHAIN}",
            "-DCMAKE_POLICY_DEFAULT_CMP0190=NEW"]


def render_toolchain(road: CrossRoad) -> str:
    """The CMake toolchain file of ``road`` (dockerfiles/cross-toolchain.cmake.j2)."""
    return _environment().get_template(CROSS_TOOLCHAIN_TEMPLATE).render(
        road=road, target_venv=labels.CROSS_TARGET, cross_run=labels.CROSS_RUN)


def template_values(eff: EffectiveSpec) -> dict:
    return {
        "tool_version": __version__,
        "template": template_name(eff.mode),
        "target": eff.target,
        "platform": eff.platform,
        "images": eff.images,
        "python": eff.python,
        "apt_packages": eff.apt_packages,
        "mode": eff.mode,
        "applier_opts": applier_options(eff),
        "packages": eff.packages,
        "forbidden_packages": eff.target.forbidden_packages,
        "mods": eff.mods,
        "env": eff.env,
        "max_jobs": eff.max_jobs,
        "nvcc_threads": eff.nvcc_threads,
        "flashinfer_source": eff.spec.flashinfer.source is not None,
        "aot": eff.spec.aot is not None,
        "aot_cross": aot_cross_values(eff),
        "compile_cache_id": eff.spec.compile_cache_id or f"ccache-{eff.target.name}",
        "closure": closure_values(eff),
        "mode_vllm": mode_vllm_values(eff),
        "cross": cross_values(eff),
        "extensions": subset_values(eff.spec.extensions, eff.target.leave_out),
        "dist": dist_client.template_values(eff),  # None: no --dist block (the text as before)
        **mount_options(eff),
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
    """The Dockerfile text of ``eff.mode``; ``extra_env`` adds runtime env (e.g. what the selected
    mods set); ``layout`` is the prepared tree's (placeholders when None: no tree was read);
    ``precompiled`` names the release below the tree ({"release": "0.33.0", "wheel": file})."""
    values = template_values(eff)
    values["build"] = layout_values(eff, layout or unread_layout())
    values["precompiled"] = precompiled or UNREAD_RELEASE
    values["env"] = {**(extra_env or {}), **eff.env}
    return _environment().get_template(template_name(eff.mode)).render(**values)


def relabel_dockerfile() -> Path:
    return templates_dir() / RELABEL_DOCKERFILE


@dataclass
class BuildPlan:
    """What the driver runs, written beside the Dockerfile by ``inv render``: the mode and why,
    the build targets (stages) in order, and every named build context they are given."""

    target: str
    platform: str
    mode: str
    mode_reason: str
    dockerfile: str
    # a compile's toolchain and why (native, cross, emulated); empty for the other modes
    toolchain: str = ""
    contexts: dict[str, str] = field(default_factory=dict)
    build_args: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    stages: list[str] = field(default_factory=list)
    on_top: dict[str, dict[str, str]] = field(default_factory=dict)  # packages, mods: versions

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"
