"""A mod's manifest (``mods/<name>/manifest.yaml``): its schema, one model per step kind (the
applier's ``STEP_KINDS``, held equal by tests/test_mods_catalog.py), and a mod loaded from its
folder with its data files checked. Unknown fields are refused (pydantic, ``Strict``); every
problem is one line naming the file and field. Which mods exist, which a build selects and
how they are staged: ``mods/catalog.py``."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, Union

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import Field, field_validator, model_validator

from edgevllm.common.errors import ManifestError
from edgevllm.common.grammar import PackageName, Requirement, Version
from edgevllm.common.schema import Strict, load_model
from edgevllm.specs.modselect import MANIFEST

_NAME = r"^[a-z0-9][a-z0-9-]*$"




def _check_ranges(value: dict[str, str]) -> dict[str, str]:
    for package, spec in value.items():
        try:
            SpecifierSet(spec)
        except InvalidSpecifier:
            raise ValueError(f"'{spec}' for {package} is not a version specifier like "
                             "'>=4.4,<4.5'") from None
    return value


class StepBase(Strict):
    title: str = ""
    # The step runs only where these installed versions match (others: not-applicable).
    applies_to: dict[str, str] = Field(default_factory=dict)

    @field_validator("applies_to")
    @classmethod
    def _ranges(cls, value: dict[str, str]) -> dict[str, str]:
        return _check_ranges(value)


class Replacement(Strict):
    anchor: str = Field(min_length=1)
    replacement: str
    in_class: str | None = None
    count: int = Field(default=1, ge=1)

    @model_validator(mode="after")
    def _differs(self) -> "Replacement":
        if self.anchor == self.replacement:
            raise ValueError("replacement is the same as anchor")
        return self


class Edit(Strict):
    """One file's edit: anchored replacements or a unified diff, never both (a mod's edit step,
    a source patch's edit)."""

    path: str
    replacements: list[Replacement] = Field(default_factory=list)
    diff: str | None = None

    @model_validator(mode="after")
    def _one_way(self) -> "Edit":
        if bool(self.replacements) == bool(self.diff):
            raise ValueError("give either 'replacements' or 'diff'")
        return self


class EditStep(StepBase, Edit):
    """Edit a file of an installed package."""

    kind: Literal["edit"]
    packages: list[str] = Field(min_length=1)


class PipInstallStep(StepBase):
    kind: Literal["pip_install"]
    # Data only (common/requirements.py): they join the closure uv resolves on the host.
    requirements: list[Requirement] = Field(min_length=1)
    no_deps: bool = False
    # Installed versions of these are passed to pip as constraints (torch stays the CUDA build).
    constrain: list[str] = Field(default_factory=lambda: ["torch", "torchvision", "torchaudio",
                                                          "triton"])


class DistFilesStep(StepBase):
    kind: Literal["dist_files"]
    package: PackageName   # with version: a requirement of the closure (_pip_packages)
    version: Version | None = None
    version_from: str | None = None
    # The distribution that installs the same paths with other bytes (its copy must not win).
    over: str | None = None

    @model_validator(mode="after")
    def _version(self) -> "DistFilesStep":
        if not (self.version or self.version_from):
            raise ValueError("give 'version' or 'version_from'")
        return self


class FilesStep(StepBase):
    kind: Literal["files"]
    source: str
    dest: str | None = None
    package: str | None = None
    package_path: str | None = None

    @model_validator(mode="after")
    def _where(self) -> "FilesStep":
        if bool(self.dest) == bool(self.package and self.package_path):
            raise ValueError("give either 'dest' (absolute) or 'package' with 'package_path'")
        if self.dest and not self.dest.startswith("/"):
            raise ValueError("'dest' must be an absolute path")
        return self


class SymlinkStep(StepBase):
    kind: Literal["symlink"]
    link: str
    target: str


class LibraryLinkStep(StepBase):
    kind: Literal["library_link"]
    name: str
    pattern: str
    dirs: list[str] = Field(default_factory=list)
    packages: list[str] = Field(default_factory=list)
    # Run ldconfig (adding the folders under /etc/ld.so.conf.d) when the new link does not
    # resolve by its bare name yet: the loader's cache predates it.
    ldconfig: bool = True


