"""The cherry-pick engine: apply PRs and commits onto a base, in seconds, without a checkout.

A PR is applied as the diff from its merge-base with the upstream default branch to its head; a
commit as the diff from its first parent. Each diff goes through ``git apply --cached --3way`` on a
temporary index inside the bare mirror, so no working tree is written until the final export, and
a conflicting pick is found before anything is compiled.

Outcomes:
- a pick whose head is already in the base, or whose changes are all already there, is skipped
  and reported;
- conflicts only in docs/tests keep the base's side when the caller allows it, and fail otherwise;
- any conflict in code fails, naming the pick, the files and the lines (in the base's file).
Every applied pick becomes a commit whose message names the pick and its head SHA. Commit
identity and dates are fixed (taken from the base commit) so the same inputs give the same SHAs.

Its length: the diff, the 3-way apply on the temporary index, the conflict report and the pick's
record are one engine over one mirror and one index; apart, each would hand both to the next.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from edgevllm.common.errors import CherryPickConflictError, LockError, SourceError
from edgevllm.sources.gitcache import GitMirror, last_line, out
from edgevllm.specs.lock import PickLock, identity_of
from edgevllm.specs.refs import display_repo

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
DOC_DIRS = frozenset({"docs", "doc", "tests", "test"})
DOC_SUFFIXES = frozenset({".md", ".rst", ".adoc"})
_MAX_LISTED = 5
_REJECT_RE = re.compile(
    r"^error: (.+?): (patch does not apply|does not exist in index|already exists in index|does "
    r"not match index)$",
    re.M,
)


def is_doc_path(path: str) -> bool:
    """Docs and tests: a conflict here may keep the base's side; anywhere else it is code."""
    parts = path.split("/")
    name = parts[-1]
    if any(part in DOC_DIRS for part in parts[:-1]):
        return True
    if Path(name).suffix.lower() in DOC_SUFFIXES:
        return True
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


@dataclass
class ResolvedPick:
    """A pick with every ref resolved: what to diff (merge_base..head_sha) and from where."""

    spec: str
    kind: Literal["pr", "commit"]
    repo: str
    head_sha: str
    merge_base: str
    pr: int | None = None
    expected_diff_sha256: str | None = None  # from a lock: the diff must hash to this

    def label(self, source_repo: str | None = None) -> str:
        what = f"PR #{self.pr}" if self.kind == "pr" else f"commit {self.head_sha[:12]}"
        if source_repo and self.repo != source_repo:
            what += f" of {display_repo(self.repo)}"
        return what


@dataclass
class _Conflict:
    path: str
    where: str


# --- diffs and commits ---------------------------------------------------------------------------
def pick_diff(mirror: GitMirror, merge_base: str, head: str) -> bytes:
    """The exact bytes applied for a pick; their sha256 goes into the lock."""
    proc = mirror.git(
        "diff",
        "--binary",
        "--full-index",
        "--no-renames",
        "--no-color",
        "--no-ext-diff",
        "--no-textconv",
        "--src-prefix=a/",
        "--dst-prefix=b/",
        merge_base,
        head,
    )
    return proc.stdout


def first_parent(mirror: GitMirror, sha: str) -> str:
    proc = mirror.git("rev-parse", "--verify", "--quiet", f"{sha}^1", check=False)
    return out(proc) if proc.returncode == 0 else EMPTY_TREE


def commit_env(mirror: GitMirror, base: str) -> dict[str, str]:
    """Fixed identity and the base's commit date: the same picks give the same commit SHAs."""
    stamp = out(mirror.git("log", "-1", "--format=%ct", base))
    date = f"@{stamp} +0000"
    return {
        "GIT_AUTHOR_NAME": "edgevllm",
        "GIT_AUTHOR_EMAIL": "edgevllm@localhost",
        "GIT_AUTHOR_DATE": date,
        "GIT_COMMITTER_NAME": "edgevllm",
        "GIT_COMMITTER_EMAIL": "edgevllm@localhost",
        "GIT_COMMITTER_DATE": date,
    }


def tree_of(mirror: GitMirror, commit: str) -> str:
    return out(mirror.git("rev-parse", f"{commit}^{{tree}}"))


