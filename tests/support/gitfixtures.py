"""Local git repositories that behave like a GitHub upstream, for source/cherry-pick/lock tests.

``make_upstream_repo(tmp)`` creates a bare repository with a ``main`` branch, tags and PR refs
(``refs/pull/N/head``) covering every cherry-pick outcome; ``make_upstream_repo(tmp, initial_tree)``
starts from a folder of your own (e.g. a stand-in vLLM package) and only adds ``main`` and the tag
``v0.1.0``: add PRs with ``add_pr``. ``git_daemon(folder)`` serves a folder of repositories over
``git://127.0.0.1:<free port>`` (real network transport, protocol v2, like GitHub).

Commits are made with plumbing (no working tree), fixed identities and increasing fixed dates, so
the same calls give the same SHAs.

The scenario upstream (``make_upstream_repo(tmp)``)::

    c1 (v0.1.0) --- c2 ---------- c3 ------------ c4 (merge) -- c5 (main)       v0.2.0 = c4
      |  \\  \\  \\      \\ PR 105 (movable, from c2)  /
      |   \\  \\  PR 101 (clean)   PR 102 (squash-merged as c3)  PR 106 (merged as c4)
      |    PR 103 (docs/tests conflict + a clean code change)  PR 104 (code conflict)
      release/0.1: r1 (v0.1.1, not on main)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping, Union

import pytest

PR_CLEAN = 101  # adds src/feature.py, edits src/core.py line 15: applies cleanly onto main
PR_MERGED = 102  # edits src/extra.py; main has the same change squash-merged (c3)
PR_DOC_CONFLICT = 103  # conflicts with main on docs/guide.md line 3; adds src/docfix.py cleanly
PR_CODE_CONFLICT = 104  # conflicts with main on src/core.py line 5
PR_MOVABLE = 105  # adds src/movable.py (MOVABLE = 1); move_pr() moves its head
PR_ANCESTOR = 106  # adds src/anc.py; merged into main with a merge commit (its head is an ancestor)
PR_MISSING = 999  # no such PR

Changes = Mapping[str, Union[str, bytes, None]]  # path -> new content; None deletes the file

_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}


@dataclass
class Upstream:
    """A bare repository standing in for GitHub's upstream."""

    path: Path
    shas: dict[str, str] = field(default_factory=dict)  # named commits (c1.., r1, pr101, ...)
    prs: dict[int, str] = field(default_factory=dict)  # PR number -> current head
    _clock: list[int] = field(default_factory=lambda: [1_700_000_000])

    @property
    def url(self) -> str:
        return str(self.path)

    @property
    def file_url(self) -> str:
        return f"file://{self.path}"

    def git(
        self, *args: str, env: Mapping[str, str] | None = None, input: bytes | None = None
    ) -> str:
        return git(self.path, *args, env=env, input=input)

    def tick(self) -> str:
        self._clock[0] += 60
        return f"@{self._clock[0]} +0000"


def git(
    repo: Path, *args: str, env: Mapping[str, str] | None = None, input: bytes | None = None
) -> str:
    full_env = {**os.environ, **_ENV, **(env or {})}
    proc = subprocess.run(
        ["git", "--git-dir", str(repo), *args], input=input, capture_output=True, env=full_env
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"git {' '.join(args)} failed: {proc.stderr.decode(errors='replace').strip()}"
        )
    return proc.stdout.decode(errors="replace").strip()


def _identity(upstream: Upstream) -> dict[str, str]:
    date = upstream.tick()
    return {
        "GIT_AUTHOR_NAME": "Fixture Dev",
        "GIT_AUTHOR_EMAIL": "dev@example.invalid",
        "GIT_AUTHOR_DATE": date,
        "GIT_COMMITTER_NAME": "Fixture Dev",
        "GIT_COMMITTER_EMAIL": "dev@example.invalid",
        "GIT_COMMITTER_DATE": date,
    }