class EnvStep(StepBase):
    kind: Literal["env"]
    vars: dict[str, str] = Field(min_length=1)

    @field_validator("vars")
    @classmethod
    def _names(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
                raise ValueError(f"'{key}' is not an environment variable name")
        return value


class VerifyStep(StepBase):
    kind: Literal["verify"]
    python: str = Field(min_length=1)


class Download(Strict):
    """A file an eugr script downloads: fetched by the build on the host (mods/downloads.py),
    pinned in the lock; ``sha256`` when the import knew it."""

    url: str = Field(pattern=r"^https?://\S+$")
    file: str = Field(min_length=1)  # in the staged mod folder
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")


class ScriptStep(StepBase):
    """An eugr mod's ``run.sh`` (``inv build --add-mod PATH``), run in the image build with
    ``WORKSPACE_DIR``, ``PYTHON_ROOT`` and the image's Python; ``downloads`` answer its
    wget/curl calls. The files it writes are part of the image."""

    kind: Literal["script"]
    run: str = Field(min_length=1)
    workspace: str = Field(default="/workspace", pattern=r"^/")
    downloads: list[Download] = Field(default_factory=list)


Step = Annotated[Union[EditStep, PipInstallStep, DistFilesStep, FilesStep, SymlinkStep,
                       LibraryLinkStep, EnvStep, VerifyStep, ScriptStep],
                 Field(discriminator="kind")]


class Manifest(Strict):
    name: str = Field(pattern=_NAME)
    version: str = Field(min_length=1)
    description: str = Field(min_length=1)
    targets: list[str] = Field(min_length=1)
    applies_to: dict[str, str] = Field(default_factory=dict)
    # For data mods (e.g. MoE configs): whether the data was measured on the device.
    tuned: bool | None = None
    steps: list[Step] = Field(min_length=1)

    @field_validator("applies_to")
    @classmethod
    def _ranges(cls, value: dict[str, str]) -> dict[str, str]:
        return _check_ranges(value)


@dataclass
class Mod:
    manifest: Manifest
    folder: Path

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        for step in self.manifest.steps:
            if isinstance(step, EnvStep):
                env.update(step.vars)
        return env

    def digest(self) -> str:
        """sha256 over the manifest and every data file: changes when the mod changes."""
        digest = hashlib.sha256()
        for path in sorted(p for p in self.folder.rglob("*") if p.is_file()):
            if "__pycache__" in path.parts:
                continue
            digest.update(path.relative_to(self.folder).as_posix().encode() + b"\0")
            digest.update(path.read_bytes())
        return digest.hexdigest()

    def lock_version(self) -> str:
        return f"{self.manifest.version}+{self.digest()[:12]}"



# --- loading -----------------------------------------------------------------------------------
def load_mod(folder: Path) -> Mod:
    path = folder / MANIFEST
    manifest = load_model(Manifest, path, ManifestError)
    if manifest.name != folder.name:
        raise ManifestError(f"{path}: field 'name' is '{manifest.name}' but the folder is "
                            f"'{folder.name}'; make them the same")
    for index, step in enumerate(manifest.steps):
        for rel in _data_refs(step):
            if not (folder / rel).exists():
                raise ManifestError(f"{path}: field 'steps.{index}': data '{rel}' is missing "
                                    f"from {folder}")
        for download in step.downloads if isinstance(step, ScriptStep) else []:
            fetched = folder / download.file  # an older import fetched it; else the build does
            if fetched.is_file() and download.sha256 and \
                    hashlib.sha256(fetched.read_bytes()).hexdigest() != download.sha256:
                raise ManifestError(f"{path}: field 'steps.{index}': {download.file} does not "
                                    f"match its sha256 (from {download.url}); import the mod "
                                    "again")
    return Mod(manifest, folder)


def _data_refs(step) -> list[str]:
    if isinstance(step, FilesStep):
        return [step.source]
    if isinstance(step, EditStep) and step.diff:
        return [step.diff]
    if isinstance(step, ScriptStep):
        return [step.run]
    return []
