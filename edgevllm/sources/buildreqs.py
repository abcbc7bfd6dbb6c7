"""What the compile stage installs and runs, read on the host from the prepared vLLM tree.

The build stage follows the tree, not guesses: ``read_build_layout(tree)`` finds

- the build requirements: ``pyproject.toml`` ``[build-system] requires`` plus the requirement
  file vLLM keeps for CUDA builds (``requirements/build/cuda.txt`` since 0.11, earlier
  ``requirements/build.txt``); torch and its companions are left out (the image's torch stays);
- ``use_existing_torch.py`` (``tools/`` in 0.33.0, the root in older trees) and whether it takes
  ``--prefix`` (strip only ``torch==``-style lines, as vLLM's own Dockerfile runs it);
- the setuptools range the tree asks for (vLLM 0.33.0: ``<81``; torch alone pulls 84): installing
  the requirements above with pip honours it, and it is shown in the plan;
- whether ``setup.py`` divides ``MAX_JOBS`` by ``NVCC_THREADS`` (vLLM does), so the build passes
  ``MAX_JOBS = jobs x nvcc_threads`` and gets exactly the target's number of compile jobs;
- the runtime requirements as the tree lists them for CUDA (``requirements/cuda.txt`` since 0.11,
  earlier ``requirements-cuda.txt``; ``-r`` includes followed inside the tree): what a compile's
  locked closure is resolved from (``builder/modes/compile.py``). Optional here: only a compile
  needs it, and it says so.

Every requirement line read here is data (``common/requirements.py``): a name, extras, a version
and a marker. A direct reference, a path, a VCS URL or an option line would make the resolver
build a project on the host; each is one SourceError naming the file and the line.

An expected file that is missing raises ``SourceError`` naming it, before any container starts;
the template renders what was found, with no ``if [ -f ]`` guesses. ``unread_layout()`` stands in
where no tree is prepared (``inv render``): its values are visible placeholders.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from edgevllm.common.dataload import load_text
from edgevllm.common.errors import SourceError
from edgevllm.common.requirements import requirement, where_in

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

# Newest layout first: the first file present is the one the tree's own build uses.
REQUIREMENT_FILES = ("requirements/build/cuda.txt", "requirements/build.txt")
USE_EXISTING_TORCH = ("tools/use_existing_torch.py", "use_existing_torch.py")
RUNTIME_FILES = ("requirements/cuda.txt", "requirements-cuda.txt")
# The image's torch is installed in the base stage; these must not be replaced by the build.
TORCH_FAMILY = frozenset({"torch", "torchvision", "torchaudio", "torchcodec"})
# A tree's text files read here (requirement files, pyproject.toml, setup.py): real ones are
# under 100 KiB; a larger one is refused before it is read, whatever the tree holds.
TREE_TEXT_MAX_BYTES = 1 << 20
MAX_INCLUDE_DEPTH = 16   # `-r` chains: vLLM's own go two deep (cuda.txt -> common.txt)
# A file the tree's requirement file names: ``-r`` (included) or ``-c`` (checked, adds nothing).
_INCLUDE = re.compile(r"^(-r|--requirement|-c|--constraint)[\s=]+([!-~]+)\Z")  # printable
_COMMENT = re.compile(r"(^|\s)#.*$")   # as pip reads them: '#' at the start or after a space
# vLLM's compute_num_jobs: ``num_jobs = max(1, num_jobs // nvcc_threads)``.
_DIVIDES_JOBS = re.compile(r"//\s*nvcc_threads\b")


@dataclass(frozen=True)
class BuildLayout:
    """The tree's build inputs, as paths relative to the tree and requirement strings."""

    requirements_file: str
    pyproject_requires: tuple[str, ...]
    use_existing_torch: str
    use_existing_torch_args: tuple[str, ...]
    setuptools: str          # the combined specifier, e.g. ">=78.1.1,<81.0.0" ("" = any)
    divides_jobs: bool
    # The build requirement file's lines, torch's family left out (a compile pins them by hash).
    build_requirements: tuple[str, ...] = ()
    builds_against_torch: bool = False   # the build requirement file names torch
    runtime_file: str = ""               # "" = the tree has none of RUNTIME_FILES
    # (requirement, the tree file that lists it), ``-r`` includes followed.
    runtime_requirements: tuple[tuple[str, str], ...] = ()

    def max_jobs_env(self, jobs: int, nvcc_threads: int) -> int:
        """The ``MAX_JOBS`` value that makes the tree's setup.py run ``jobs`` compile jobs."""
        return jobs * nvcc_threads if self.divides_jobs else jobs

    def summary(self) -> list[str]:
        return [f"build requirements: {self.requirements_file} + pyproject.toml "
                f"({len(self.pyproject_requires)} requires); setuptools{self.setuptools or ' any'}",
                f"torch kept: {self.use_existing_torch} {' '.join(self.use_existing_torch_args)}"
                .rstrip(),
                "jobs: setup.py divides MAX_JOBS by NVCC_THREADS" if self.divides_jobs
                else "jobs: setup.py uses MAX_JOBS as given"]