def commit(
    upstream: Upstream,
    parents: list[str],
    changes: Changes,
    message: str,
    ref: str | None = None,
    tree_from: Path | None = None,
) -> str:
    """A commit on ``parents[0]``'s tree plus ``changes`` (or the files of ``tree_from``)."""
    with tempfile.TemporaryDirectory(prefix="gitfixture-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        if tree_from is not None:
            subprocess.run(
                [
                    "git",
                    "--git-dir",
                    str(upstream.path),
                    f"--work-tree={tree_from}",
                    "-c",
                    "core.bare=false",
                    "add",
                    "-A",
                    ".",
                ],
                cwd=tree_from,
                check=True,
                capture_output=True,
                env={**os.environ, **_ENV, **env},
            )
        elif parents:
            upstream.git("read-tree", parents[0], env=env)
        for path, content in changes.items():
            if content is None:
                upstream.git("rm", "--cached", "--quiet", "--", path, env=env)
                continue
            data = content.encode() if isinstance(content, str) else content
            blob = upstream.git("hash-object", "-w", "--stdin", input=data)
            upstream.git("update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", env=env)
        tree = upstream.git("write-tree", env=env)
    args = ["commit-tree", tree]
    for parent in parents:
        args += ["-p", parent]
    sha = upstream.git(*args, "-m", message, env=_identity(upstream))
    if ref:
        upstream.git("update-ref", ref, sha)
    return sha


def head(upstream: Upstream, branch: str = "main") -> str:
    return upstream.git("rev-parse", f"refs/heads/{branch}")


def commit_to_branch(upstream: Upstream, branch: str, changes: Changes, message: str) -> str:
    """Advance ``branch`` by one commit."""
    return commit(upstream, [head(upstream, branch)], changes, message, ref=f"refs/heads/{branch}")


def add_pr(
    upstream: Upstream,
    number: int,
    changes: Changes,
    base: str = "main",
    message: str | None = None,
) -> str:
    """Open PR ``number``: one commit on ``base`` (branch, tag or SHA) -> ``refs/pull/N/head``."""
    parent = upstream.git("rev-parse", f"{base}^{{commit}}")
    sha = commit(
        upstream, [parent], changes, message or f"PR #{number}", ref=f"refs/pull/{number}/head"
    )
    upstream.prs[number] = sha
    return sha


def move_pr(upstream: Upstream, number: int, changes: Changes, message: str | None = None) -> str:
    """Push one more commit to PR ``number`` (its head moves)."""
    sha = commit(
        upstream,
        [upstream.prs[number]],
        changes,
        message or f"PR #{number} update",
        ref=f"refs/pull/{number}/head",
    )
    upstream.prs[number] = sha
    return sha


def force_push_pr(upstream: Upstream, number: int, changes: Changes, base: str = "main") -> str:
    """Replace PR ``number``'s history (a force-push): the old head becomes unreachable."""
    return add_pr(upstream, number, changes, base=base, message=f"PR #{number} rewritten")


def vanish_unreachable(upstream: Upstream) -> None:
    """Garbage-collect unreachable commits now, as GitHub eventually does after a force-push."""
    upstream.git("reflog", "expire", "--expire=now", "--all")
    upstream.git("gc", "--quiet", "--prune=now")


def has_commit(upstream: Upstream, sha: str) -> bool:
    return (
        subprocess.run(
            ["git", "--git-dir", str(upstream.path), "cat-file", "-e", f"{sha}^{{commit}}"],
            capture_output=True,
        ).returncode
        == 0
    )


def _init(path: Path) -> Upstream:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["git", "init", "--quiet", "--bare", "--initial-branch=main", str(path)],
        check=True,
        env={**os.environ, **_ENV},
    )
    upstream = Upstream(path=path)
    upstream.git("config", "uploadpack.allowAnySHA1InWant", "true")  # like GitHub: fetch by SHA
    upstream.git("config", "gc.auto", "0")
    return upstream


def _tag(upstream: Upstream, name: str, sha: str, annotated: bool = False) -> None:
    if annotated:
        upstream.git("tag", "-a", name, "-m", f"release {name}", sha, env=_identity(upstream))
    else:
        upstream.git("update-ref", f"refs/tags/{name}", sha)


def _numbered(prefix: str, count: int, overrides: Mapping[int, str] | None = None) -> str:
    overrides = overrides or {}
    return "".join(f"{overrides.get(i, f'{prefix}{i:02d}')}\n" for i in range(1, count + 1))


def core_py(**lines: str) -> str:
    """src/core.py: twenty ``VALUE_NN = NN`` lines; ``core_py(l5="VALUE_05 = 'x'")`` overrides
    one."""
    overrides = {int(k[1:]): v for k, v in lines.items()}
    return "".join(f"{overrides.get(i, f'VALUE_{i:02d} = {i}')}\n" for i in range(1, 21))


