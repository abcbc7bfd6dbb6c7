"""``inv track --to REF``: a vLLM tree from git instead of a PyPI release.

A ref is a tag, a branch, a full commit SHA or a PR (``pr:N``, ``#N`` or a PR URL, spelt as
``--vllm-pr`` spells it). It is resolved the way the build resolves ``--vllm-ref`` /
``--vllm-pr`` (``sources/gitcache``: the user's vLLM repository, GitHub when reachable), and
where the remote cannot be reached, from what the git cache already holds. The files track reads
(``pypi.TREE_PREFIXES``) are copied out of the commit as blobs, each bounded: regular files only
(no links), names kept inside the folder; nothing of the tree runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from edgevllm.common.errors import RefNotFoundError, RefSyntaxError, SourceError
from edgevllm.common.foreign import git_ref, inside
from edgevllm.common.grammar import GIT_SHA
from edgevllm.sources.gitcache import GitMirror, git, git_cache_root
from edgevllm.sources.prepare import describe_version, pep440_version
from edgevllm.specs.refs import display_repo, normalize_repo, parse_pr_arg
from edgevllm.track.pypi import MEMBER_MAX_BYTES, SDIST_MAX_BYTES, TREE_PREFIXES

_PR = re.compile(r"^(pr:|#)", re.I)


@dataclass(frozen=True)
class GitTree:
    """One commit of the vLLM repository, as ``--to REF`` named it."""

    asked: str      # as given (a ref, a PR)
    repo: str       # the repository it was resolved in
    commit: str
    version: str    # ``git describe`` as PEP 440 (0.33.0+1.g<sha12>)
    cached: bool    # resolved from the git cache alone (the remote was unreachable)
    pr: int | None = None

    def fill(self, dest: Path) -> tuple[int, int]:
        """The tree's files track reads written into ``dest`` (a new folder); (0, bytes read)."""
        return 0, copy_tree(GitMirror(self.repo), self.commit, dest)


def is_release_word(to: str) -> bool:
    """``latest`` or a release version (``0.33.0``, ``v0.33.0``): PyPI's; anything else a ref."""
    return to == "latest" or re.fullmatch(r"v?\d+(\.\d+)+(\.post\d+|(a|b|rc)\d+)?", to) is not None


def resolve(to: str, repo: str) -> GitTree:
    """``to`` in ``repo``: fetched as the build fetches it, else found in the git cache."""
    url, number = _pr_of(to)
    if number is None:
        git_ref(to, what=f"--to {to}", error=RefSyntaxError)
    reachable = _asked_remote(normalize_repo(url or repo), to, number)  # before any mirror
    # where the mirror would be, made only where there is something to put in it
    mirror = GitMirror(url or repo, git_cache_root(create=False))
    if not reachable and not (mirror.path / "HEAD").exists():
        raise SourceError(f"--to {to}: cannot reach {display_repo(mirror.url)}, and the git cache "
                          "has no mirror of it; check the network or the repository")
    mirror = GitMirror(url or repo)
    with mirror.locked():
        try:
            commit = mirror.fetch_pr(number) if number is not None else mirror.fetch_ref(to)
            cached = False
        except RefNotFoundError as exc:
            raise RefNotFoundError(f"--to {to}: {exc.message}") from None
        except SourceError as exc:  # the remote is unreachable: what the cache already has
            commit, cached = _from_cache(mirror, to, number, exc.message), True
        version = pep440_version(describe_version(mirror, commit), commit)
    return GitTree(to, mirror.url, commit, version, cached, number)


def _asked_remote(url: str, to: str, number: int | None) -> bool:
    """Whether the remote answered; one line (nothing written, no mirror made) where it answers
    without the branch, tag or PR. A SHA is asked for by the fetch itself."""
    names = ([f"refs/pull/{number}/head"] if number is not None else
             ["HEAD"] if GIT_SHA.fullmatch(to.lower()) else
             [f"refs/tags/{to}", f"refs/heads/{to}"] if not to.startswith("refs/") else [to])
    proc = git(["ls-remote", url, *names], check=False)
    if proc.returncode != 0:
        return False
    if names != ["HEAD"] and not proc.stdout.strip():
        what = f"no PR #{number}" if number is not None else f"no branch or tag '{to}'"
        raise RefNotFoundError(f"--to {to}: {display_repo(url)} has {what}"
                               + (" (check the number)" if number is not None else ""))
    return True


def _pr_of(to: str) -> tuple[str | None, int | None]:
    if _PR.match(to) or "://" in to:  # a PR URL; parse_pr_arg refuses any other URL
        return parse_pr_arg(_PR.sub("", to), f"--to {to}")
    return None, None


def _from_cache(mirror: GitMirror, to: str, number: int | None, why: str) -> str:
    prefix = mirror._remote_prefix(mirror.url)
    if number is not None:
        names = [f"{prefix}/pull/{number}/head"]
    elif GIT_SHA.fullmatch(to.lower()):
        names = [to.lower()]
    else:
        names = [f"refs/tags/{to}", f"{prefix}/heads/{to}"]
    for name in names:
        try:
            return mirror.rev_parse(name)
        except RefNotFoundError:
            continue
    raise SourceError(f"--to {to}: {why}; and the git cache has no {to} of "
                      f"{display_repo(mirror.url)}")


def copy_tree(mirror: GitMirror, commit: str, dest: Path) -> int:
    """The blobs under ``TREE_PREFIXES`` of ``commit`` written into ``dest``; bytes written."""
    listing = mirror.git("ls-tree", "-r", "-z", "--long", "--full-tree", commit, "--",
                         *TREE_PREFIXES).stdout.decode(errors="replace")
    dest.mkdir(parents=True)
    written = 0
    for entry in filter(None, listing.split("\0")):
        head, _, name = entry.partition("\t")
        mode, kind, blob, size = head.split()
        if kind != "blob" or mode not in ("100644", "100755"):
            continue  # links and submodules are not read
        path = inside(dest, name)
        if path is None or int(size) > MEMBER_MAX_BYTES:
            raise SourceError(f"{commit[:12]}: {name[:80]!r} is outside the tree or over "
                              f"{MEMBER_MAX_BYTES >> 20} MiB; track reads no file like it")
        written += int(size)
        if written > SDIST_MAX_BYTES:
            raise SourceError(f"{commit[:12]}: the files track reads exceed "
                              f"{SDIST_MAX_BYTES >> 20} MiB")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(mirror.git("cat-file", "blob", blob).stdout)
    return written


def describe(tree: GitTree) -> str:
    """One line for the report: what was asked and which commit it is."""
    where = "the git cache (the remote is unreachable)" if tree.cached else display_repo(tree.repo)
    return f"{tree.asked} = {tree.commit[:12]} ({tree.version}) from {where}"
