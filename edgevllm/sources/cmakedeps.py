"""The repositories vLLM's CMake would clone at configure time, fetched on the host instead.

The kernel plan (``plan.evaluate_plan``) records every ``FetchContent_Declare`` /
``FetchContent_Populate`` the tree runs: repository, ``GIT_TAG`` and the tree's own ``*_SRC_DIR``
override. ``fetch_cmake_deps`` fetches each into the git cache (``gitcache``) at that ref, or at
the commit a lock pins, exports it (with its submodules, as FetchContent would clone them) under
``<dest>/<name>`` and writes ``<dest>/edgevllm-deps.env`` setting each override to where the build
mounts the folder. The compile then needs no network, and ``inv build --lock`` rebuilds every
dependency by commit, checked against its tree hash.

Failures are one line, before any container starts: a dependency without an override (the
build would have to clone it), a tag or commit the repository does not have, a lock whose
commit has vanished or whose tree differs.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from edgevllm.common.errors import LockError, RefNotFoundError, SourceError
from edgevllm.common.foreign import git_ref, path_inside, plain_name, remote_repository
from edgevllm.common.fsutil import atomic_dir
from edgevllm.common.labels import CMAKE_DEPS_ENV, CMAKE_DEPS_MOUNT
from edgevllm.sources.cherrypick import tree_of
from edgevllm.sources.gitcache import GitMirror
from edgevllm.sources.kernelplan import CMakeDep
from edgevllm.specs.lock import CMakeDepLock
from edgevllm.specs.refs import display_repo

ENV_FILE = CMAKE_DEPS_ENV
MOUNT_POINT = CMAKE_DEPS_MOUNT   # where the build stage mounts the "cmake-deps" context


def _check_names(dep: CMakeDep) -> None:
    """The tree names the folder, the repository and the ref: each passes the one check for
    names from others (``common/foreign.py``) before it becomes a path or a git argument."""
    where = f"CMake dependency ({dep.file}:{dep.line})"
    plain_name(dep.name, what=f"{where} name", error=SourceError)
    if dep.repo:
        remote_repository(dep.repo, what=f"{where} {dep.name}", error=SourceError)
    if dep.tag:
        git_ref(dep.tag, what=f"{where} {dep.name} GIT_TAG", error=SourceError)


def _check_lockable(dep: CMakeDep) -> None:
    _check_names(dep)
    if not dep.repo:
        raise SourceError(f"CMake dependency {dep.name} ({dep.file}:{dep.line}) is a download "
                          f"({dep.url or 'no URL'}), not a git repository; the build cannot "
                          "fetch it offline")
    if not dep.env_var:
        raise SourceError(f"CMake dependency {dep.name} ({dep.file}:{dep.line}) has no *_SRC_DIR "
                          f"override in the tree; the build would clone {dep.repo} itself")


def _resolve(mirror: GitMirror, dep: CMakeDep, pinned: CMakeDepLock | None) -> str:
    where = f"CMake dependency {dep.name} ({dep.file}:{dep.line})"
    if pinned is not None:
        try:
            return mirror.fetch_sha(pinned.commit, what=f"{dep.name} commit {pinned.commit[:12]}")
        except RefNotFoundError:
            raise LockError(f"{where}: commit {pinned.commit[:12]} from the lock no longer exists "
                            f"in {display_repo(dep.repo)}; rebuild without --lock") from None
    try:
        return mirror.fetch_ref(dep.tag)
    except RefNotFoundError:
        raise RefNotFoundError(f"{where}: {dep.tag} cannot be fetched from "
                               f"{display_repo(dep.repo)}; the tree pins a ref that is "
                               "gone") from None
    except SourceError as exc:
        raise SourceError(f"{where}: {exc}") from None


def fetch_one(dep: CMakeDep, dest: Path, pinned: CMakeDepLock | None = None,
              cache_root: Path | None = None) -> CMakeDepLock:
    """Fetch ``dep`` (or the commit ``pinned`` names) and export it into ``dest``."""
    from edgevllm.sources.prepare import export_source

    _check_lockable(dep)
    if pinned is not None and pinned.repo != dep.repo:
        raise LockError(f"CMake dependency {dep.name}: the tree clones {dep.repo} but the lock "
                        f"pins {pinned.repo}; the lock belongs to another tree")
    mirror = GitMirror(dep.repo, cache_root)
    with mirror.locked():
        commit = _resolve(mirror, dep, pinned)
        tree = tree_of(mirror, commit)
        if pinned is not None and tree != pinned.tree:
            raise LockError(f"CMake dependency {dep.name}: tree {tree[:12]} differs from the "
                            f"lock's {pinned.tree[:12]}; the lock was edited")
        dest.mkdir(parents=True, exist_ok=True)
        submodules = export_source(mirror, commit, dest, cache_root)
    return CMakeDepLock(repo=dep.repo, ref=dep.tag, commit=commit, tree=tree,
                        env_var=dep.env_var or "", declared_at=f"{dep.file}:{dep.line}",
                        submodules=submodules)


def fetch_cmake_deps(deps: list[CMakeDep], dest: Path | str,
                     locked: dict[str, CMakeDepLock] | None = None,
                     cache_root: Path | None = None) -> dict[str, CMakeDepLock]:
    """Fetch and export every dependency under ``dest`` (which appears only when complete).

    ``locked``: entries from a lock; each dependency is then fetched by its pinned commit. A
    lock entry the tree no longer declares is ignored (the tree decides what it needs).
    """
    records: dict[str, CMakeDepLock] = {}
    for dep in deps:  # every name checked before the first fetch
        _check_lockable(dep)
    with atomic_dir(dest) as tmp:
        for dep in deps:
            pinned = (locked or {}).get(dep.name)
            folder = path_inside(tmp, dep.name, what=f"CMake dependency {dep.name}",
                                 error=SourceError)
            records[dep.name] = fetch_one(dep, folder, pinned, cache_root)
        (tmp / ENV_FILE).write_text(env_file_text(records))
    return records


def env_file_text(records: dict[str, CMakeDepLock]) -> str:
    """Shell lines the build stage sources: each override points at its mounted folder."""
    lines = ["# Written by edgevllm: vLLM's CMake reads these instead of cloning.\n"]
    for name, record in sorted(records.items()):
        lines.append(f"export {record.env_var}={shlex.quote(f'{MOUNT_POINT}/{name}')}\n")
    return "".join(lines)


def empty_deps_dir(dest: Path | str) -> Path:
    """An empty dependency folder (with its env file) for a tree whose CMake clones nothing."""
    with atomic_dir(dest) as tmp:
        (tmp / ENV_FILE).write_text(env_file_text({}))
    return Path(dest)


def summarize(records: dict[str, CMakeDepLock]) -> list[str]:
    return [f"cmake dep {name}: {display_repo(r.repo)} {r.ref} -> {r.commit[:12]} "
            f"(tree {r.tree[:12]}, {r.env_var})" for name, r in sorted(records.items())]