# --- conflicts -----------------------------------------------------------------------------------
def _unmerged(mirror: GitMirror, env: dict[str, str]) -> dict[str, dict[int, tuple[str, str]]]:
    """path -> {stage: (mode, blob)} for every conflicted path in the temporary index."""
    raw = mirror.git("ls-files", "-u", "-z", env=env).stdout.decode(errors="replace")
    entries: dict[str, dict[int, tuple[str, str]]] = {}
    for record in filter(None, raw.split("\0")):
        meta, _, path = record.partition("\t")
        mode, blob, stage = meta.split()
        entries.setdefault(path, {})[int(stage)] = (mode, blob)
    return entries


def _conflict_lines(mirror: GitMirror, stages: dict[int, tuple[str, str]], work: Path) -> str:
    """Where a conflict sits, as line numbers in the base's version of the file."""
    if 2 not in stages:
        return "deleted in the base, changed by the pick"
    if 3 not in stages:
        return "changed in the base, deleted by the pick"
    files = {}
    for stage, name in ((1, "common"), (2, "ours"), (3, "theirs")):
        path = work / f"conflict.{name}"
        path.write_bytes(
            mirror.git("cat-file", "blob", stages[stage][1]).stdout if stage in stages else b""
        )
        files[name] = str(path)
    proc = subprocess.run(
        [
            "git",
            "merge-file",
            "-p",
            "-L",
            "base",
            "-L",
            "common",
            "-L",
            "pick",
            files["ours"],
            files["common"],
            files["theirs"],
        ],
        capture_output=True,
    )
    if proc.returncode < 0 or b"\0" in proc.stdout[:8000]:
        return "binary file"
    lines, line_no, state = [], 0, "normal"
    for text in proc.stdout.decode(errors="replace").splitlines():
        if state == "normal" and text.startswith("<<<<<<< "):
            lines.append(line_no + 1)
            state = "ours"
        elif state in ("ours", "common") and text.startswith("||||||| "):
            state = "common"
        elif state in ("ours", "common") and text == "=======":
            state = "theirs"
        elif state == "theirs" and text.startswith(">>>>>>> "):
            state = "normal"
        elif state in ("normal", "ours"):
            line_no += 1
    if not lines:
        return "both sides changed the file"
    return ("line " if len(lines) == 1 else "lines ") + ", ".join(map(str, lines))


def _describe_conflicts(conflicts: list[_Conflict]) -> str:
    shown = [f"{c.path} ({c.where})" for c in conflicts[:_MAX_LISTED]]
    more = len(conflicts) - _MAX_LISTED
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def _keep_base_side(
    mirror: GitMirror, env: dict[str, str], path: str, stages: dict[int, tuple[str, str]]
) -> None:
    # --index-info works on a bare repository: drop every stage, then re-add the base's blob.
    lines = f"0 {'0' * len(stages[min(stages)][1])}\t{path}\n"
    if 2 in stages:
        mode, blob = stages[2]
        lines += f"{mode} {blob} 0\t{path}\n"
    mirror.git("update-index", "--index-info", env=env, input=lines.encode())


# --- one pick ------------------------------------------------------------------------------------
def _commit_message(pick: ResolvedPick, diff_sha: str, resolved: list[str]) -> str:
    title = f"PR #{pick.pr}" if pick.kind == "pr" else f"commit {pick.head_sha}"
    lines = [
        f"edgevllm: cherry-pick {title} (head {pick.head_sha})",
        "",
        f"Repository: {pick.repo}",
        f"Pick: {pick.spec}",
        f"Head: {pick.head_sha}",
        f"Merge-base: {pick.merge_base}",
        f"Diff-sha256: {diff_sha}",
    ]
    lines += [f"Kept-base-side: {path}" for path in resolved]
    return "\n".join(lines) + "\n"


def _checked_diff(mirror: GitMirror, pick: ResolvedPick, label: str) -> tuple[bytes, str]:
    """The pick's diff and its sha256, which must be the one a lock pinned."""
    diff = pick_diff(mirror, pick.merge_base, pick.head_sha)
    diff_sha = hashlib.sha256(diff).hexdigest()
    if pick.expected_diff_sha256 and diff_sha != pick.expected_diff_sha256:
        raise LockError(
            f"{label}: the diff {pick.merge_base[:12]}..{pick.head_sha[:12]} hashes to "
            f"{diff_sha[:12]}, "
            f"the lock says {pick.expected_diff_sha256[:12]}; the lock does not match this "
            f"repository"
        )
    return diff, diff_sha