def unread_layout() -> BuildLayout:
    """Placeholders for a render without a prepared tree (the build reads the real one)."""
    return BuildLayout(requirements_file="<build requirements of the prepared tree>",
                       pyproject_requires=(),
                       use_existing_torch="<use_existing_torch.py of the tree>",
                       use_existing_torch_args=(), setuptools="", divides_jobs=True,
                       runtime_file="<runtime requirements of the prepared tree>")


def read_build_layout(tree: Path) -> BuildLayout:
    """The build layout of the vLLM tree at ``tree``; a missing expected file raises SourceError."""
    tree = Path(tree)
    setup_py = _required(tree, ("setup.py",), "vLLM's setup.py")
    requirements = _required(tree, REQUIREMENT_FILES, "vLLM's build requirement file")
    script = _required(tree, USE_EXISTING_TORCH, "vLLM's use_existing_torch.py")
    pyproject = _required(tree, ("pyproject.toml",), "pyproject.toml")
    pyproject_requires = read_pyproject_requires(tree / pyproject)
    build_lines = [line for line, _ in read_requirement_tree(tree, requirements)]
    listed = [*pyproject_requires, *build_lines]
    script_text = tree_text(tree / script)
    runtime_file = next((f for f in RUNTIME_FILES if (tree / f).is_file()), "")
    return BuildLayout(
        requirements_file=requirements,
        pyproject_requires=tuple(r for r in pyproject_requires if not is_torch_family(r)),
        use_existing_torch=script,
        use_existing_torch_args=("--prefix",) if "--prefix" in script_text else (),
        setuptools=str(combined_specifier(listed, "setuptools")),
        divides_jobs=bool(_DIVIDES_JOBS.search(tree_text(tree / setup_py))),
        build_requirements=tuple(r for r in build_lines if not is_torch_family(r)),
        builds_against_torch=any(_parse(r, requirements).name.lower() == "torch"
                                 for r in build_lines),
        runtime_file=runtime_file,
        runtime_requirements=tuple(read_requirement_tree(tree, runtime_file))
        if runtime_file else (),
    )


def inside(tree: Path, relative: str) -> str:
    """``relative`` where it stays inside ``tree`` once links are followed; a link out of the
    tree (to a host file whose lines an error would print) is one SourceError."""
    if not (tree / relative).resolve().is_relative_to(tree.resolve()):
        raise SourceError(f"{tree / relative}: a link out of the tree; the build reads only "
                          "files inside the tree")
    return relative


def _required(tree: Path, candidates: tuple[str, ...], what: str) -> str:
    for relative in candidates:
        if (tree / relative).is_file():
            return inside(tree, relative)
    names = " or ".join(candidates)
    raise SourceError(f"{tree}: {what} is missing (looked for {names}); the build follows the "
                      "tree, so give a vLLM tree that has it")


def tree_text(path: Path) -> str:
    """A text file of a tree, bounded: a larger one is one SourceError naming it."""
    return load_text(path, SourceError, TREE_TEXT_MAX_BYTES)


def read_pyproject(path: Path) -> dict:
    """``path`` as TOML; a malformed or oversized file raises SourceError naming it."""
    return _pyproject(path)[0]


def _pyproject(path: Path) -> tuple[dict, str]:
    """``path`` as TOML and its text (whose lines an error names)."""
    text = tree_text(path)
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as exc:
        raise SourceError(f"{path}: not valid TOML ({exc})") from None
    except RecursionError:   # tomllib descends once per nesting level: `a = [[[[…` in 1 MiB
        raise SourceError(f"{path}: nested too deeply to be a project's pyproject.toml; "
                          "check the tree") from None


def read_pyproject_requires(path: Path) -> list[str]:
    """``[build-system] requires`` of ``path``; a malformed file raises SourceError naming it."""
    data, text = _pyproject(path)
    return _build_requires(data, path, text)


def _table(data: object, *keys: str) -> dict:
    """``data[k1][k2]…`` where each is a TOML table, else {}: a tree's pyproject may hold any
    value under any key."""
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data if isinstance(data, dict) else {}


def _build_requires(data: dict, path: Path, text: str) -> list[str]:
    requires = _table(data, "build-system").get("requires")
    if not isinstance(requires, list) or not all(isinstance(r, str) for r in requires):
        raise SourceError(f"{path}: [build-system] requires is missing or not a list of strings")
    return _listed(requires, path, text, "[build-system] requires")


