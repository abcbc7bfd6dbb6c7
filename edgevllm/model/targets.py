"""Build targets (Thor, Spark, ...) as data: one YAML file per target under ``targets/``.

A user adds a target by adding a file (here, or in a folder named by ``EDGEVLLM_TARGETS_PATH``).
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field, field_validator

from edgevllm.kernel.errors import UnknownTargetError
from edgevllm.kernel.paths import data_dirs
from edgevllm.kernel.schema import Strict, load_model

_ARCH = re.compile(r"^\d+\.\d+[af]?$")




class BaseImages(Strict):
    build: str
    runtime: str


class TorchSource(Strict):
    """Where torch comes from. ``version: null`` means the base image already provides it."""

    version: str | None = None
    index_url: str | None = None


class ProbeDefaults(Strict):
    required_imports: list[str] = Field(default_factory=list)
    level2_model: str | None = None
    serve_args: list[str] = Field(default_factory=list)


class Target(Strict):
    name: str
    description: str = ""
    device_name: str
    platform: str
    cuda_version: str
    cuda_arch: str
    torch_cuda_arch_list: str
    flashinfer_cuda_arch_list: str
    images: BaseImages
    python: str = "python3"
    apt_packages: list[str] = Field(default_factory=list)
    torch: TorchSource = Field(default_factory=TorchSource)
    packages: dict[str, str] = Field(default_factory=dict)
    forbidden_packages: list[str] = Field(default_factory=list)
    max_jobs: int = Field(default=4, ge=1)
    nvcc_threads: int = Field(default=1, ge=1)
    min_disk_gb: float = 0
    runtime_env: dict[str, str] = Field(default_factory=dict)
    default_mods: list[str] = Field(default_factory=list)
    probe: ProbeDefaults = Field(default_factory=ProbeDefaults)

    @field_validator("cuda_arch")
    @classmethod
    def _arch(cls, value: str) -> str:
        if not _ARCH.match(value):
            raise ValueError(f"'{value}' is not a compute capability like 11.0a or 12.1a")
        return value

    @field_validator("platform")
    @classmethod
    def _platform(cls, value: str) -> str:
        if not re.match(r"^linux/(arm64|amd64)$", value):
            raise ValueError(f"'{value}' must be linux/arm64 or linux/amd64")
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


def all_targets() -> list[Target]:
    return [load_target(name) for name in sorted(target_files())]
