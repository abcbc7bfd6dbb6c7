"""The repositories vLLM's CMake would clone at configure time, fetched on the host instead.

The kernel plan (``plan.evaluate_plan``) records every ``FetchContent_Declare`` /
``FetchContent_Populate`` the tree runs: repository, ``GIT_TAG`` and the tree's own ``*_SRC_DIR``
override. ``fetch_cmake_deps`` fetches each into the git cache (``gitcache``) at that ref, or at
the commit a lock pins, exports it (with its submodules, as FetchContent would clone them) under
``<dest>/<name>`` and writes ``<dest>/edgevllm-deps.env`` setting each override to where the build
mounts the folder. The compile then needs no network, and ``inv build --lock`` rebuilds every
dependency by commit, checked against its tree hash.

A dependency may come from a folder the user supplies instead (``--cmake-dep NAME=FOLDER``,
read through ``sources/depfolder.py``'s gate, never by git): with a lock it must have the lock's
tree hash (submodules as gitlinks of their locked commits, and each submodule's own tree where
the lock records it); without one it is recorded as supplied: its tree hash, no commit, standing
in for the tree's repository and ref, unproven.

Failures are one line, before any container starts: a dependency without an override (the
build would have to clone it), a tag or commit the repository does not have, a lock whose
commit has vanished or whose tree differs, a supplied folder the tree does not declare or whose
tree is not the lock's.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from edgevllm.common import console
from edgevllm.common.errors import ConfigError, LockError, RefNotFoundError, SourceError
from edgevllm.common.foreign import git_ref, path_inside, plain_name, remote_repository
from edgevllm.common.fsutil import atomic_dir
from edgevllm.common.labels import CMAKE_DEPS_ENV, CMAKE_DEPS_MOUNT
from edgevllm.sources.cherrypick import tree_of
from edgevllm.sources.depfolder import Supplied, survey, take
from edgevllm.sources.gitcache import GitMirror
from edgevllm.sources.gittree import ALGORITHMS, Entry, below, nested, tree_hash, with_gitlinks
from edgevllm.sources.kernelplan import CMakeDep
from edgevllm.specs.lock import CMakeDepLock, Lock
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


def _check_lockable(dep: CMakeDep, supplied: bool = False) -> None:
    _check_names(dep)
    if not dep.repo and not supplied:
        raise SourceError(f"CMake dependency {dep.name} ({dep.file}:{dep.line}) is a download "
                          f"({dep.url or 'no URL'}), not a git repository; the build cannot "
                          "fetch it offline")
    if not dep.env_var:
        raise SourceError(f"CMake dependency {dep.name} ({dep.file}:{dep.line}) has no *_SRC_DIR "
                          f"override in the tree; the build would clone {dep.repo} itself")


def _resolve(mirror: GitMirror, dep: CMakeDep, pinned: CMakeDepLock | None) -> str:
    where = f"CMake dependency {dep.name} ({dep.file}:{dep.line})"
    if pinned is not None and pinned.commit is not None:
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
        trees: dict[str, str] = {}
        submodules = export_source(mirror, commit, dest, cache_root, trees=trees)
    if pinned is not None and (submodules != pinned.submodules or pinned.submodule_trees
                               not in ({}, trees)):
        raise LockError(f"CMake dependency {dep.name}: the submodules of {commit[:12]} differ "
                        "from the lock's; the lock was edited")
    if pinned is not None:  # the lock's record as it is (one from before records no submodule
        return pinned       # trees: the rebuild's lock stays the same)
    return CMakeDepLock(repo=dep.repo, ref=dep.tag, commit=commit, tree=tree,
                        env_var=dep.env_var or "", declared_at=f"{dep.file}:{dep.line}",
                        submodules=submodules, submodule_trees=trees)


def fetch_cmake_deps(deps: list[CMakeDep], dest: Path | str,
                     locked: dict[str, CMakeDepLock] | None = None,
                     cache_root: Path | None = None,
                     supplied: dict[str, Supplied] | None = None) -> dict[str, CMakeDepLock]:
    """Fetch and export every dependency under ``dest`` (which appears only when complete).

    ``locked``: entries from a lock; each dependency is then fetched by its pinned commit. A
    lock entry the tree no longer declares is ignored (the tree decides what it needs).
    ``supplied``: folders the user gave (``--cmake-dep``), taken instead of fetching.
    """
    records: dict[str, CMakeDepLock] = {}
    supplied = supplied or {}
    check_supplied_names(sorted(dep.name for dep in deps), supplied)
    for dep in deps:  # every name checked before the first fetch
        _check_lockable(dep, dep.name in supplied)
        _check_lock_supplied(dep.name, (locked or {}).get(dep.name), supplied)
    with atomic_dir(dest) as tmp:
        for dep in deps:
            pinned = (locked or {}).get(dep.name)
            folder = path_inside(tmp, dep.name, what=f"CMake dependency {dep.name}",
                                 error=SourceError)
            if dep.name in supplied:
                records[dep.name] = supply_one(dep, supplied[dep.name], folder, pinned)
            else:
                records[dep.name] = fetch_one(dep, folder, pinned, cache_root)
            _check_inside(dep, folder)
        (tmp / ENV_FILE).write_text(env_file_text(records, _insides(deps)))
    return records


def _insides(deps: list[CMakeDep]) -> dict[str, str]:
    return {dep.name: dep.override_subdir for dep in deps if dep.override_subdir}


def _check_inside(dep: CMakeDep, folder: Path) -> None:
    """The folder the tree's override must name exists in what was fetched or supplied."""
    if not dep.override_subdir:
        return
    inside = path_inside(folder, dep.override_subdir, what=f"CMake dependency {dep.name} "
                         "SOURCE_SUBDIR", error=SourceError)
    if not inside.is_dir():
        raise SourceError(f"CMake dependency {dep.name} ({dep.file}:{dep.line}): the tree's "
                          f"override {dep.env_var} names the clone's {dep.override_subdir}/, "
                          "which this source lacks; give the whole repository")