def _listed(items: list[str], path: Path, text: str, key: str) -> list[str]:
    """A pyproject's list of requirements, each checked as data (an error names its line)."""
    for index, item in enumerate(items):
        _parse(item, where_in(path, text, item, f"{key} item {index + 1}"))
    return list(items)


def _included(tree: Path, relative: str, seen: frozenset[str]) -> Path:
    """The file ``relative`` names, inside ``tree`` and not already in the chain ``seen``."""
    if len(seen) >= MAX_INCLUDE_DEPTH:   # each file is bounded, so is their chain
        raise SourceError(f"{tree / relative}: requirement files included more than "
                          f"{MAX_INCLUDE_DEPTH} deep; check the tree")
    try:
        path = (tree / relative).resolve()
        there = path.is_relative_to(tree.resolve()) and path.is_file()
    except (OSError, ValueError):   # a name too long for the filesystem, or with a NUL
        there = False
    if relative in seen or not there:
        raise SourceError(f"{tree / relative}: a requirement file the tree includes is missing, "
                          "outside the tree or included twice")
    return path


def read_requirement_tree(tree: Path, relative: str,
                          seen: frozenset[str] = frozenset()) -> list[tuple[str, str]]:
    """(requirement, file) for every line of ``relative`` and the files it includes with ``-r``
    (paths inside ``tree`` only). A ``-c`` file inside the tree is checked the same way and adds
    nothing (the target's pins are the resolver's constraints). Any other line is data only
    (common/requirements.py): an option, a URL, a path is one SourceError naming file:line."""
    path = _included(tree, relative, seen)
    found = []
    for number, raw in enumerate(tree_text(path).splitlines(), start=1):
        line = _COMMENT.sub("", raw).strip()
        include = _INCLUDE.match(line)
        if include:
            child = (Path(relative).parent / include.group(2)).as_posix()
            listed = read_requirement_tree(tree, child, seen | {relative})
            found += listed if include.group(1) in ("-r", "--requirement") else []
        elif line:
            _parse(line, f"{tree / relative}:{number}")
            found.append((line, relative))
    return found


@dataclass(frozen=True)
class ProjectRequirements:
    """What a Python project other than vLLM (FlashInfer built from source) lists as data."""

    build: tuple[str, ...] = ()                       # [build-system] requires
    runtime: tuple[tuple[str, str], ...] = ()         # (requirement, the file that lists it)


def read_project(tree: Path) -> ProjectRequirements:
    """What the project at ``tree`` lists as data in its pyproject.toml (read once): its
    ``[build-system] requires``, and what its wheel depends on: ``[project] dependencies``, or the
    files ``[tool.setuptools.dynamic] dependencies`` names (FlashInfer's ``requirements.txt``).
    None where only its code knows (a setup.py-only tree): nothing here runs a tree's code."""
    tree = Path(tree)
    pyproject = tree / inside(tree, "pyproject.toml")
    if not pyproject.is_file():
        return ProjectRequirements()
    data, text = _pyproject(pyproject)
    build = _build_requires(data, pyproject, text) \
        if "requires" in _table(data, "build-system") else []
    return ProjectRequirements(build=tuple(build),
                               runtime=_runtime_requirements(tree, data, text))


def _runtime_requirements(tree: Path, data: dict, text: str) -> tuple[tuple[str, str], ...]:
    project = _table(data, "project")
    listed = project.get("dependencies")
    dynamic = project.get("dynamic")
    if isinstance(listed, list) and not (isinstance(dynamic, list) and "dependencies" in dynamic):
        if not all(isinstance(r, str) for r in listed):
            raise SourceError(f"{tree / 'pyproject.toml'}: [project] dependencies is not a list "
                              "of strings")
        _listed(listed, tree / "pyproject.toml", text, "[project] dependencies")
        return tuple((item, "pyproject.toml") for item in listed)
    files = _table(data, "tool", "setuptools", "dynamic", "dependencies").get("file")
    files = [files] if isinstance(files, str) else files
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return ()
    return tuple(found for name in files for found in read_requirement_tree(tree, name))


def _parse(text: str, where: Path | str) -> Requirement:
    """A tree's requirement as data only (common/requirements.py), else one SourceError."""
    return requirement(text, str(where), SourceError)


def is_torch_family(text: str) -> bool:
    return _parse(text, "requirement").name.lower() in TORCH_FAMILY


def combined_specifier(requirements: list[str], name: str) -> SpecifierSet:
    """Every specifier the lines give ``name`` (markers ignored: all apply to the CUDA build)."""
    combined = SpecifierSet()
    for text in requirements:
        req = _parse(text, "requirement")   # the tree's lines passed _parse where they were read
        if req.name.lower() == name:
            combined &= req.specifier
    return combined