def apply_pick(
    mirror: GitMirror,
    current: str,
    pick: ResolvedPick,
    *,
    allow_doc_conflicts: bool,
    env_commit: dict[str, str],
    work: Path,
    source_repo: str | None = None,
) -> tuple[str, PickLock]:
    """Apply one pick onto ``current`` -> (new commit, its lock record). Raises on conflict."""
    label = pick.label(source_repo)
    diff, diff_sha = _checked_diff(mirror, pick, label)
    record = PickLock(**identity_of(pick), head_sha=pick.head_sha, merge_base=pick.merge_base,
                      diff_sha256=diff_sha)
    if mirror.is_ancestor(pick.head_sha, current):
        return current, record.model_copy(
            update={"skipped": True, "reason": "already in the base (its head is an ancestor)"}
        )
    if not diff:
        return current, record.model_copy(update={"skipped": True, "reason": "empty diff"})

    env = {"GIT_INDEX_FILE": str(work / "index")}
    patch = work / "pick.diff"
    patch.write_bytes(diff)
    resolved = _apply_3way(
        mirror,
        current,
        pick,
        env,
        patch,
        work,
        label=label,
        allow_doc_conflicts=allow_doc_conflicts,
    )
    tree = out(mirror.git("write-tree", env=env))
    if tree == tree_of(mirror, current):
        return current, record.model_copy(
            update={"skipped": True, "reason": "its changes are already in the base"}
        )
    message = _commit_message(pick, diff_sha, resolved)
    commit = out(
        mirror.git(
            "commit-tree", tree, "-p", current, "-F", "-", env=env_commit, input=message.encode()
        )
    )
    reason = f"kept the base's side of {', '.join(resolved)}" if resolved else ""
    return commit, record.model_copy(
        update={"commit": commit, "reason": reason, "resolved_paths": resolved}
    )


def _rejected(stderr: bytes) -> dict[str, str]:
    """Files git apply rejected outright (no 3-way possible): path -> git's reason."""
    found: dict[str, str] = {}
    for match in _REJECT_RE.finditer(stderr.decode(errors="replace")):
        found.setdefault(match.group(1), match.group(2))
    return found


def _apply_3way(
    mirror: GitMirror,
    current: str,
    pick: ResolvedPick,
    env: dict[str, str],
    patch: Path,
    work: Path,
    *,
    label: str,
    allow_doc_conflicts: bool,
) -> list[str]:
    """``git apply --cached --3way`` onto ``current`` in the temporary index -> doc paths kept as
    base.

    A file git cannot merge at all (e.g. deleted on one side) makes the whole apply fail; it is
    treated like a conflict in that file, and excluded on a retry when it is a doc the user lets go.
    """
    excluded: dict[str, str] = {}
    for _attempt in range(3):
        (work / "index").unlink(missing_ok=True)
        mirror.git("read-tree", current, env=env)
        excludes = [f"--exclude={path}" for path in sorted(excluded)]
        proc = mirror.git(
            "apply",
            "--cached",
            "--3way",
            "--whitespace=nowarn",
            *excludes,
            str(patch),
            env=env,
            check=False,
        )
        if proc.returncode == 0:
            return sorted(excluded)
        unmerged = _unmerged(mirror, env)
        rejected = {
            path: why for path, why in _rejected(proc.stderr).items() if path not in unmerged
        }
        if not unmerged and not rejected:
            raise CherryPickConflictError(
                f"cherry-pick {label} (head {pick.head_sha[:12]}) does not apply: "
                f"{last_line(proc.stderr)}; drop the pick or rebase it"
            )
        conflicts = [
            _Conflict(path, _conflict_lines(mirror, stages, work))
            for path, stages in unmerged.items()
        ]
        conflicts += [_Conflict(path, why) for path, why in rejected.items()]
        _refuse(sorted(conflicts, key=lambda c: c.path), label, pick, allow_doc_conflicts)
        if not rejected:
            for path, stages in sorted(unmerged.items()):
                _keep_base_side(mirror, env, path, stages)
            return sorted(set(unmerged) | set(excluded))
        excluded.update(rejected)  # retry without the rejected doc files: the base's side stays
    raise CherryPickConflictError(
        f"cherry-pick {label} (head {pick.head_sha[:12]}) does not apply after excluding docs; "
        f"drop the pick"
    )