def guide_md(**lines: str) -> str:
    overrides = {int(k[1:]): v for k, v in lines.items()}
    return "# Guide\n" + "".join(f"{overrides.get(i, f'guide line {i}')}\n" for i in range(2, 11))


SCENARIO_TREE = {
    "README.md": "# fixture upstream\n",
    "src/__init__.py": "",
    "src/core.py": core_py(),
    "src/extra.py": "EXTRA = 1\n",
    "docs/guide.md": guide_md(),
    "tests/test_core.py": "def test_core():\n    assert True\n",
}


def make_upstream_repo(
    tmp: Path,
    initial_tree: Path | None = None,
    *,
    scenarios: bool | None = None,
    name: str = "upstream.git",
) -> Upstream:
    """A bare upstream at ``tmp/name``; see the module docstring for the scenario history.

    With ``initial_tree``, main starts from that folder's files (tag ``v0.1.0``) and, unless
    ``scenarios=True``, nothing else is added: use ``add_pr``/``commit_to_branch``.
    """
    upstream = _init(Path(tmp) / name)
    if initial_tree is not None:
        c1 = commit(
            upstream, [], {}, "initial import", ref="refs/heads/main", tree_from=Path(initial_tree)
        )
    else:
        c1 = commit(upstream, [], SCENARIO_TREE, "initial import", ref="refs/heads/main")
    upstream.shas["c1"] = c1
    _tag(upstream, "v0.1.0", c1, annotated=True)
    if scenarios is None:
        scenarios = initial_tree is None
    if scenarios:
        _add_scenarios(upstream)
    return upstream


def _add_scenarios(up: Upstream) -> None:
    c1 = up.shas["c1"]
    # A release branch off c1 that main never merges.
    up.shas["r1"] = commit(
        up,
        [c1],
        {"src/release.py": "RELEASE = '0.1.1'\n"},
        "release 0.1.1",
        ref="refs/heads/release/0.1",
    )
    _tag(up, "v0.1.1", up.shas["r1"])
    # PRs opened against c1.
    up.shas["pr101"] = add_pr(
        up,
        PR_CLEAN,
        {"src/feature.py": "FEATURE = True\n", "src/core.py": core_py(l15="VALUE_15 = 'feature'")},
        base=c1,
    )
    up.shas["pr102"] = add_pr(up, PR_MERGED, {"src/extra.py": "EXTRA = 2\n"}, base=c1)
    up.shas["pr103"] = add_pr(
        up,
        PR_DOC_CONFLICT,
        {
            "docs/guide.md": guide_md(l3="guide line 3 (from the PR)"),
            "tests/test_core.py": "def test_core():\n    assert 1 == 1\n",
            "src/docfix.py": "DOCFIX = 1\n",
        },
        base=c1,
    )
    up.shas["pr104"] = add_pr(
        up, PR_CODE_CONFLICT, {"src/core.py": core_py(l5="VALUE_05 = 'from the PR'")}, base=c1
    )
    up.shas["pr106"] = add_pr(up, PR_ANCESTOR, {"src/anc.py": "ANC = 1\n"}, base=c1)
    # main moves on: conflicting edits, a squash merge, a true merge, later work.
    up.shas["c2"] = commit_to_branch(
        up,
        "main",
        {
            "src/core.py": core_py(l5="VALUE_05 = 'main'"),
            "docs/guide.md": guide_md(l3="guide line 3 (main)"),
            "tests/test_core.py": "def test_core():\n    assert not False\n",
        },
        "main: edit core and docs",
    )
    up.shas["pr105"] = add_pr(up, PR_MOVABLE, {"src/movable.py": "MOVABLE = 1\n"}, base="main")
    up.shas["c3"] = commit_to_branch(
        up, "main", {"src/extra.py": "EXTRA = 2\n"}, f"squash-merge PR #{PR_MERGED}"
    )
    c4_tree = {"src/anc.py": "ANC = 1\n"}
    up.shas["c4"] = commit(
        up,
        [up.shas["c3"], up.shas["pr106"]],
        c4_tree,
        f"Merge PR #{PR_ANCESTOR}",
        ref="refs/heads/main",
    )
    _tag(up, "v0.2.0", up.shas["c4"], annotated=True)
    up.shas["c5"] = commit_to_branch(
        up, "main", {"src/later.py": "LATER = 1\n"}, "main: later work"
    )


