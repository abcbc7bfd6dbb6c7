"""What a build asks of its sources: a ``SourceRequest`` per tree (vLLM, FlashInfer): a
repository (URL, ``owner/repo`` or a local path), a ref or a PR whose head is the base, and
cherry-picks (``PickRequest``) applied in order; from flags, a spec or a lock entry (which pins
every commit by SHA). ``edgevllm.sources.prepare`` resolves and prepares them."""

from __future__ import annotations

import re
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from edgevllm.common.errors import LockError, SourceError
from edgevllm.specs.buildspec import EffectiveSpec
from edgevllm.specs.lock import PickLock, SourceLock, identity_of
from edgevllm.specs.refs import (
    UPSTREAM_REPOS,
    display_repo,
    is_full_sha,
    looks_like_sha,
    normalize_repo,
    parse_change_url,
    parse_pr_arg,
    parse_pr_number,
)

_PICK_HELP = "use a PR number, a PR URL, a full commit SHA, REPO#N or REPO@SHA"


class PickRequest(BaseModel):
    """One requested cherry-pick; ``sha``/``merge_base``/``diff_sha256`` are pinned by a lock."""

    model_config = ConfigDict(extra="forbid")

    spec: str
    kind: Literal["pr", "commit"]
    repo: Optional[str] = None  # None: the source's own repository
    pr: Optional[int] = None
    sha: Optional[str] = None  # commit to pick, or a PR head pinned by a lock
    merge_base: Optional[str] = None  # pinned by a lock
    diff_sha256: Optional[str] = None  # pinned by a lock

    @classmethod
    def pinned(cls, record: PickLock) -> "PickRequest":
        """The request that re-applies ``record`` exactly: its identity, its head, merge base
        and diff pinned."""
        return cls(**identity_of(record), sha=record.head_sha, merge_base=record.merge_base,
                   diff_sha256=record.diff_sha256)

    @classmethod
    def parse(cls, text: str) -> "PickRequest":
        """``40082``, ``#40082``, a PR or commit URL, a full SHA, ``REPO#N`` or ``REPO@SHA``."""
        spec = str(text).strip()
        if not spec:
            raise SourceError(f"--cherry-pick '': empty; {_PICK_HELP}")
        if re.fullmatch(r"#?\d+", spec):
            return cls(spec=spec, kind="pr", pr=parse_pr_number(spec, "--cherry-pick"))
        url = parse_change_url(spec, "--cherry-pick")
        if url is not None:
            repo, change = url
            if isinstance(change, int):
                return cls(spec=spec, kind="pr", repo=repo, pr=change)
            return cls(spec=spec, kind="commit", repo=repo, sha=change)
        if is_full_sha(spec.lower()):
            return cls(spec=spec, kind="commit", sha=spec.lower())
        repo, sep, number = spec.rpartition("#")
        if sep and repo and number:
            if not number.isdigit() or int(number) < 1:
                raise SourceError(
                    f"--cherry-pick '{spec}': '{number}' is not a PR number; {_PICK_HELP}"
                )
            return cls(
                spec=spec,
                kind="pr",
                repo=normalize_repo(repo),
                pr=parse_pr_number(number, "--cherry-pick"),
            )
        repo, sep, sha = spec.rpartition("@")
        if sep and repo and is_full_sha(sha.lower()):
            return cls(spec=spec, kind="commit", repo=normalize_repo(repo), sha=sha.lower())
        if looks_like_sha(spec.lower()):
            raise SourceError(
                f"--cherry-pick '{spec}': a short SHA is ambiguous; give the full 40-character SHA"
            )
        raise SourceError(f"--cherry-pick '{spec}': not understood; {_PICK_HELP}")

    def describe(self, source_repo: str) -> str:
        what = f"PR #{self.pr}" if self.kind == "pr" else f"commit {self.sha}"
        if self.repo and self.repo != source_repo:
            what += f" from {display_repo(self.repo)}"
        if self.sha and self.kind == "pr":
            what += f" pinned at {self.sha[:12]}"
        return what


SourceName = Literal["vllm", "flashinfer"]


def source_name(name: str) -> SourceName:
    """``name`` as one of the sources edgevllm builds; anything else is a SourceError."""
    if name == "vllm":
        return "vllm"
    if name == "flashinfer":
        return "flashinfer"
    raise SourceError(f"source '{name}': edgevllm builds vllm or flashinfer from source")


