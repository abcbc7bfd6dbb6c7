"""The precompiled mode's rule: a Python-only change against a release reuses its kernels.

A tree whose combined diff (its ref, PR head and cherry-picks) against the nearest release tag
touches no compiled source can be installed with that release's compiled libraries: vLLM's own
``setup.py`` does it offline with ``VLLM_USE_PRECOMPILED=1`` and
``VLLM_PRECOMPILED_WHEEL_LOCATION=<the release wheel>``. This module owns the rule deciding when
that is sound (``COMPILED_PATHS``, ``compiled_paths``): vLLM 0.33.0's own list of paths whose
change makes an older wheel's extensions unusable (``csrc/``, ``cmake/``, ``CMakeLists.txt``,
``pyproject.toml``, ``vllm/_custom_ops.py``), plus ``rust/`` (the ``vllm-rs`` binary and the
``_rust_*`` extensions are taken from the wheel too).

``python_only_change(prepared)`` reads the host's git mirror (no network, no container) and
returns a ``PythonOnlyCheck``: the release, the changed paths and the ones that block.
``specs.moderule.choose_mode`` (the one mode rule) turns it and the spec into the build mode and
the line that says why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from edgevllm.common.errors import SourceError
from edgevllm.sources.gitcache import GitMirror, out

# Directories (every path below) and files (that exact path) whose change needs a compile.
COMPILED_DIRS = ("csrc", "cmake", "rust")
COMPILED_FILES = ("CMakeLists.txt", "pyproject.toml", "vllm/_custom_ops.py")
COMPILED_PATHS = COMPILED_DIRS + COMPILED_FILES
RELEASE_TAG_GLOB = "v[0-9]*"
# Pre-releases have no wheel on PyPI to take kernels from: only final release tags count.
PRERELEASE_GLOBS = ("*rc*", "*dev*", "*a[0-9]*", "*b[0-9]*")


def compiled_paths(changed: list[str]) -> list[str]:
    """The paths among ``changed`` (repo-relative, ``/``-separated) that need a compile."""
    return [path for path in changed
            if path in COMPILED_FILES or any(path.startswith(d + "/") for d in COMPILED_DIRS)]


@dataclass(frozen=True)
class PythonOnlyCheck:
    """The tree's diff against the nearest release: ``applies`` when nothing compiled changed."""

    release_tag: str | None          # "v0.33.0"; None: no release tag below the base
    release_commit: str | None
    changed: list[str] = field(default_factory=list)
    blocking: list[str] = field(default_factory=list)

    @property
    def release(self) -> str | None:
        """The release version whose wheel holds the kernels ("0.33.0")."""
        if not self.release_tag:
            return None
        return self.release_tag[1:] if re.match(r"v\d", self.release_tag) else self.release_tag

    @property
    def applies(self) -> bool:
        return bool(self.release_tag and self.changed and not self.blocking)

    def reason(self) -> str:
        if not self.release_tag:
            return "no release tag below the base commit: nothing to reuse"
        if not self.changed:
            return f"the tree is release {self.release} itself: no change to install over it"
        if self.blocking:
            more = f" (+{len(self.blocking) - 3} more)" if len(self.blocking) > 3 else ""
            return (f"compiled sources changed since {self.release_tag}: "
                    f"{', '.join(self.blocking[:3])}{more}")
        return f"Python-only change against {self.release_tag} ({len(self.changed)} file(s))"


def nearest_release(mirror: GitMirror, commit: str) -> tuple[str, str] | None:
    """The nearest release tag reachable from ``commit`` and its commit, or None."""
    excludes = [arg for glob in PRERELEASE_GLOBS for arg in ("--exclude", glob)]
    proc = mirror.git("describe", "--tags", "--abbrev=0", "--match", RELEASE_TAG_GLOB, *excludes,
                      commit, check=False)
    if proc.returncode != 0:
        return None
    tag = out(proc)
    return tag, mirror.rev_parse(f"{tag}^{{commit}}")


def changed_paths(mirror: GitMirror, old: str, new: str) -> list[str]:
    """Every path that differs between two commits (renames count as both of their sides)."""
    proc = mirror.git("diff", "--name-only", "--no-renames", "-z", old, new)
    return sorted(p for p in proc.stdout.decode(errors="replace").split("\0") if p)


def python_only_change(repo: str, base_sha: str, commit: str,
                       cache_root: Path | None = None) -> PythonOnlyCheck:
    """Compare ``commit`` (the prepared tree: base + picks) with the release below ``base_sha``.

    Both commits are in the host's mirror of ``repo`` once ``prepare_sources`` has run.
    """
    mirror = GitMirror(repo, cache_root)
    with mirror.locked():
        if not mirror.has_commit(commit):
            raise SourceError(f"commit {commit[:12]} is not in the mirror of {repo}; "
                              "prepare the sources first")
        found = nearest_release(mirror, base_sha)
        if found is None:
            return PythonOnlyCheck(release_tag=None, release_commit=None)
        tag, release_commit = found
        changed = changed_paths(mirror, release_commit, commit)
    return PythonOnlyCheck(release_tag=tag, release_commit=release_commit, changed=changed,
                           blocking=compiled_paths(changed))