def copy_upstream(upstream: Upstream, dest: Path) -> Upstream:
    """A copy (e.g. a fork) with the same refs and objects."""
    shutil.copytree(upstream.path, dest)
    return Upstream(
        path=dest, shas=dict(upstream.shas), prs=dict(upstream.prs), _clock=list(upstream._clock)
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def git_daemon(base_path: Path) -> Iterator[str]:
    """Serve every repository under ``base_path`` at ``git://127.0.0.1:<port>/<name>``; yields
    the base URL."""
    if not Path(
        subprocess.run(["git", "--exec-path"], capture_output=True, text=True).stdout.strip(),
        "git-daemon",
    ).exists():
        raise RuntimeError(
            "git daemon is missing: install it (apt-get install git-daemon-sysvinit, or git-core)"
        )
    for _attempt in range(5):
        port = free_port()
        proc = subprocess.Popen(
            [
                "git",
                "daemon",
                "--reuseaddr",
                "--export-all",
                "--informative-errors",
                f"--base-path={base_path}",
                "--listen=127.0.0.1",
                f"--port={port}",
                "--enable=upload-pack",
                str(base_path),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, **_ENV},
        )
        if _wait_listening(port, proc):
            break
        proc.kill()
        proc.wait()
    else:
        raise RuntimeError("git daemon did not start on 127.0.0.1 after 5 attempts")
    try:
        yield f"git://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_listening(port: int, proc: subprocess.Popen) -> bool:
    for _ in range(200):  # the daemon binds within milliseconds; this bounds a broken start
        if proc.poll() is not None:
            return False
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.05)
    return False


# --- pytest fixtures (import them into a test module to use them) ---------------------------
@pytest.fixture
def git_cache(tmp_path, monkeypatch) -> Path:
    """A private, empty edgevllm cache (git mirrors) for one test."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("EDGEVLLM_CACHE", str(cache))
    return cache


@pytest.fixture
def upstream(tmp_path) -> Upstream:
    """The scenario upstream (see the module docstring), fresh for each test."""
    return make_upstream_repo(tmp_path / "remote")


@pytest.fixture
def daemon_url(upstream) -> Iterator[str]:
    """``git://127.0.0.1:<port>/upstream.git`` serving the scenario upstream."""
    with git_daemon(upstream.path.parent) as base:
        yield f"{base}/{upstream.path.name}"


def run_cli(
    *args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``edgevllm <args>`` in a fresh interpreter, as a user runs it."""
    import sys

    root = Path(__file__).resolve().parents[2]
    full_env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
        "NO_COLOR": "1",
        "COLUMNS": "400",
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, "-c", "from edgevllm.cli import main; main()", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
    )


def assert_one_error_line(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """A failed CLI run: non-zero exit, exactly one ``error:`` line containing ``needles``, no
    traceback."""
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


def leftovers(folder: Path, name: str) -> list[str]:
    """Anything under ``folder`` named like ``name`` or a temporary of it (``.name.tmp-*``)."""
    return sorted(
        p.name for p in folder.iterdir() if p.name == name or p.name.startswith(f".{name}.")
    )


def add_submodule(
    upstream: Upstream, path: str, sub: Upstream, url: str | None = None, branch: str = "main"
) -> str:
    """Commit a submodule (gitlink + .gitmodules) at ``path`` pinned to ``sub``'s ``branch`` tip."""
    sha = head(sub, branch)
    gitmodules = f'[submodule "{path}"]\n\tpath = {path}\n\turl = {url or sub.url}\n'
    parent = head(upstream)
    with tempfile.TemporaryDirectory(prefix="gitfixture-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        upstream.git("read-tree", parent, env=env)
        blob = upstream.git("hash-object", "-w", "--stdin", input=gitmodules.encode())
        upstream.git("update-index", "--add", "--cacheinfo", f"100644,{blob},.gitmodules", env=env)
        upstream.git("update-index", "--add", "--cacheinfo", f"160000,{sha},{path}", env=env)
        tree = upstream.git("write-tree", env=env)
    new = upstream.git(
        "commit-tree", tree, "-p", parent, "-m", f"add submodule {path}", env=_identity(upstream)
    )
    upstream.git("update-ref", "refs/heads/main", new)
    return new
