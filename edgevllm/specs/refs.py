"""The one owner of how a repository, a PR and a commit are written on the command line or in a
spec.

``normalize_repo`` gives one canonical URL per repository (GitHub ``owner/name``, https/ssh/git/file
URLs, scp-style, local paths); ``parse_pr_arg`` reads ``N``, ``#N`` or a PR URL and keeps the PR's
repository, so a fork's PR URL means the fork wherever it is given (``inv build``, ``inv sources``,
``inv plan``, a spec file). ``UPSTREAM_REPOS`` is the one table of the upstream URLs. Pure
functions: no git, no network.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional
from urllib.parse import urlsplit

from edgevllm.common.errors import RefSyntaxError

GITHUB = "github.com"
# The upstream repositories edgevllm builds from, by source name: the one table of their URLs.
UPSTREAM_REPOS = {
    "vllm": "https://github.com/vllm-project/vllm.git",
    "flashinfer": "https://github.com/flashinfer-ai/flashinfer.git",
}
_SHA_RE = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?\Z")
_HEX_RE = re.compile(r"^[0-9a-f]{4,64}\Z")
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+\Z")
_SCP_RE = re.compile(r"^(?:(?P<user>[A-Za-z0-9_.-]+)@)?(?P<host>[A-Za-z0-9.-]+):(?P<path>[^/].*)\Z")
_PR_URL_RE = re.compile(
    r"^https?://(?:www\.)?github\.com/([^/\s]+)/([^/\s]+)/pull/([^/\s#?]+)(?:[/#?].*)?$"
)
_COMMIT_URL_RE = re.compile(
    r"^https?://(?:www\.)?github\.com/([^/\s]+)/([^/\s]+)/commit/([^/\s#?]+)/?$"
)
_SCHEMES = ("https", "http", "ssh", "git", "file")


def is_full_sha(text: str) -> bool:
    return bool(_SHA_RE.match(text))


def looks_like_sha(text: str) -> bool:
    return bool(_HEX_RE.match(text)) and any(ch.isdigit() for ch in text)


# --- URLs ----------------------------------------------------------------------------------------
def _github_repo(owner: str, name: str, given: str) -> str:
    name = name[:-4] if name.endswith(".git") else name
    if not (_NAME_RE.match(owner) and _NAME_RE.match(name)) or name in (".", ".."):
        raise RefSyntaxError(
            f"repository '{given}': not a valid GitHub owner/repo; use e.g. vllm-project/vllm"
        )
    return f"https://github.com/{owner}/{name}.git"


def _normalize_url(spec: str) -> str:
    parts = urlsplit(spec)
    scheme = parts.scheme.lower()
    if scheme not in _SCHEMES:
        raise RefSyntaxError(
            f"repository '{spec}': unsupported URL scheme '{parts.scheme}'; use https://, ssh://, "
            f"git://, file:// or a local path"
        )
    if scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise RefSyntaxError(
                f"repository '{spec}': a file:// URL needs an absolute path (file:///path/to/repo)"
            )
        return f"file://{parts.path.rstrip('/') or '/'}"
    if not parts.hostname:
        raise RefSyntaxError(
            f"repository '{spec}': no host in the URL; use e.g. https://github.com/vllm-project/vllm.git"
        )
    if _PR_URL_RE.match(spec) or _COMMIT_URL_RE.match(spec):
        raise RefSyntaxError(
            f"repository '{spec}': that is a PR/commit URL, not a repository; pass it to "
            f"--vllm-pr or --cherry-pick"
        )
    if parts.hostname.lower() in (GITHUB, "www." + GITHUB) and scheme in ("https", "http"):
        segments = [s for s in parts.path.split("/") if s]
        if len(segments) != 2:
            raise RefSyntaxError(
                f"repository '{spec}': a GitHub URL must be https://github.com/OWNER/REPO[.git]"
            )
        return _github_repo(segments[0], segments[1], spec)
    if not parts.path.strip("/"):
        raise RefSyntaxError(f"repository '{spec}': no repository path in the URL")
    return spec.rstrip("/")


def normalize_repo(spec: str) -> str:
    """The URL git fetches from, in one canonical spelling per repository.

    Accepts ``owner/repo`` (GitHub), https/ssh/git/file URLs, ``git@host:owner/repo.git`` and
    local paths (made absolute). Raises ``SourceError`` naming the input when it is none of these.
    """
    text = (spec or "").strip()
    if not text:
        raise RefSyntaxError("repository: empty; give a URL, owner/repo or a local path")
    if any(ch.isspace() for ch in text):
        raise RefSyntaxError(
            f"repository '{text}': contains whitespace; give a URL, owner/repo or a local path"
        )
    if "://" in text:
        return _normalize_url(text)
    local = Path(text).expanduser()
    if text.startswith(("/", "./", "../", "~")) or local.exists():
        if not local.exists():
            raise RefSyntaxError(
                f"repository '{text}': no such local path; check the path or give a URL"
            )
        return str(local.resolve())
    scp = _SCP_RE.match(text)
    if scp:
        host, path = scp.group("host").lower(), scp.group("path").rstrip("/")
        if host == GITHUB:
            segments = [s for s in path.split("/") if s]
            if len(segments) != 2:
                raise RefSyntaxError(f"repository '{text}': expected git@github.com:OWNER/REPO.git")
            name = segments[1][:-4] if segments[1].endswith(".git") else segments[1]
            _github_repo(segments[0], name, text)  # validates
            return f"{scp.group('user') or 'git'}@{GITHUB}:{segments[0]}/{name}.git"
        return text.rstrip("/")
    segments = text.split("/")
    if len(segments) == 2 and all(segments):
        return _github_repo(segments[0], segments[1], text)
    raise RefSyntaxError(
        f"repository '{text}': not a git URL, OWNER/REPO or an existing local path")


def repo_key(url: str) -> str:
    """A cache key: the same repository over https and ssh shares one mirror."""
    if url.startswith("/"):
        return f"file:{url}"
    if url.startswith("file://"):
        return f"file:{url[len('file://') :]}"
    scp = _SCP_RE.match(url) if "://" not in url else None
    if scp:
        host, path = scp.group("host"), scp.group("path")
    else:
        parts = urlsplit(url)
        host = (parts.hostname or "") + (
            f":{parts.port}" if parts.port and parts.hostname != GITHUB else ""
        )
        path = parts.path
    path = path.strip("/")
    path = path[:-4] if path.endswith(".git") else path
    return f"{host.lower()}/{path.lower() if host.lower() == GITHUB else path}"


def parse_pr_url(text: str) -> tuple[str, int] | None:
    """``https://github.com/OWNER/REPO/pull/N[/files]`` -> (repo URL, N); None when not a PR URL."""
    match = _PR_URL_RE.match(text.strip())
    if not match:
        return None
    owner, name, number = match.groups()
    if not number.isdigit() or int(number) < 1:
        raise RefSyntaxError(
            f"PR URL '{text}': '{number}' is not a PR number; use https://github.com/OWNER/REPO/pull/N"
        )
    return _github_repo(owner, name, text), int(number)


