"""Requirement lines that others wrote are data: a name, extras, a version specifier, a marker.

A tree's requirement files and pyproject.toml (vLLM's runtime and build files and their ``-r``
includes, a FlashInfer tree's dependencies), a mod's packages and a recipe's build spec all
reach uv's resolver on the host. A line that points somewhere instead of naming a package makes
the resolver fetch and build that project, and a project's build runs its own Python, on the
host, before any container or sandbox: a direct reference (``name @ file://…``, ``@ https://…``,
``git+…``), a local path or archive, an editable install, an option line (``--index-url``,
``--extra-index-url``, ``--find-links``, ``--trusted-host``, ``-e``, ``-c``…). Each is refused
here, in one line naming where it was written (``where``: a file and its line, or a field) and
raised as the error class of the entry that read it (``SourceError`` for a tree,
``ManifestError`` for a mod, ``RecipeError`` for a recipe). ``-r`` / ``-c`` to a file inside the
tree are the tree reader's (sources/buildreqs.py), which passes every other line here.

The resolver itself never builds either (``--no-build``, sources/wheels.py): a package that has
only a source distribution is one line with the way out. docs/security.md says what the user's
own ``--override`` / ``--package`` / ``--vllm-wheel`` may keep.
"""

from __future__ import annotations

import re

from packaging.requirements import InvalidRequirement, Requirement

from edgevllm.common.errors import EdgeVllmError
from edgevllm.common.escape import one_line

# What an option line asks for, in words (any other ``-``/``--`` line is "an option").
_OPTIONS = {
    "-e": "an editable install", "--editable": "an editable install",
    "-i": "an index", "--index-url": "an index", "--extra-index-url": "an extra index",
    "--index": "an index", "--default-index": "an index",
    "-f": "a find-links location", "--find-links": "a find-links location",
    "--trusted-host": "a trusted host", "--no-index": "an index option",
    "-c": "a constraint file", "--constraint": "a constraint file",
    "-r": "an include", "--requirement": "an include",
}
# A name that ends so reads as an archive file to uv (a path beside its requirement file).
ARCHIVE_SUFFIXES = (".whl", ".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tbz2",
                    ".tar.xz", ".txz", ".tar.zst", ".tar.lzma", ".tlz", ".egg")
# A local path or a URL written as the whole line (packaging cannot read these as requirements).
_LOCATION = re.compile(r"^(?:[./~\\]|[A-Za-z][A-Za-z0-9+.-]*://|[A-Za-z]:[\\/]|(?:git|hg|svn|bzr)\+)")
# Printable ASCII only: a newline would start a second line in the resolver's input, and
# " -" an option on this one (uv reads options after a requirement, even inside quotes); "${"
# is expanded by uv from the environment, "\" continues a line.
_PRINTABLE = re.compile(r"[\x20-\x7e]*\Z")
_SHOWN = 80


def shown(text: str) -> str:
    """Others' text for an error line: on one line, escaped, at most 80 characters."""
    flat = one_line(text)
    return flat if len(flat) <= _SHOWN else flat[:_SHOWN - 1] + "…"


def check_requirement(text: str) -> Requirement:
    """``text`` as a requirement that is data only; ``ValueError`` saying what it is otherwise
    (the grammar's face: ``common/grammar.py`` words it as a field's problem)."""
    line = text.strip()
    if line.startswith("-"):
        word = re.split(r"[\s=]", line, maxsplit=1)[0]
        what = _OPTIONS.get(word, "an option")
        raise ValueError(f"'{shown(word)}' is an option line ({what}), not a requirement: a "
                         "requirement names a package (name, extras, version, marker) and "
                         "nothing else; indexes come only from your target (torch.index_url), "
                         "so drop the line with a source patch (docs/security.md)")
    if _LOCATION.match(line):
        raise ValueError(f"'{shown(line)}' is a local path or URL, not a package: name the "
                         "package and its version instead (nothing is built on the host)")
    if not _PRINTABLE.match(line) or " -" in line or "${" in line or "\\" in line:
        raise ValueError(f"'{shown(line)}' holds more than a requirement (a control or "
                         "non-ASCII character, an option, '${' or '\\'): give name, extras, "
                         "version and marker only")
    try:
        found = Requirement(line)
    except InvalidRequirement as exc:
        reason = str(exc).splitlines()[0] if str(exc) else "not PEP 508"
        raise ValueError(f"cannot read requirement '{shown(line)}' ({shown(reason)})") from None
    if found.url:
        raise ValueError(f"'{shown(found.name)} @ …' is a direct reference (a URL, a local path "
                         "or a VCS checkout): its project would be fetched and built on the "
                         "host; name the package and its version instead")
    if found.name.lower().endswith(ARCHIVE_SUFFIXES):
        raise ValueError(f"'{shown(found.name)}' reads as an archive file, not a package name: "
                         "name the package and its version instead")
    return found


def where_in(path: object, text: str, item: str, field: str) -> str:
    """``path:LINE`` of the first line of ``text`` (the file's) that spells ``item``, else
    ``path: field``: where an error says the item was written."""
    for number, line in enumerate(text.splitlines(), start=1):
        if item and item in line:
            return f"{path}:{number}"
    return f"{path}: {field}"


def requirement(text: str, where: str, error: type[EdgeVllmError]) -> Requirement:
    """``text`` (written at ``where``: ``FILE:LINE`` or ``FILE: field``) as data, else one
    ``error`` line naming ``where`` and what the line is."""
    try:
        return check_requirement(text)
    except ValueError as exc:
        raise error(f"{where}: {exc}") from None


# uv's words where --no-build stopped it: a package with no usable wheel, or a direct reference.
_SOURCE_ONLY = (re.compile(r"Wheels are required for `([^`]+)` because building from source is "
                           r"disabled"),
                re.compile(r"(?:Because|and) (?:all versions of |only )?"
                           r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:[=<>!~]=?\S*)? (?:has|have) no "
                           r"usable wheels"),
                re.compile(r"Building source distributions for `([^`]+)` is disabled"))


def source_only(uv_output: str) -> tuple[str, str] | None:
    """(package, what required it) where uv's resolve stopped because only a build would give
    the package (``--no-build``), else None."""
    text = " ".join(uv_output.split())
    for pattern in _SOURCE_ONLY:
        found = pattern.search(text)
        if found:
            name = found.group(1)
            by = re.search(r"([A-Za-z0-9][A-Za-z0-9._-]*?)(?:[=<>!~]=?\S*)? depends on "
                           rf"{re.escape(name)}\b", text)
            return name, by.group(1) if by else "the requested packages"
    return None


def source_only_line(name: str, by: str, target: str) -> str:
    """One line: ``name`` (required by ``by``; the resolver's words) has no wheel for ``target``,
    only a source distribution, and the ways out (docs/security.md)."""
    name = shown(name)
    return (f"{name} (required by {shown(by)}) has no wheel for {target}, only a source "
            "distribution, and edgevllm never builds one on the host (its build would run the "
            f"package's code): pin a version that has a wheel (--package {name}==VER), or serve "
            "a wheel of it from an index the target names (torch.index_url); see "
            "docs/security.md 'Requirements from others are data'")
