"""Build targets (Thor, Spark, ...) as data: one YAML file per target under ``targets/``.

A user adds a target by adding a file (here, or in a folder named by ``EDGEVLLM_TARGETS_PATH``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, field_validator

from edgevllm.common.errors import UnknownTargetError
from edgevllm.common.grammar import (
    AptPackage,
    ArchList,
    ContainerPath,
    CudaArch,
    CudaVersion,
    EnvName,
    HostPath,
    ImageRef,
    IndexUrl,
    LabelText,
    Line,
    ModName,
    Name,
    PackageName,
    PositiveFloat,
    PythonCommand,
    PythonModule,
    Version,
)
from edgevllm.common.paths import data_dirs
from edgevllm.common.schema import Strict, load_model

if TYPE_CHECKING:
    from edgevllm.specs.cuda import CudaArch

class BaseImages(Strict):
    build: ImageRef
    runtime: ImageRef


class TorchSource(Strict):
    """Where torch comes from. ``version: null`` means the base image already provides it."""

    version: Version | None = None
    index_url: IndexUrl | None = None


class PrebuiltDefaults(Strict):
    """The base of a prebuilt image: a runtime with Python (CUDA comes as wheels in the closure).

    ``apt_packages`` should give the venv module and a host C++ compiler: FlashInfer's JIT runs
    nvcc (from the nvidia-cuda-nvcc wheel), which calls g++.
    """

    image: ImageRef = "docker.io/library/ubuntu:24.04"
    python: PythonCommand = "python3.12"
    apt_packages: list[AptPackage] = Field(default_factory=lambda: [
        "python3.12", "python3.12-venv", "g++", "ca-certificates"])
    # The image (~10 GB) and its export need about twice its size; the wheels are cached apart.
    min_disk_gb: PositiveFloat = 25


class ProbeDefaults(Strict):
    required_imports: list[PythonModule] = Field(default_factory=list)
    level2_model: Line | None = None
    serve_args: list[Line] = Field(default_factory=list)


_Ulimits = dict[Annotated[str, Field(pattern=r"^[a-z]+$")],
               Annotated[str, Field(pattern=r"^(-?\d+|unlimited)(:(-?\d+|unlimited))?$")]]


class RdmaLaunch(Strict):
    """What a cluster node's container needs to reach the RDMA NICs (never ``--privileged``):
    the verbs ``devices`` (``--device``), ``cap_add`` (IPC_LOCK: verbs pin memory) and
    ``ulimits`` (an unlimited memlock limit). ``tcp_env``: the env of a cluster run with
    ``--no-rdma`` (NCCL over TCP only), over ``cluster_env``."""

    devices: list[ContainerPath] = Field(default_factory=list)
    cap_add: list[Annotated[str, Field(pattern=r"^[A-Z][A-Z_]*$")]] = Field(default_factory=list)
    ulimits: _Ulimits = Field(default_factory=dict)
    tcp_env: dict[EnvName, Line] = Field(default_factory=dict)


class LaunchDefaults(Strict):
    """What every ``inv serve`` on this device adds to ``docker run`` (a recipe may override).

    ``ulimits``: ``--ulimit NAME=VALUE``; ``env``: every container; ``cluster_env``: every node of
    a cluster, where ``{iface}`` / ``{ib_hca}`` are filled from ``--iface`` / ``--ib-hca`` (an
    entry naming one that was not given is left out); ``jit_caches``: name → container path of a
    JIT cache, mounted from ``<jit_cache_root>/<image id>/<name>`` on the node (one folder per
    image, so kernels compiled by another build are never reused); ``hf_home``: the container
    path of the Hugging Face cache volume, exported as ``HF_HOME``; ``device_memory_gib``: the
    memory vLLM can use on the device (the budget several models share); ``earlyoom_args``: the
    flags ``inv serve --earlyoom`` runs earlyoom with; ``rdma``: what cluster nodes need for
    RDMA (``RdmaLaunch``); ``ray_env`` / ``ray_start_args``: the env of a Ray cluster's nodes and
    the flags of its ``ray start`` (unified memory: memory monitor off, a small object store).
    """

    ulimits: _Ulimits = Field(default_factory=dict)
    env: dict[EnvName, Line] = Field(default_factory=dict)
    cluster_env: dict[EnvName, Line] = Field(default_factory=dict)
    jit_cache_root: ContainerPath = "/var/cache/edgevllm/jit"
    jit_caches: dict[Name, ContainerPath] = Field(default_factory=dict)
    hf_home: ContainerPath | None = None
    device_memory_gib: PositiveFloat | None = None
    earlyoom_args: list[Line] = Field(default_factory=list)
    rdma: RdmaLaunch = Field(default_factory=RdmaLaunch)
    ray_env: dict[EnvName, Line] = Field(default_factory=dict)
    ray_start_args: list[Line] = Field(default_factory=list)


class KernelPlanPolicy(Strict):
    """What the kernel plan (``inv plan``, the build's preflight) must find for this target.

    ``code``: ``native`` applies ``native_patches`` (source patches that keep the exact arch, e.g.
    12.1a, through vLLM's CMake: cubins that run only on this compute capability); ``family``
    leaves vLLM's CMake alone (12.0 / 12.0f code that runs on every device of the family).
    ``required``: kernel group -> the least it must get (``native`` | ``family`` | ``ptx``). A group
    is the CMake variable of a ``cuda_archs_loose_intersection`` or an extension name; ``A|B``
    names whichever the tree has (variables get renamed across vLLM releases). Under ``code:
    family`` a ``native`` minimum reads as ``family``. A group below its minimum fails the
    preflight in seconds. docs/targets.md explains the choice.
    """

    code: Literal["native", "family"] = "native"
    native_patches: list[HostPath] = Field(default_factory=list)
    required: dict[str, Literal["native", "family", "ptx"]] = Field(default_factory=dict)


class Target(Strict):
    name: Name
    description: LabelText = ""
    device_name: LabelText
    platform: str
    cuda_version: CudaVersion
    cuda_arch: CudaArch
    torch_cuda_arch_list: ArchList
    flashinfer_cuda_arch_list: ArchList
    images: BaseImages
    python: PythonCommand = "python3"
    apt_packages: list[AptPackage] = Field(default_factory=list)
    torch: TorchSource = Field(default_factory=TorchSource)
    packages: dict[PackageName, Version] = Field(default_factory=dict)
    forbidden_packages: list[PackageName] = Field(default_factory=list)
    max_jobs: int = Field(default=4, ge=1, le=1024)
    nvcc_threads: int = Field(default=1, ge=1, le=1024)
    min_disk_gb: float = Field(default=0, ge=0, allow_inf_nan=False)
    # The most the image's layers may add up to (GB, 1e9 bytes); over it the build fails, naming
    # the largest layers (builder/tail.py). None: no budget.
    size_budget_gb: PositiveFloat | None = None
    # CMake targets of the tree's setup.py that every compile for this target leaves out, each with
    # why (builder/subset/plan.py: dropped from its one `cmake --build`, their installs skipped; in
    # the
    # compile key, the lock and the image's label). Spark and Thor: FlashAttention 3 (sm_90a only).
    leave_out: dict[PythonModule, LabelText] = Field(default_factory=dict)
    runtime_env: dict[EnvName, Line] = Field(default_factory=dict)
    default_mods: list[ModName] = Field(default_factory=list)
    probe: ProbeDefaults = Field(default_factory=ProbeDefaults)
    prebuilt: PrebuiltDefaults = Field(default_factory=PrebuiltDefaults)
    kernel_plan: KernelPlanPolicy = Field(default_factory=KernelPlanPolicy)
    launch: LaunchDefaults = Field(default_factory=LaunchDefaults)
    # Peak DRAM bandwidth (GB/s, 1e9 bytes/s): the divisor of the decode roofline (inv roofline).
    memory_bandwidth_gbps: PositiveFloat | None = None

    @field_validator("platform")
    @classmethod
    def _platform(cls, value: str) -> str:
        if not re.fullmatch(r"linux/(arm64|amd64)", value):
            raise ValueError(f"'{value}' must be linux/arm64 or linux/amd64")
        return value

    @field_validator("leave_out")
    @classmethod
    def _leave_out(cls, value: dict[str, str]) -> dict[str, str]:
        unsaid = [name for name, why in value.items() if not why.strip()]
        if unsaid:
            raise ValueError(f"{', '.join(unsaid)}: say why the target leaves it out "
                             "(it reaches the build log, the lock and the label)")
        return value

    @property
    def sm(self) -> str:
        """``11.0a`` → ``sm_110a``."""
        major, minor = self.cuda_arch.rstrip("af").split(".")
        suffix = self.cuda_arch[-1] if self.cuda_arch[-1] in "af" else ""
        return f"sm_{major}{minor}{suffix}"


def target_files() -> dict[str, Path]:
    """Every target file by name; a later folder overrides an earlier one of the same name."""
    found: dict[str, Path] = {}
    for folder in data_dirs("targets"):
        if folder.is_dir():
            for path in sorted(folder.glob("*.yaml")):
                found[path.stem] = path
    return found


def load_target(name: str) -> Target:
    files = target_files()
    if name not in files:
        known = ", ".join(sorted(files)) or "none"
        raise UnknownTargetError(
            f"unknown target '{name}' (known: {known}); add targets/{name}.yaml to define it")
    target = load_model(Target, files[name], UnknownTargetError)
    if target.name != name:
        raise UnknownTargetError(
            f"{files[name]}: field 'name' is '{target.name}' but the file is named '{name}.yaml'")
    return target


def resolve_cuda_target(text: str) -> tuple[str, "CudaArch"]:
    """``("thor", CudaArch(11, 0))`` for a target name; ``("sm_121a", CudaArch(12, 1))`` for an
    arch spelling that ``edgevllm.specs.cuda.parse_device`` accepts (``12.1a``, ``121a`` ...)."""
    from edgevllm.specs.cuda import ArchParseError, looks_like_arch, parse_device

    name = str(text).strip()
    if looks_like_arch(name):
        return name, parse_device(name)
    try:
        return name, parse_device(load_target(name).cuda_arch)
    except ArchParseError as exc:
        raise UnknownTargetError(f"target '{name}': cuda_arch {exc}") from None


def all_targets() -> list[Target]:
    return [load_target(name) for name in sorted(target_files())]


def device_target(description: str | None = None) -> tuple[str, str] | None:
    """(target name, what the machine said) when this machine is one of the targets' devices:
    the last word of a target's ``device_name`` (``Thor``, ``GB10``) in its description."""
    from edgevllm.containers.host import device_description

    said = device_description() if description is None else description
    for target in all_targets():
        mark = target.device_name.split()[-1].lower()
        if said and re.search(rf"\b{re.escape(mark)}\b", said.lower()):
            return target.name, said
    return None
