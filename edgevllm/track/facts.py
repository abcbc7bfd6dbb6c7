"""What one vLLM tree (an sdist's files, read as data) says for ``inv track``: its pins, the
outcome of each source patch, each mod's range against its pins, and its kernel plan.

Pins come from the tree's requirement files (``sources/buildreqs``: bounded, each line parsed)
and from its CMake files read as text (``GIT_TAG`` and the ``set(VAR "...")`` it names; nothing
of CMake runs for them). Patches are decided by the build's own ``apply_patch`` on this scratch
tree; the plan by ``sources/plan`` in its sandbox, after the patches, as a build does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from edgevllm.common.dataload import load_text
from edgevllm.common.errors import EdgeVllmError, ModFailedError, RefNotFoundError, SourceError
from edgevllm.common.requirements import requirement
from edgevllm.mods.catalog import get_mod
from edgevllm.mods.patches import apply_patch, load_patches
from edgevllm.sources.buildreqs import REQUIREMENT_FILES, RUNTIME_FILES, read_requirement_tree
from edgevllm.sources.gitcache import GitMirror
from edgevllm.sources.plan import check_target, patches_skipped, plan_for_target
from edgevllm.specs.outcomes import FAILED, NOT_APPLICABLE

CMAKE_MAX_BYTES = 4 << 20
# The pins the report names: (label, where: "req:<package>" or "cmake:<file>[:<variable>]").
PINS: tuple[tuple[str, str], ...] = (
    ("torch", "req:torch"),
    ("FlashInfer", "req:flashinfer-python"),
    ("Triton", "req:triton"),
    ("Triton kernels", "cmake:cmake/external_projects/triton_kernels.cmake"),
    ("CUTLASS", "cmake:CMakeLists.txt:CUTLASS_REVISION"),
    ("CuTe DSL", "req:nvidia-cutlass-dsl"),
    ("flash-attention", "cmake:cmake/external_projects/vllm_flash_attn.cmake"),
    ("FlashMLA", "cmake:cmake/external_projects/flashmla.cmake"),
    ("DeepGEMM", "cmake:cmake/external_projects/deepgemm.cmake"),
    ("CUDA", "cuda"),
)
_GIT_TAG = re.compile(r"^[ \t]*GIT_TAG[ \t]+\"?([^\s\")]+)\"?", re.M)
_VAR = re.compile(r"^\$\{([A-Za-z0-9_]+)\}\Z")
_CUDA_INDEX = re.compile(r"download\.pytorch\.org/whl/(?:[a-z]+/)?(cu\d{3})\b")
NOT_PINNED = "-"
REFUSED = "refused"  # the build's requirement gate refused the tree's files


def _set_value(text: str, variable: str) -> str | None:
    found = re.search(r"^[ \t]*set[ \t]*\([ \t]*" + re.escape(variable) + r"[ \t]+\"?([^\s\")]+)",
                      text, re.M | re.I)
    return found[1] if found else None


def cmake_pin(tree: Path, where: str) -> str:
    """A CMake dependency's tag as text: ``set(VARIABLE "...")``, else the first ``GIT_TAG``
    (through the ``set`` of the variable it names)."""
    file, _, variable = where.partition(":")
    path = tree / file
    if not path.is_file():
        return NOT_PINNED
    text = load_text(path, SourceError, CMAKE_MAX_BYTES)
    if variable:
        return _set_value(text, variable) or NOT_PINNED
    tag = _GIT_TAG.search(text)
    if tag is None:
        return NOT_PINNED
    named = _VAR.match(tag[1])
    return (_set_value(text, named[1]) or tag[1]) if named else tag[1]


def requirement_lines(tree: Path) -> list[str]:
    """The tree's runtime and build requirement lines (``-r`` followed), runtime first."""
    lines: list[str] = []
    for candidates in (RUNTIME_FILES, REQUIREMENT_FILES):
        found = next((f for f in candidates if (tree / f).is_file()), None)
        if found:
            lines += [line for line, _ in read_requirement_tree(tree, found)]
    return lines