def parse_commit_url(text: str) -> tuple[str, str] | None:
    """``https://github.com/OWNER/REPO/commit/SHA`` -> (repo URL, SHA); None when not one."""
    match = _COMMIT_URL_RE.match(text.strip())
    if not match:
        return None
    owner, name, sha = match.groups()
    if not is_full_sha(sha.lower()):
        raise RefSyntaxError(
            f"commit URL '{text}': '{sha}' is not a full commit SHA; copy the 40-character SHA"
        )
    return _github_repo(owner, name, text), sha.lower()


def parse_change_url(text: str, what: str) -> tuple[str, int | str] | None:
    """A PR URL -> (repo URL, N); a commit URL -> (repo URL, SHA); None for a URL that names
    neither (a repository, ``REPO#N``, ``REPO@SHA``); a PR or commit URL off its grammar is one
    line."""
    if "://" not in text:
        return None
    segments = urlsplit(text.strip()).path.split("/")
    if "pull" in segments:
        pr = parse_pr_url(text)
        if pr is None:
            raise RefSyntaxError(f"{what} '{text}': not a PR URL; use "
                                 "https://github.com/OWNER/REPO/pull/N")
        return pr
    if "commit" in segments:
        commit = parse_commit_url(text)
        if commit is None:
            raise RefSyntaxError(f"{what} '{text}': not a commit URL; use "
                                 "https://github.com/OWNER/REPO/commit/SHA")
        return commit
    return None


def display_repo(url: str) -> str:
    """Short name for messages: ``vllm-project/vllm`` for GitHub, the URL or path otherwise."""
    key = repo_key(url)
    return key[len(GITHUB) + 1 :] if key.startswith(GITHUB + "/") else url


def parse_pr_number(value: object, what: str = "--vllm-pr") -> int:
    text = str(value).strip().lstrip("#")
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise RefSyntaxError(
            f"{what} '{value}': not a PR number; give N or https://github.com/OWNER/REPO/pull/N"
        )
    return int(text)


def parse_pr_arg(value: object, what: str = "--vllm-pr") -> tuple[Optional[str], int]:
    """``N``, ``#N`` or a PR URL -> (repo URL or None, N)."""
    text = str(value).strip()
    parsed = parse_pr_url(text) if "://" in text else None
    if parsed:
        return parsed
    if "://" in text:
        raise RefSyntaxError(
            f"{what} '{text}': not a PR URL; use https://github.com/OWNER/REPO/pull/N"
        )
    return None, parse_pr_number(text, what)