def _refuse(
    conflicts: list[_Conflict], label: str, pick: ResolvedPick, allow_doc_conflicts: bool
) -> None:
    head = f"{label} (head {pick.head_sha[:12]})"
    code = [c for c in conflicts if not is_doc_path(c.path)]
    if code:
        raise CherryPickConflictError(
            f"cherry-pick {head} conflicts with the base in code: {_describe_conflicts(code)}; "
            "drop the pick, or rebase the PR onto the base and pick the resulting commit"
        )
    if not allow_doc_conflicts:
        raise CherryPickConflictError(
            f"cherry-pick {head} conflicts with the base only in docs/tests: "
            f"{_describe_conflicts(conflicts)}; "
            "pass --allow-doc-conflicts to keep the base's side, or drop the pick"
        )


def apply_picks(
    mirror: GitMirror,
    base: str,
    picks: list[ResolvedPick],
    *,
    allow_doc_conflicts: bool,
    source_repo: str | None = None,
) -> tuple[str, list[PickLock]]:
    """Apply ``picks`` in order onto ``base`` -> (final commit, one record per pick)."""
    current, records = base, []
    env_commit = commit_env(mirror, base)
    with tempfile.TemporaryDirectory(prefix="edgevllm-pick-") as tmp:
        for pick in picks:
            current, record = apply_pick(
                mirror,
                current,
                pick,
                allow_doc_conflicts=allow_doc_conflicts,
                env_commit=env_commit,
                work=Path(tmp),
                source_repo=source_repo,
            )
            records.append(record)
    if not mirror.is_ancestor(base, current):  # by construction; guards future changes
        raise SourceError(
            f"prepared tree {current[:12]} does not contain the base {base[:12]}; report this as "
            f"a bug"
        )
    return current, records


# --- export --------------------------------------------------------------------------------------
def gitlinks(mirror: GitMirror, commit: str) -> dict[str, str]:
    """Submodule path -> pinned commit, as recorded in the tree."""
    raw = mirror.git("ls-tree", "-r", "-z", commit).stdout.decode(errors="replace")
    links = {}
    for record in filter(None, raw.split("\0")):
        meta, _, path = record.partition("\t")
        mode, kind, sha = meta.split()
        if kind == "commit":
            links[path] = sha
    return links


def export_tree(mirror: GitMirror, commit: str, dest: Path) -> None:
    """Write the files of ``commit`` into ``dest`` (no .git): the build context."""
    with tempfile.TemporaryDirectory(prefix="edgevllm-export-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        mirror.git("read-tree", commit, env=env)
        mirror.git(
            "-c",
            "core.bare=false",
            f"--work-tree={dest}",
            "checkout-index",
            "--all",
            "--force",
            env=env,
        )


def submodule_urls(mirror: GitMirror, commit: str) -> dict[str, str]:
    """Submodule path -> URL, from the commit's .gitmodules (relative URLs resolved)."""
    proc = mirror.git(
        "config",
        "--blob",
        f"{commit}:.gitmodules",
        "--get-regexp",
        r"^submodule\..*\.(path|url)$",
        check=False,
    )
    names: dict[str, dict[str, str]] = {}
    for line in out(proc).splitlines():
        key, _, value = line.partition(" ")
        name, _, attr = key[len("submodule.") :].rpartition(".")
        names.setdefault(name, {})[attr] = value
    return {
        entry["path"]: _join_url(mirror.url, entry["url"])
        for entry in names.values()
        if "path" in entry and "url" in entry
    }


def _join_url(base: str, relative: str) -> str:
    if not relative.startswith(("./", "../")):
        return relative
    parts = base.rstrip("/").split("/")
    for piece in relative.split("/"):
        if piece == "..":
            parts.pop()
        elif piece not in (".", ""):
            parts.append(piece)
    return "/".join(parts)