def package_pin(lines: list[str], name: str) -> str:
    """The first specifier the lines give ``name`` (``==2.14.0`` reads ``2.14.0``)."""
    for line in lines:
        req = requirement(line, "requirement", SourceError)
        if req.name.lower() == name:
            spec = str(req.specifier)
            return spec[2:] if spec.startswith("==") and "," not in spec else (spec or "any")
    return NOT_PINNED


def cuda_pin(tree: Path) -> str:
    for name in (*REQUIREMENT_FILES, *RUNTIME_FILES):
        path = tree / name
        if path.is_file():
            found = _CUDA_INDEX.search(load_text(path, SourceError, CMAKE_MAX_BYTES))
            if found:
                return found[1]
    return NOT_PINNED


def pins(tree: Path, lines: list[str] | None) -> dict[str, str]:
    """Every pin of ``PINS``; ``lines``: the tree's requirement lines, None where the build's
    gate refused them (those pins then read ``REFUSED``)."""
    out: dict[str, str] = {}
    for label, where in PINS:
        kind, _, rest = where.partition(":")
        if kind == "req":
            out[label] = REFUSED if lines is None else package_pin(lines, rest)
        elif kind == "cmake":
            out[label] = cmake_pin(tree, rest)
        else:
            out[label] = cuda_pin(tree)
    return out


def exact_versions(lines: list[str]) -> dict[str, str]:
    """Package -> version the lines pin exactly (``==``), the first line naming it."""
    out: dict[str, str] = {}
    for line in lines:
        req = requirement(line, "requirement", SourceError)
        spec = list(req.specifier)
        if len(spec) == 1 and spec[0].operator == "==" and "*" not in spec[0].version:
            out.setdefault(req.name.lower(), spec[0].version)
    return out


# --- patches ----------------------------------------------------------------------------------
@dataclass
class PatchVerdict:
    name: str
    outcome: str          # applied | already-applied | not-applicable | failed | skipped
    detail: str


def apply_patches(tree: Path, target, version: str) -> list[PatchVerdict]:
    """Every source patch for ``target`` applied to ``tree`` as the build applies it (the ones
    the target's ``kernel_plan.code`` turns off: skipped)."""
    skipped = patches_skipped(target)
    out = []
    for patch in load_patches():
        if target.name not in patch.manifest.targets:
            continue
        if patch.name in skipped:
            out.append(PatchVerdict(patch.name, "skipped", "the target's kernel_plan.code "
                                                           "turns it off"))
            continue
        try:
            result = apply_patch(patch, tree, version)
        except ModFailedError as exc:
            out.append(PatchVerdict(patch.name, FAILED, exc.message))
            continue
        out.append(PatchVerdict(patch.name, result["outcome"], result["detail"]))
    return out


# --- mods -------------------------------------------------------------------------------------
@dataclass
class ModVerdict:
    name: str
    verdict: str                  # applies | retire | not-applicable | unknown | no-range
    ranges: dict[str, str] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)  # package -> (old → new)
    detail: str = ""


def _inside(version: str | None, spec: str) -> bool | None:
    if version is None:
        return None
    try:
        return SpecifierSet(spec).contains(Version(version), prereleases=True)
    except InvalidVersion:
        return None


