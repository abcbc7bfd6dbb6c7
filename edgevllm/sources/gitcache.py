"""A cache of bare git mirrors that fetches only what a build needs, and resolves refs to SHAs.

One bare repository per normalized remote URL lives under ``cache_dir("git")``. Nothing is cloned
wholesale: a build fetches its ref (a branch or tag), ``refs/pull/N/head`` for a PR, or a single
commit by SHA when rebuilding from a lock. Tags that point into the fetched history come along
(git's tag auto-following), which is what ``git describe`` needs for a version string.

Every operation on a mirror runs under an exclusive ``fcntl`` lock, so two builds sharing the cache
never update the same refs at once. Git never prompts for credentials here: a private or missing
repository fails with one line instead of hanging.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import subprocess
from pathlib import Path
from typing import Iterator

from edgevllm.common import paths
from edgevllm.common.bounded import Limits, MiB, run_bounded
from edgevllm.common.errors import MissingToolError, RefNotFoundError, SourceError
from edgevllm.common.fsutil import StagedFile
from edgevllm.specs.refs import display_repo, is_full_sha, looks_like_sha, normalize_repo, repo_key

# Messages in git's stderr that mean "that ref/commit is not there" rather than "cannot reach".
_MISSING_MARKERS = (
    "couldn't find remote ref",
    "not our ref",
    "no such remote ref",
    "unadvertised object",
    "bad object",
    "invalid refspec",
    "not a valid object",
)


# --- running git ---------------------------------------------------------------------------------
# git reads others' repositories (a fork's objects, a PR's blobs, a server's answers) through the
# one bounded runner: a server that trickles or a blob that floods stops with one line. No
# address-space limit: git maps pack files and makes a thread arena per core, which a limit
# that fits a small host would break on a large one.
GIT_LIMITS = Limits(seconds=3600, memory=None, output=256 * MiB, file_size=None, open_files=None)


def _git_env() -> dict[str, str]:
    env = dict(os.environ)
    # Never wait for a password, never let the user's config change diffs or merges.
    env.update(
        GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="true", SSH_ASKPASS="true", LC_ALL="C", LANG="C"
    )
    env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    return env


_FIXED_CONFIG = (
    "-c",
    "core.autocrlf=false",
    "-c",
    "core.quotePath=false",
    "-c",
    "diff.noprefix=false",
    "-c",
    "diff.mnemonicPrefix=false",
    "-c",
    "diff.algorithm=myers",
    "-c",
    "gc.auto=0",
    "-c",
    "protocol.version=2",
    "-c",
    "advice.detachedHead=false",
    "-c",
    "fetch.writeCommitGraph=false",
)


def git(
    args: list[str],
    *,
    git_dir: Path | None = None,
    env: dict[str, str] | None = None,
    input: bytes | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess:
    """Run git with a fixed configuration; return the completed process (bytes)."""
    cmd = ["git", *_FIXED_CONFIG]
    if git_dir is not None:
        cmd += ["--git-dir", str(git_dir)]
    full_env = _git_env()
    full_env.update(env or {})
    argv = cmd + list(args)
    try:
        done = run_bounded(argv, GIT_LIMITS, what=f"git {' '.join(args[:2])}", error=SourceError,
                           env=full_env, input=input)
    except FileNotFoundError:
        raise MissingToolError("git: not found; install git (apt-get install git)") from None
    proc = subprocess.CompletedProcess(argv, done.returncode, done.stdout, done.stderr)
    if check and proc.returncode != 0:
        raise SourceError(f"git {' '.join(args[:2])} failed: {last_line(proc.stderr)}")
    return proc


def last_line(stderr: bytes) -> str:
    lines = [ln.strip() for ln in stderr.decode(errors="replace").splitlines() if ln.strip()]
    # git's first "fatal:" is the specific one ("... does not appear to be a git repository");
    # the ones after it are generic ("Could not read from remote repository.").
    fatal = [ln for ln in lines if ln.startswith("fatal:")]
    if fatal:
        return fatal[0]
    errors = [ln for ln in lines if ln.startswith("error:")]
    return (errors or lines or ["(no message)"])[-1]


def out(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout.decode(errors="replace").strip()


# --- the mirror ----------------------------------------------------------------------------------
class GitMirror:
    """A bare repository caching the objects of one upstream (plus forks it pulls picks from)."""

    def __init__(self, url: str, root: Path | None = None):
        self.url = normalize_repo(url)
        self.key = repo_key(self.url)
        slug = (
            re.sub(r"[^A-Za-z0-9_.-]+", "-", "-".join(self.key.split("/")[-2:])).strip("-.")
            or "repo"
        )
        digest = hashlib.sha256(self.key.encode()).hexdigest()[:12]
        self.path = (root or git_cache_root()) / f"{slug}-{digest}.git"
        self._default_branches: dict[str, str] = {}

    # -- plumbing
    def git(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        input: bytes | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess:
        return git(list(args), git_dir=self.path, env=env, input=input, check=check)

    def _ensure(self) -> None:
        if not (self.path / "HEAD").exists():
            with StagedFile(self.path) as staged:
                git(["init", "--quiet", "--bare", str(staged.tmp)])
                staged.commit()

    @contextlib.contextmanager
    def locked(self) -> Iterator["GitMirror"]:
        """Hold the mirror exclusively (other processes wait) while fetching and merging."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.path.with_name(self.path.name + ".lock")
        with open(lock_path, "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                self._ensure()
                yield self
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def has_commit(self, sha: str) -> bool:
        return self.git("cat-file", "-e", f"{sha}^{{commit}}", check=False).returncode == 0

    def rev_parse(self, rev: str) -> str:
        proc = self.git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
        if proc.returncode != 0:
            raise RefNotFoundError(
                f"'{rev}' is not a commit in the mirror of {display_repo(self.url)}"
            )
        return out(proc)

    def is_ancestor(self, older: str, newer: str) -> bool:
        return self.git("merge-base", "--is-ancestor", older, newer, check=False).returncode == 0

    def merge_base(self, a: str, b: str) -> str | None:
        proc = self.git("merge-base", a, b, check=False)
        return out(proc) or None

    # -- talking to remotes
    def _remote_prefix(self, url: str) -> str:
        return "refs/edgevllm/" + hashlib.sha256(repo_key(url).encode()).hexdigest()[:12]

    def _fetch(self, url: str, refspec: str, what: str) -> None:
        proc = self.git("fetch", "--quiet", "--no-write-fetch-head", url, refspec, check=False)
        if proc.returncode == 0:
            return
        message = last_line(proc.stderr)
        if any(
            marker in proc.stderr.decode(errors="replace").lower() for marker in _MISSING_MARKERS
        ):
            raise RefNotFoundError(f"{what} not found in {display_repo(url)}")
        raise SourceError(
            f"cannot fetch {what} from {display_repo(url)}: {message}; check the URL, network and "
            f"access"
        )

    def ls_remote(self, url: str, *patterns: str) -> dict[str, str]:
        proc = git(["ls-remote", url, *patterns], check=False)
        if proc.returncode != 0:
            raise SourceError(
                f"cannot reach {display_repo(url)}: {last_line(proc.stderr)}; check the URL, "
                f"network and access"
            )
        refs: dict[str, str] = {}
        for line in out(proc).splitlines():
            sha, _, name = line.partition("\t")
            refs[name] = sha
        return refs

    def default_branch(self, url: str | None = None) -> str:
        """The remote's default branch (``ls-remote --symref HEAD``); ``main`` when it does not
        say."""
        url = normalize_repo(url) if url else self.url
        if url not in self._default_branches:
            proc = git(["ls-remote", "--symref", url, "HEAD"], check=False)
            if proc.returncode != 0:
                raise SourceError(
                    f"cannot reach {display_repo(url)}: {last_line(proc.stderr)}; check the URL, "
                    f"network and access"
                )
            match = re.search(r"^ref: refs/heads/(\S+)\tHEAD$", out(proc), re.M)
            self._default_branches[url] = match.group(1) if match else "main"
        return self._default_branches[url]

    def fetch_ref(self, ref: str, url: str | None = None) -> str:
        """Fetch one branch, tag or full SHA from ``url`` (default: this mirror's) -> commit SHA."""
        url = normalize_repo(url) if url else self.url
        if is_full_sha(ref.lower()):
            return self.fetch_sha(ref.lower(), url, what=f"commit {ref[:12]}")
        refs = self.ls_remote(url, ref)
        candidates = [ref] if ref.startswith("refs/") else [f"refs/tags/{ref}", f"refs/heads/{ref}"]
        full = next((name for name in candidates if name in refs), None)
        if full is None:
            hint = (
                "give the full 40-character SHA"
                if looks_like_sha(ref)
                else "check the branch or tag name (git ls-remote)"
            )
            raise RefNotFoundError(f"ref '{ref}' not found in {display_repo(url)}; {hint}")
        if full.startswith("refs/tags/"):
            dest = full
        else:
            dest = f"{self._remote_prefix(url)}/{full[len('refs/') :]}"
        self._fetch(url, f"+{full}:{dest}", f"ref '{ref}'")
        return self.rev_parse(dest)

    def fetch_sha(self, sha: str, url: str | None = None, what: str = "") -> str:
        """Make ``sha`` present (fetching it by SHA only when the mirror lacks it) -> the SHA."""
        url = normalize_repo(url) if url else self.url
        if not self.has_commit(sha):
            self._fetch(
                url, f"+{sha}:{self._remote_prefix(url)}/pinned/{sha}", what or f"commit {sha[:12]}"
            )
        return self.rev_parse(sha)

    def fetch_pr(self, number: int, url: str | None = None) -> str:
        """Fetch ``refs/pull/N/head`` -> the PR head SHA."""
        url = normalize_repo(url) if url else self.url
        dest = f"{self._remote_prefix(url)}/pull/{number}/head"
        try:
            self._fetch(url, f"+refs/pull/{number}/head:{dest}", f"PR #{number}")
        except RefNotFoundError:
            raise RefNotFoundError(
                f"PR #{number} not found in {display_repo(url)}; check the number (closed PRs "
                f"keep their refs, deleted ones do not)"
            ) from None
        return self.rev_parse(dest)

    def fetch_default_branch(self, url: str | None = None) -> tuple[str, str]:
        """Fetch the remote's default branch -> (branch name, tip SHA)."""
        url = normalize_repo(url) if url else self.url
        branch = self.default_branch(url)
        return branch, self.fetch_ref(f"refs/heads/{branch}", url)


def git_cache_root(create: bool = True) -> Path:
    """Where the mirrors live (``cache_dir("git")``); ``create`` off to look without making it."""
    return paths.cache_dir("git", create=create)


def open_mirror(url: str, root: Path | None = None) -> GitMirror:
    return GitMirror(url, root)
