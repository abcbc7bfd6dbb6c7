"""Source selection and resolution: which vLLM (or FlashInfer) tree a build compiles.

A ``SourceRequest`` (``edgevllm.sources.requests``) says what the user asked for: a repository
(URL, ``owner/repo`` or a local path), a ref or a PR whose head is the base, and cherry-picks
applied in order. ``prepare_sources``
resolves everything to commits in the host's mirror cache (``gitcache``), applies the picks
(``cherrypick``), checks that the requested base is an ancestor of the result, and exports the tree
(no ``.git``) into a folder that appears under its final name only when complete. The returned
``PreparedSource`` becomes a ``SourceLock`` (``to_lock_entry``); ``SourceRequest.from_lock_entry``
turns it back into a request that fetches every commit by SHA and checks the result is identical.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from edgevllm.common.errors import LockError, RefNotFoundError, SourceError
from edgevllm.common.foreign import remote_repository
from edgevllm.common.fsutil import atomic_dir, output_dir
from edgevllm.sources.cherrypick import (
    EMPTY_TREE,
    ResolvedPick,
    apply_picks,
    export_tree,
    first_parent,
    gitlinks,
    submodule_urls,
    tree_of,
)
from edgevllm.sources.gitcache import GitMirror, out
from edgevllm.sources.requests import PickRequest, SourceRequest
from edgevllm.specs.lock import PickLock, SourceLock
from edgevllm.specs.refs import (
    display_repo,
)


@dataclass
class PreparedSource:
    """A resolved, prepared source tree (``tree_dir`` is None for a check without export)."""

    name: str
    repo: str
    base_sha: str
    commit: str
    tree_hash: str
    version: str  # "": unknown (a tree given as is): the patches decide by file content
    picks: list[PickLock] = field(default_factory=list)
    ref: Optional[str] = None
    pr: Optional[int] = None
    tree_dir: Optional[Path] = None
    submodules: dict[str, str] = field(
        default_factory=dict
    )  # path -> commit, exported into the tree

    @property
    def pep440_version(self) -> str:
        """For SETUPTOOLS_SCM_PRETEND_VERSION (the exported tree has no .git)."""
        return pep440_version(self.version, self.base_sha)

    @property
    def applied(self) -> list[PickLock]:
        return [p for p in self.picks if not p.skipped]

    @property
    def skipped(self) -> list[PickLock]:
        return [p for p in self.picks if p.skipped]

    def to_lock_entry(self) -> SourceLock:
        return SourceLock(
            name=self.name,
            repo=self.repo,
            ref=self.ref,
            pr=self.pr,
            base_sha=self.base_sha,
            picks=list(self.picks),
            commit=self.commit,
            tree=self.tree_hash,
            version=self.version,
            submodules=dict(self.submodules),
        )


# --- resolution ----------------------------------------------------------------------------------
def _from_lock(fetch, sha: str, what: str, repo: str):
    try:
        return fetch()
    except RefNotFoundError:
        raise LockError(
            f"{what} {sha[:12]} from the lock no longer exists in {display_repo(repo)} "
            "(force-pushed and garbage-collected?); rebuild without --lock or restore the commit"
        ) from None


def _resolve_base(mirror: GitMirror, request: SourceRequest) -> str:
    if request.pinned_base:
        sha = request.pinned_base
        return _from_lock(
            lambda: mirror.fetch_sha(sha, what=f"{request.name} base commit {sha[:12]}"),
            sha,
            f"{request.name} base commit",
            mirror.url,
        )
    if request.pr:
        head = mirror.fetch_pr(request.pr)
        if request.ref:
            wanted = mirror.fetch_ref(request.ref)
            if not mirror.is_ancestor(wanted, head):
                raise SourceError(
                    f"{request.name} ref '{request.ref}' ({wanted[:12]}) is not an ancestor of PR "
                    f"#{request.pr} "
                    f"head {head[:12]}; rebase the PR onto it, or drop --{request.name}-ref"
                )
        return head
    if request.ref:
        return mirror.fetch_ref(request.ref)
    return mirror.fetch_default_branch()[1]


def _resolve_pick(mirror: GitMirror, pick: PickRequest, source_repo: str) -> ResolvedPick:
    repo = pick.repo or source_repo

    def resolved(head: str, merge_base: str) -> ResolvedPick:
        return ResolvedPick(spec=pick.spec, kind=pick.kind, repo=repo, head_sha=head,
                            merge_base=merge_base, pr=pick.pr,
                            expected_diff_sha256=pick.diff_sha256)

    sha, merge_base = pick.sha, pick.merge_base
    if sha and merge_base:  # pinned by a lock: no moving refs are consulted
        label = f"PR #{pick.pr} head" if pick.kind == "pr" else "picked commit"
        head = _from_lock(
            lambda: mirror.fetch_sha(sha, repo, f"{label} {sha[:12]}"), sha, label, repo
        )
        if merge_base != EMPTY_TREE:  # a root commit was diffed against the empty tree
            _from_lock(
                lambda: mirror.fetch_sha(merge_base, repo),
                merge_base,
                f"merge-base of {pick.spec}",
                repo,
            )
        return resolved(head, merge_base)
    if pick.kind == "commit" and sha:  # parse gives every commit pick its sha
        head = mirror.fetch_sha(sha, repo, f"commit {sha[:12]}")
        return resolved(head, first_parent(mirror, head))
    if pick.pr is None:
        raise SourceError(f"--cherry-pick '{pick.spec}': names neither a PR nor a commit SHA")
    head = mirror.fetch_pr(pick.pr, repo)
    branch, tip = mirror.fetch_default_branch(repo)
    base = mirror.merge_base(tip, head)
    if base is None:
        raise SourceError(
            f"PR #{pick.pr} shares no history with {branch} of {display_repo(repo)}; check the "
            f"repository"
        )
    return resolved(head, base)


def describe_version(mirror: GitMirror, sha: str) -> str:
    """``0.20.1`` on a tag, ``0.20.1+5.g<sha12>`` past one, the short SHA without tags."""
    proc = mirror.git("describe", "--tags", "--abbrev=12", "--long", sha, check=False)
    match = re.fullmatch(r"(.+)-(\d+)-g([0-9a-f]+)", out(proc)) if proc.returncode == 0 else None
    if not match:
        return sha[:12]
    tag, distance, abbrev = match.groups()
    tag = tag[1:] if re.match(r"v\d", tag) else tag
    return tag if distance == "0" else f"{tag}+{distance}.g{abbrev}"


def pep440_version(version: str, sha: str) -> str:
    """``describe_version``'s result as a PEP 440 version: a bare short SHA becomes
    ``0.0.0+g<sha>``."""
    if re.fullmatch(r"\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?(\+[A-Za-z0-9.]+)?", version):
        return version
    return f"0.0.0+g{sha[:12]}"


def prepare_sources(
    request: SourceRequest, dest_dir: Path | str | None = None, *, cache_root: Path | None = None
) -> PreparedSource:
    """Resolve, pick and (when ``dest_dir`` is given) export a source tree.

    Everything is fetched into the host's mirror; conflicts fail before anything is written under
    ``dest_dir``, which appears (replacing an older one) only once the export is complete.
    """
    mirror = GitMirror(request.repo, cache_root)
    with mirror.locked():
        base = _resolve_base(mirror, request)
        picks = [_resolve_pick(mirror, pick, mirror.url) for pick in request.cherry_picks]
        final, records = apply_picks(
            mirror,
            base,
            picks,
            allow_doc_conflicts=request.allow_doc_conflicts,
            source_repo=mirror.url,
        )
        tree = tree_of(mirror, final)
        if request.expected_tree and tree != request.expected_tree:
            raise LockError(
                f"{request.name}: prepared tree {tree[:12]} differs from the lock's "
                f"{request.expected_tree[:12]}; "
                "the lock was edited or written by an incompatible edgevllm"
            )
        prepared = PreparedSource(
            name=request.name,
            repo=mirror.url,
            base_sha=base,
            commit=final,
            tree_hash=tree,
            version=describe_version(mirror, base),
            picks=records,
            ref=request.ref,
            pr=request.pr,
        )
        if dest_dir is not None:
            with atomic_dir(dest_dir) as tmp:
                prepared.submodules = export_source(mirror, final, tmp, cache_root)
            prepared.tree_dir = Path(dest_dir)
    return prepared


_MAX_SUBMODULE_DEPTH = 4


def export_source(
    mirror: GitMirror,
    commit: str,
    dest: Path,
    cache_root: Path | None = None,
    prefix: str = "",
    depth: int = 0,
    trees: dict[str, str] | None = None,
) -> dict[str, str]:
    """Export ``commit`` and, recursively, its submodules at their pinned commits -> {path: sha}.

    FlashInfer vendors CUTLASS and spdlog as submodules; the build context must hold them, and
    nothing is cloned inside Docker. Each submodule repository gets its own mirror. ``trees``,
    where given, gets each submodule's tree hash by path (what a supplied folder is proven by).
    """
    export_tree(mirror, commit, dest)
    links = gitlinks(mirror, commit)
    if not links or depth >= _MAX_SUBMODULE_DEPTH:
        return {}
    urls = submodule_urls(mirror, commit)
    recorded: dict[str, str] = {}
    for path, sha in sorted(links.items()):
        where = f"submodule {prefix}{path}"
        if path not in urls:
            raise SourceError(
                f"{where} has no URL in .gitmodules of {commit[:12]}; fix .gitmodules in the source"
            )
        if not _is_local(mirror.url):  # a remote tree names no folder or file:// of the host
            remote_repository(urls[path], what=where, error=SourceError)
        sub = GitMirror(urls[path], cache_root)
        with sub.locked():
            try:
                sub.fetch_sha(sha, what=f"{where} commit {sha[:12]}")
            except RefNotFoundError:
                raise RefNotFoundError(
                    f"{where} commit {sha[:12]} not found in {display_repo(sub.url)}; "
                    "the submodule pin is broken upstream, pick a commit that fixes it"
                ) from None
            (dest / path).mkdir(parents=True, exist_ok=True)
            recorded[f"{prefix}{path}"] = sha
            if trees is not None:
                trees[f"{prefix}{path}"] = tree_of(sub, sha)
            recorded.update(export_source(sub, sha, dest / path, cache_root, f"{prefix}{path}/",
                                          depth + 1, trees))
    return recorded


def _is_local(url: str) -> bool:
    """A repository the user named on this machine (its relative submodules are local too)."""
    return url.startswith("/") or url.lower().startswith("file://")


def summarize(prepared: PreparedSource) -> list[str]:
    """Human-readable lines: base, each pick applied or skipped (and why)."""
    lines = [
        f"{prepared.name}: {display_repo(prepared.repo)} base {prepared.base_sha[:12]} (version "
        f"{prepared.version})"
    ]
    for pick in prepared.picks:
        what = f"PR #{pick.pr}" if pick.kind == "pr" else f"commit {pick.head_sha[:12]}"
        if pick.skipped:
            lines.append(f"{prepared.name}: skipped {what}: {pick.reason}")
        else:
            extra = f"; {pick.reason}" if pick.reason else ""
            lines.append(
                f"{prepared.name}: applied {what} (head {pick.head_sha[:12]}) as "
                f"{(pick.commit or '(no commit)')[:12]}{extra}"
            )
    for path, sha in prepared.submodules.items():
        lines.append(f"{prepared.name}: submodule {path} at {sha[:12]}")
    lines.append(f"{prepared.name}: tree {prepared.tree_hash[:12]}")
    return lines


def prepare_into(
    requests: list[SourceRequest],
    out_dir: Path | str,
    *,
    target: Optional[str] = None,
    base_lock=None,
    cache_root: Path | None = None,
    force: bool = False,
):
    """Prepare every source under ``out_dir/<name>`` and write ``out_dir/edgevllm.lock.json``.

    ``out_dir`` appears only when every source is prepared and the lock written; an error leaves
    an older ``out_dir`` untouched and nothing new under its name. A folder holding files
    edgevllm did not write is refused (``force``: written beside them, never deleted).
    Returns (lock, prepared by name).
    """
    from edgevllm.specs.lock import LOCK_FILENAME, Lock, now_utc, write_lock

    out_dir = Path(out_dir)
    lock = base_lock.model_copy(deep=True) if base_lock is not None else Lock(target=target)
    if target is not None:
        lock.target = target
    prepared: dict[str, PreparedSource] = {}
    with output_dir(out_dir, force, kind="sources") as tmp:
        for request in requests:
            prepared[request.name] = prepare_sources(
                request, tmp / request.name, cache_root=cache_root
            )
            setattr(lock, request.name, prepared[request.name].to_lock_entry())
        lock.created_at = now_utc()
        write_lock(lock, tmp / LOCK_FILENAME)
    for name, source in prepared.items():
        source.tree_dir = out_dir / name
    return lock, prepared
