"""A build mode's record: every fact about a mode that code outside its module asks, as data.

Each mode's record is a YAML file beside its module (``builder/modes/<name>.yaml``, validated
here): where its kernels come from, which of the target's bases it builds on, where its vLLM
comes from, the disk it asks, the verify gate, its stages, the folders of its own its plan
passes, the base images its stages start from; and what follows from them: whether it compiles,
takes its kernels from a release, checks the tree. The mode rule (``specs/moderule.choose_mode``)
says which mode a build is and refuses what its record cannot honour; everything else asks that
mode's record (``EffectiveSpec.record``, ``mode_record``), never compares the mode's name
(``tests/test_specs_moderecord.py`` holds both). The records are read
here, in the specs layer, because the spec's defaults (``buildspec.resolve``) depend on them;
the builder's registry (``builder/modes/__init__.py`` ``MODES``) has one module per record.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Literal

from pydantic import model_validator

from edgevllm.common.errors import SpecError
from edgevllm.common.grammar import Line, Name
from edgevllm.common.schema import Strict, load_model

# Beside the mode modules (data, not an import: the builder sits above this layer).
RECORDS_DIR = Path(__file__).resolve().parents[1] / "builder" / "modes"
# The folders records are read from, in order (a test adds a throwaway mode's folder).
RECORD_DIRS: tuple[Path, ...] = (RECORDS_DIR,)
# The mode of a lock that records none: every lock before the modes was a compile's.
LEGACY_MODE = "compile"


class ModeRecord(Strict):
    """One mode's facts (the file's name is the mode's)."""

    summary: Line
    # vLLM's compiled kernels: a release wheel's (stock) or compiled for the target's arch list
    # (only then does a compile toolchain, native, cross or emulated, apply)
    kernels: Literal["release", "compiled"]
    # the target's bases: prebuilt-image (the target's ``prebuilt:`` image, Python and packages
    # for every stage) or devel-image (its ``images:``: the devel image builds with the build
    # toolchain; the lean runtime base runs with the prebuilt packages, no compiler)
    base: Literal["prebuilt-image", "devel-image"]
    # where the stage vllm-files takes vLLM from: the release wheel in the ``wheelhouse``
    # context, or the ``wheels`` stage (exported, then passed as a context)
    vllm_from: Literal["wheelhouse", "wheels"]
    # the free disk asked: the target's closure figure (``prebuilt.min_disk_gb``) or its compile
    # figure (``min_disk_gb``; the closure's where the compiled wheels are reused)
    disk: Literal["closure", "compile"]
    # the verify gate, at build time and in ``inv verify`` of its image: stock (the stock-kernel
    # policy, ``verify/policy-stock.yaml``) or default (``verify/policy.yaml``)
    gate: Literal["stock", "default"]
    stages: tuple[Literal["wheels", "runtime"], ...]  # the build targets, in order
    tree: bool                   # whether it builds a prepared vLLM tree (``vllm-src``)
    contexts: tuple[Name, ...]   # its own folders the plan passes (the tree's, mods, meta too)
    bases: tuple[Literal["build", "runtime", "bytecode"], ...]  # the bases its stages start from

    # What the mode does, as the mode rule (specs/moderule.py) and everyone else asks it: facts
    # that follow from the fields above, so a record cannot contradict them.
    @property
    def compiles(self) -> bool:
        """Whether the mode compiles vLLM's kernels (and a compile toolchain applies): it
        honours --extensions and FlashInfer from source."""
        return self.kernels == "compiled"

    @property
    def kernels_from_release(self) -> bool:
        """Whether its kernels are a released wheel's: it honours --vllm-wheel (the release)."""
        return self.kernels == "release"

    @property
    def checks_tree(self) -> bool:
        """Whether it installs a prepared tree over a release's kernels: the tree's change must
        then be Python-only (``sources.pythononly``), checked before it builds."""
        return self.tree and self.kernels_from_release

    @model_validator(mode="after")
    def _consistent(self) -> ModeRecord:
        if self.stages[-1:] != ("runtime",):
            raise ValueError("stages: the last build target is runtime")
        if (self.vllm_from == "wheels") != ("wheels" in self.stages):
            raise ValueError("vllm_from: wheels exactly where a wheels stage exports them")
        if not {"runtime", "bytecode"} <= set(self.bases):
            raise ValueError("bases: every mode's image starts from runtime and bytecode")
        if "wheelhouse" not in self.contexts:
            raise ValueError("contexts: every mode installs its closure from wheelhouse")
        return self


@functools.cache
def _load(folders: tuple[Path, ...]) -> dict[str, ModeRecord]:
    found: dict[str, ModeRecord] = {}
    for folder in folders:
        for path in sorted(folder.glob("*.yaml")):
            if path.stem in found:
                raise SpecError(f"{path}: mode '{path.stem}' has a record already")
            found[path.stem] = load_model(ModeRecord, path, SpecError)
    return found


def mode_records() -> dict[str, ModeRecord]:
    """Every mode's record, by the mode's name."""
    return dict(_load(RECORD_DIRS))


def mode_record(name: str) -> ModeRecord:
    """The record of mode ``name``; a name with none is one line."""
    records = _load(RECORD_DIRS)
    if name not in records:
        raise SpecError(f"mode '{name}': no such build mode (one of {', '.join(records)})")
    return records[name]


def check_mode(name: str) -> str:
    """A mode field's check (a spec's, a lock's): a mode that has a record."""
    records = _load(RECORD_DIRS)
    if name not in records:
        raise ValueError(f"expected one of {', '.join(sorted(records))}")
    return name