class SourceRequest(BaseModel):
    """What to build: repo + (ref | PR head | default branch) + cherry-picks, in order."""

    model_config = ConfigDict(extra="forbid")

    name: SourceName = "vllm"
    repo: str = UPSTREAM_REPOS["vllm"]
    ref: Optional[str] = None
    pr: Optional[int] = None
    cherry_picks: list[PickRequest] = Field(default_factory=list)
    allow_doc_conflicts: bool = False
    pinned_base: Optional[str] = None  # from a lock: fetch this SHA, ignore ref/pr heads
    expected_tree: Optional[str] = None  # from a lock: the prepared tree must hash to this

    @classmethod
    def from_cli(
        cls,
        name: str = "vllm",
        repo: Optional[str] = None,
        ref: Optional[str] = None,
        pr: object = None,
        cherry_picks: Optional[list[str]] = None,
        allow_doc_conflicts: bool = False,
    ) -> "SourceRequest":
        """Build a request from flag values; every malformed value fails with one line."""
        flag = f"--{name}"
        pr_repo, pr_number = (
            parse_pr_arg(pr, f"{flag}-pr") if pr not in (None, "") else (None, None)
        )
        if repo and pr_repo and normalize_repo(repo) != pr_repo:
            raise SourceError(
                f"{flag}-pr '{pr}' is a PR of {display_repo(pr_repo)} but {flag}-repo is {repo}; "
                f"give one of them"
            )
        url = (
            normalize_repo(repo)
            if repo
            else (pr_repo or UPSTREAM_REPOS.get(name, UPSTREAM_REPOS["vllm"]))
        )
        if ref is not None and not str(ref).strip():
            raise SourceError(f"{flag}-ref: empty; give a tag, branch or full SHA")
        picks = [PickRequest.parse(text) for text in cherry_picks or []]
        return cls(
            name=source_name(name),
            repo=url,
            ref=ref.strip() if ref else None,
            pr=pr_number,
            cherry_picks=picks,
            allow_doc_conflicts=allow_doc_conflicts,
        )

    @classmethod
    def from_lock_entry(cls, entry: SourceLock) -> "SourceRequest":
        """A request that rebuilds ``entry`` exactly: every commit fetched by SHA, result
        checked."""
        picks = [PickRequest.pinned(p) for p in entry.picks]
        return cls(
            name=source_name(entry.name),
            repo=entry.repo,
            ref=entry.ref,
            pr=entry.pr,
            cherry_picks=picks,
            allow_doc_conflicts=any(p.resolved_paths for p in entry.picks),
            pinned_base=entry.base_sha,
            expected_tree=entry.tree,
        )

    def plan(self) -> list[str]:
        """What ``prepare_sources`` would do, one line per step (no network)."""
        if self.pinned_base:
            base = f"commit {self.pinned_base} (from the lock)"
        elif self.pr:
            base = f"head of PR #{self.pr}" + (
                f", which must contain {self.ref}" if self.ref else ""
            )
        else:
            base = f"ref {self.ref}" if self.ref else "the default branch"
        lines = [f"{self.name}: {display_repo(self.repo)} at {base}"]
        for index, pick in enumerate(self.cherry_picks, 1):
            lines.append(f"{self.name}: pick {index}: {pick.describe(self.repo)}")
        if self.allow_doc_conflicts:
            lines.append(f"{self.name}: conflicts only in docs/tests keep the base's side")
        return lines


def requests_from_lock(lock) -> list[SourceRequest]:
    """One request per source recorded in ``lock`` (vLLM first), each pinned to its SHAs."""
    requests = [SourceRequest.from_lock_entry(entry) for entry in lock.sources().values()]
    if not requests:
        raise LockError("the lock records no source; regenerate it with inv sources")
    return requests


def source_request(eff: EffectiveSpec, name: str = "vllm") -> SourceRequest:
    """What a build spec asks for, as a request: vLLM, or FlashInfer built from source."""
    src = eff.spec.vllm if name == "vllm" else eff.spec.flashinfer.source
    if src is None:
        raise SourceError(f"the spec builds no {name} from source")
    return SourceRequest.from_cli(
        name=name,
        repo=src.repo,
        ref=src.ref,
        pr=src.pr,
        cherry_picks=src.cherry_picks,
        allow_doc_conflicts=src.allow_doc_conflicts,
    )