def mod_verdict(name: str, old: dict[str, str], new: dict[str, str]) -> ModVerdict:
    """A mod's declared ranges against the versions the old and new trees pin: the version-range
    verdict (the applier's own outcome on the new wheels is ``modcheck``'s)."""
    ranges = dict(get_mod(name).manifest.applies_to)
    if not ranges:
        return ModVerdict(name, "no-range", detail="no version range: the applier decides by "
                                                   "the installed files' content")
    versions = {pkg: f"{old.get(pkg, '?')} → {new.get(pkg, '?')}" for pkg in ranges}
    now = {pkg: _inside(new.get(pkg), spec) for pkg, spec in ranges.items()}
    before = {pkg: _inside(old.get(pkg), spec) for pkg, spec in ranges.items()}
    if any(v is None for v in now.values()):
        unknown = ", ".join(p for p, v in now.items() if v is None)
        return ModVerdict(name, "unknown", ranges, versions,
                          f"the new tree pins no exact version of {unknown}")
    if all(now.values()):
        return ModVerdict(name, "applies", ranges, versions, "the new pins are inside its range")
    out = ", ".join(f"{p} {new[p]} outside {ranges[p]}" for p, v in now.items() if not v)
    if all(v is not False for v in before.values()):
        return ModVerdict(name, "retire", ranges, versions, f"{out}: upstream's new pin no "
                                                             "longer needs it")
    return ModVerdict(name, NOT_APPLICABLE, ranges, versions, out)


# --- the kernel plan --------------------------------------------------------------------------
def plan_changes(old: dict, new: dict) -> list[dict]:
    """Extensions and kernel groups added, removed or whose arches or kind changed."""
    rows: list[dict] = []
    for section, field_name in (("extensions", "arches"), ("groups", "gets")):
        before, after = old.get(section, {}), new.get(section, {})
        for key in sorted(set(before) | set(after)):
            was, now = before.get(key), after.get(key)
            if was == now or (was and now and was.get(field_name) == now.get(field_name)
                              and was.get("kind") == now.get("kind")):
                continue
            change = "added" if was is None else "removed" if now is None else "changed"
            rows.append({"what": section[:-1], "name": key, "change": change,
                         "old": _arches(was, field_name), "new": _arches(now, field_name)})
    return rows


def _arches(entry: dict | None, field_name: str) -> str:
    if not entry:
        return NOT_PINNED
    return f"{';'.join(entry.get(field_name) or []) or 'none'} ({entry.get('kind', '?')})"


def plan_or_error(tree: Path, target, torch_version: str) -> tuple[dict | None, str, str]:
    """The tree's kernel plan for ``target`` as the lock records it (``KernelPlan.summary``),
    the one line why there is none, and the one line of a group the target needs that gets too
    little (``check_target``); a report goes on without the plan."""
    try:
        plan = plan_for_target(tree, target, torch_version=torch_version, check=False)
    except EdgeVllmError as exc:
        return None, exc.message, ""
    try:
        check_target(plan, target)
    except EdgeVllmError as exc:
        return plan.summary(), "", exc.message
    return plan.summary(), "", ""


# --- cherry-picks -----------------------------------------------------------------------------
NO_GITHUB = "unknown (no GitHub access: track reads PyPI and the git cache only)"
_FULL_SHA = re.compile(r"^[0-9a-f]{40}\Z")


def pick_verdict(repo: str, head_sha: str | None, version: str,
                 commit: str | None = None) -> tuple[str, bool]:
    """Whether the pick's head (a lock's ``head_sha``, or a pick given as a full SHA) is in
    release ``version``'s tag (or in ``commit``, what ``--to REF`` named), from the git cache's
    mirror of ``repo`` alone (nothing fetched): (what is known, retire). A squash-merged PR's
    head is never in the tag: only GitHub knows."""
    mirror = GitMirror(repo)
    if not head_sha or not _FULL_SHA.match(head_sha) or not (mirror.path / "HEAD").exists():
        return NO_GITHUB, False
    with mirror.locked():
        if not mirror.has_commit(head_sha):
            return f"{NO_GITHUB}; the git cache lacks {head_sha[:12]}", False
        name = commit[:12] if commit else f"v{version}"
        try:
            tag = commit or mirror.rev_parse(f"refs/tags/v{version}")
        except RefNotFoundError:
            return f"{NO_GITHUB}; the git cache lacks tag v{version}", False
        if mirror.is_ancestor(head_sha, tag):
            return f"merged: {head_sha[:12]} is in {name} (git cache): retire it", True
        return (f"not in {name} as-is (git cache; a squash merge shows only on GitHub)",
                False)