def check_supplied(given: dict[str, str], locked: Lock | None) -> dict[str, Supplied]:
    """``--cmake-dep``'s folders through the gate (stat only), before anything is fetched. A
    compile lock names every dependency of its tree, so a name it lacks is refused here, and a
    folder it records as supplied must be given again."""
    supplied = {name: survey(name, folder) for name, folder in sorted(given.items())}
    if locked is not None and locked.kernel_plan:
        check_supplied_names(sorted(locked.cmake_deps), supplied)
        for name, pinned in sorted(locked.cmake_deps.items()):
            _check_lock_supplied(name, pinned, supplied)
    return supplied


def preflight_supplied(given: dict[str, str], locked: Lock | None) -> dict[str, Supplied]:
    """``check_supplied``, then one line per folder: checked against the lock's tree, or a
    stand-in nothing proves (a warning)."""
    supplied = check_supplied(given, locked)
    for name, folder in supplied.items():
        pinned = locked.cmake_deps.get(name) if locked is not None else None
        if pinned is not None:
            console.info(f"cmake dep {name}: {folder.describe()} in place of the fetch, checked "
                         f"against the lock's tree {pinned.tree[:12]}")
        else:
            console.warn(f"cmake dep {name}: {folder.describe()} stands in for the tree's pin, "
                         "unproven (no --lock): the lock records it as supplied, by its tree hash")
    return supplied


def check_supplied_names(declared: list[str], supplied: dict[str, Supplied]) -> None:
    """A ``--cmake-dep`` must name a dependency the tree's CMake declares."""
    for name in sorted(set(supplied) - set(declared)):
        raise ConfigError(f"--cmake-dep {name}: the tree's CMake declares no dependency '{name}' "
                          f"(it declares: {', '.join(declared) or 'none'}); name one of those")


def _check_lock_supplied(name: str, pinned: CMakeDepLock | None,
                         supplied: dict[str, Supplied]) -> None:
    if pinned is not None and pinned.supplied and name not in supplied:
        raise LockError(f"CMake dependency {name}: the lock records a supplied folder (tree "
                        f"{pinned.tree}), not a commit to fetch; give --cmake-dep "
                        f"{name}=FOLDER with that folder")


