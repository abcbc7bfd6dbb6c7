"""Source patches: edits to the prepared vLLM tree on the host, before the compile.

A patch is a folder ``patches/<name>/`` with ``patch.yaml``: the targets it is for, the vLLM
versions it ``applies_to``, ``upstream_fixed`` content checks (a regex that means upstream already
does it) and ``edits`` (anchored replacements or a unified diff, as in mods). Outcomes are those
of mods: applied, already-applied, not-applicable (version outside the range, or upstream already
fixed; named), failed (the file is not what the patch expects; raises ModFailedError).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import Field, field_validator

from edgevllm.common.dataload import load_text
from edgevllm.common.errors import ManifestError, ModFailedError
from edgevllm.common.fsutil import atomic_write_text
from edgevllm.common.paths import data_dirs
from edgevllm.common.schema import Strict, check_regex, load_model
from edgevllm.mods.inimage_applier import StepFailed, apply_unified_diff, plan_replacements
from edgevllm.mods.manifest import Edit
from edgevllm.specs.outcomes import ALREADY_APPLIED, APPLIED, NOT_APPLICABLE

PATCH_FILE = "patch.yaml"
# A file of the tree a patch edits (vLLM's CMakeLists.txt: about 60 KiB), read whole: bounded.
PATCHED_FILE_MAX_BYTES = 4 << 20




class ContentCheck(Strict):
    path: str
    regex: str

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str) -> str:
        return check_regex(value)


class PatchManifest(Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    version: str = Field(min_length=1)
    description: str = Field(min_length=1)
    targets: list[str] = Field(min_length=1)
    applies_to: dict[str, str] = Field(default_factory=dict)  # only "vllm" is known here
    upstream_fixed: list[ContentCheck] = Field(default_factory=list)
    edits: list[Edit] = Field(min_length=1)  # in the prepared vLLM tree

    @field_validator("applies_to")
    @classmethod
    def _ranges(cls, value: dict[str, str]) -> dict[str, str]:
        for package, spec in value.items():
            if package != "vllm":
                raise ValueError(f"source patches range over 'vllm' only, not '{package}'")
            try:
                SpecifierSet(spec)
            except InvalidSpecifier:
                raise ValueError(f"'{spec}' is not a version specifier like '>=0.20,<0.34'") \
                    from None
        return value


@dataclass
class SourcePatch:
    manifest: PatchManifest
    folder: Path

    @property
    def name(self) -> str:
        return self.manifest.name


def load_patches() -> list[SourcePatch]:
    found: dict[str, SourcePatch] = {}
    for root in data_dirs("patches"):
        for path in sorted(root.glob(f"*/{PATCH_FILE}")) if root.is_dir() else []:
            manifest = load_model(PatchManifest, path, ManifestError)
            if manifest.name != path.parent.name:
                raise ManifestError(f"{path}: field 'name' is '{manifest.name}' but the folder "
                                    f"is '{path.parent.name}'; make them the same")
            if manifest.name in found:
                raise ManifestError(f"{path}: patch '{manifest.name}' is defined twice")
            found[manifest.name] = SourcePatch(manifest, path.parent)
    return list(found.values())


def _version_miss(patch: SourcePatch, vllm_version: str | None) -> str | None:
    spec = patch.manifest.applies_to.get("vllm")
    if not spec or vllm_version is None:
        return None
    try:
        version = Version(vllm_version)
    except InvalidVersion:
        return None  # a bare commit or branch: the content checks decide
    if not SpecifierSet(spec).contains(version, prereleases=True):
        return f"vllm {vllm_version} is outside {spec}"
    return None


def apply_patch(patch: SourcePatch, tree: Path, vllm_version: str | None) -> dict:
    """Apply one patch to ``tree``; returns its outcome dict (raises only on 'failed')."""
    files: list[str] = []
    result = {"name": patch.name, "version": patch.manifest.version,
              "vllm_version": vllm_version, "files": files}
    miss = _version_miss(patch, vllm_version)
    if miss:
        return dict(result, outcome=NOT_APPLICABLE, detail=miss)
    basis = "" if vllm_version else " (vLLM version unknown: decided by file content)"
    planned: list[tuple[Path, str, str]] = []
    notes: list[str] = []
    for edit in patch.manifest.edits:
        path = tree / edit.path
        if not path.is_file():
            raise _failed(patch, vllm_version, f"file {edit.path} is missing from the tree")
        text = _tree_file(patch, vllm_version, path)
        try:
            new, note = _edit_text(patch, edit, text, str(edit.path))
        except StepFailed as exc:
            fixed = _upstream_fixed(patch, tree)
            if fixed:
                return dict(result, outcome=NOT_APPLICABLE, detail=fixed + basis)
            raise _failed(patch, vllm_version, str(exc)) from None
        notes.append(note)
        planned.append((path, text, new))
    if all(n == "already" for n in notes):
        return dict(result, outcome=ALREADY_APPLIED, detail="edits already present" + basis)
    for path, old, new in planned:
        if new != old:
            atomic_write_text(path, new)
            files.append(str(path.relative_to(tree)))
    return dict(result, outcome=APPLIED, detail=f"edited {', '.join(files)}{basis}")


def _edit_text(patch: SourcePatch, edit: Edit, text: str, where: str) -> tuple[str, str]:
    if edit.diff:
        return apply_unified_diff(text, (patch.folder / edit.diff).read_text(), where)
    replacements = [r.model_dump(exclude_none=True) for r in edit.replacements]
    new, notes = plan_replacements(text, replacements, where)
    return new, "already" if all(n == "already" for n in notes) else "changed"


def _upstream_fixed(patch: SourcePatch, tree: Path) -> str | None:
    for check in patch.manifest.upstream_fixed:
        path = tree / check.path
        if path.is_file() and re.search(check.regex, load_text(path, ModFailedError,
                                                                PATCHED_FILE_MAX_BYTES)):
            return f"upstream already does this ({check.path} matches the upstream_fixed check)"
    return None


def _tree_file(patch: SourcePatch, vllm_version: str | None, path: Path) -> str:
    """A file of the tree a patch edits: bounded and UTF-8, else the patch fails in one line."""
    try:
        return load_text(path, ModFailedError, PATCHED_FILE_MAX_BYTES)
    except ModFailedError as exc:
        raise _failed(patch, vllm_version, str(exc)) from None


def _failed(patch: SourcePatch, vllm_version: str | None, message: str) -> ModFailedError:
    return ModFailedError(f"patch {patch.name}: vllm {vllm_version or '(version unknown)'}: "
                          f"{message}")


def apply_source_patches(tree: Path, target_name: str, vllm_version: str | None) -> list[dict]:
    """Apply every patch meant for ``target_name`` to the vLLM ``tree``; outcome dicts in order.

    A patch that fails raises ModFailedError (one line naming patch, version, file and anchor):
    the build stops before the compile.
    """
    outcomes = []
    for patch in load_patches():
        if target_name in patch.manifest.targets:
            outcomes.append(apply_patch(patch, Path(tree), vllm_version))
    return outcomes