def supply_one(dep: CMakeDep, supplied: Supplied, dest: Path,
               pinned: CMakeDepLock | None = None) -> CMakeDepLock:
    """Take the user's folder for ``dep`` into ``dest``: proven against ``pinned`` (then the
    lock's record comes back as it is), else recorded as a supplied stand-in."""
    if pinned is not None and pinned.repo != (dep.repo or dep.url):
        raise LockError(f"CMake dependency {dep.name}: the tree clones {dep.repo or dep.url} but "
                        f"the lock pins {pinned.repo}; the lock belongs to another tree")
    algorithm = ALGORITHMS.get(len(pinned.tree), "sha1") if pinned else "sha1"
    entries = take(supplied, dest, algorithm=algorithm)
    if pinned is None:
        return CMakeDepLock(repo=dep.repo or dep.url, ref=dep.tag, tree=tree_hash(entries),
                            env_var=dep.env_var or "", declared_at=f"{dep.file}:{dep.line}",
                            supplied=True)
    prove(dep.name, supplied, entries, pinned, algorithm)
    return pinned


def prove(name: str, supplied: Supplied, entries: list[Entry], pinned: CMakeDepLock,
          algorithm: str = "sha1") -> None:
    """The supplied folder is the lock's dependency: its tree (submodules as the lock's
    gitlinks), and each submodule's own tree where the lock records one; else one line."""
    where = f"--cmake-dep {name}={supplied.folder}"
    what = ("the folder supplied when the lock was made" if pinned.supplied else
            f"{display_repo(pinned.repo)} {pinned.ref} at {(pinned.commit or '')[:12]}")
    for path in _outermost(pinned.submodules):
        if not any(e.path.startswith(path + "/") for e in entries):
            raise LockError(f"{where}: submodule {path} of {what} is missing (no files there); "
                            "supply the folder with its submodules' files")
    found = tree_hash(with_gitlinks(entries, pinned.submodules), algorithm)
    if found != pinned.tree:
        todo = ("that very folder" if pinned.supplied else "exactly that commit's files, with "
                "its submodules' (the folder a build exported, out/<target>/deps)")
        raise LockError(f"{where}: tree {found} is not the lock's {pinned.tree} ({what}); supply "
                        f"{todo}, or rebuild without --lock")
    for path, tree in sorted(pinned.submodule_trees.items()):
        own = tree_hash(with_gitlinks(below(entries, path), nested(pinned.submodules, path)),
                        algorithm)
        if own != tree:
            raise LockError(f"{where}: submodule {path} has tree {own}, not the lock's {tree} "
                            f"({what}); supply that submodule commit's files")
    unproven = sorted(set(pinned.submodules) - set(pinned.submodule_trees))
    if unproven:
        console.warn(f"cmake dep {name}: the content of submodule(s) {', '.join(unproven)} is "
                     "not proven (this lock records their commits, not their trees)")


def _outermost(links: dict[str, str]) -> list[str]:
    return sorted(p for p in links if not any(p.startswith(o + "/") for o in links))


def env_file_text(records: dict[str, CMakeDepLock], inside: dict[str, str] | None = None) -> str:
    """Shell lines the build stage sources: each override points at its mounted folder, or at
    the subfolder the tree's override stands for (``inside``: name -> the clone's SOURCE_SUBDIR,
    e.g. triton's python/triton_kernels/triton_kernels)."""
    lines = ["# Written by edgevllm: vLLM's CMake reads these instead of cloning.\n"]
    for name, record in sorted(records.items()):
        subdir = (inside or {}).get(name)
        folder = "/".join([MOUNT_POINT, name, *([subdir] if subdir else [])])
        lines.append(f"export {record.env_var}={shlex.quote(folder)}\n")
    return "".join(lines)


def empty_deps_dir(dest: Path | str) -> Path:
    """An empty dependency folder (with its env file) for a tree whose CMake clones nothing."""
    with atomic_dir(dest) as tmp:
        (tmp / ENV_FILE).write_text(env_file_text({}))
    return Path(dest)


def summarize(records: dict[str, CMakeDepLock]) -> list[str]:
    return [f"cmake dep {name}: {display_repo(r.repo)} {r.ref} -> "
            f"{'a supplied folder' if r.supplied else (r.commit or '')[:12]} "
            f"(tree {r.tree[:12]}, {r.env_var})" for name, r in sorted(records.items())]
