"""A folder's git tree hash computed in Python (sources/gittree.py), held against real git:
``git write-tree`` / ``git rev-parse HEAD^{tree}`` on repositories made here, with an executable
file, a link, nested folders, names that sort differently under git's trailing-slash rule, an
empty folder (no entry) and a submodule (a gitlink)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from edgevllm.sources.depfolder import survey, take
from edgevllm.sources.gittree import (
    EXECUTABLE,
    FILE,
    GITLINK,
    LINK,
    Entry,
    below,
    blob_id,
    nested,
    tree_hash,
    with_gitlinks,
)

ENV = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "t",
       "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@example.invalid"}


def git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          env={**os.environ, **ENV})
    assert proc.returncode == 0, f"git {args}: {proc.stderr}"
    return proc.stdout.strip()


def write(root: Path, files: dict[str, str | bytes]) -> None:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())


def hashed(folder: Path, tmp: Path) -> str:
    """The folder through the gate (survey, then take into a copy) and its tree hash."""
    return tree_hash(take(survey("dep", folder), tmp / "copy"))


def real_repo(root: Path, object_format: str = "sha1") -> Path:
    root.mkdir(parents=True)
    git(root, "init", "-q", f"--object-format={object_format}")
    write(root, {
        "README.md": "a dependency\n",
        "a": "a file named like the folder 'a-b' sorts against\n",
        "a-b/x.h": "// in a-b\n",
        "a.b": "sorts before the folder 'a' (a/ > a.b) but after the file 'a'\n",
        "c/d/e/deep.txt": "nested\n",
        "c.txt": "sorts after the folder c? no: 'c.' < 'c/'\n",
        "bin/run.sh": "#!/bin/sh\necho run\n",
        "data.bin": bytes(range(256)) * 8,
        "empty.txt": "",
        "ünï code.txt": "names as bytes\n",
    })
    (root / "a-b" / "sub").mkdir()  # the folder 'a' vs 'a-b' vs 'a.b' order
    write(root, {"a-b/sub/y.h": "// y\n"})
    os.chmod(root / "bin" / "run.sh", 0o755)
    os.symlink("../README.md", root / "c" / "readme-link")
    os.symlink("d", root / "c" / "d-link")
    (root / "empty-folder").mkdir()   # git keeps no empty folder
    git(root, "add", "-A")
    git(root, "commit", "-qm", "one")
    return root


def test_the_tree_hash_is_gits_on_a_real_repository(tmp_path):
    repo = real_repo(tmp_path / "repo")
    expected = git(repo, "rev-parse", "HEAD^{tree}")
    assert git(repo, "write-tree") == expected
    assert hashed(repo, tmp_path) == expected   # .git skipped, the empty folder not an entry


def test_gits_order_puts_a_file_a_dot_b_before_the_folder_a(tmp_path):
    """The trailing-slash rule decides: 'a.b' (a file) before the folder 'a' in git's order,
    though 'a' < 'a.b' as plain strings."""
    entries = [Entry("a/x", FILE, blob_id(b"x")), Entry("a.b", FILE, blob_id(b"y"))]
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q")
    write(repo, {"a/x": "x", "a.b": "y"})
    git(repo, "add", "-A")
    assert tree_hash(entries) == git(repo, "write-tree")
    listing = git(repo, "ls-tree", git(repo, "write-tree"))
    assert [line.split("\t")[1] for line in listing.splitlines()] == ["a.b", "a"]


def test_modes_executable_and_link_are_gits(tmp_path):
    repo = real_repo(tmp_path / "repo")
    entries = {e.path: e for e in take(survey("dep", repo), tmp_path / "copy")}
    assert entries["bin/run.sh"].mode == EXECUTABLE and entries["README.md"].mode == FILE
    assert entries["c/readme-link"].mode == LINK
    assert entries["c/readme-link"].oid == git(repo, "rev-parse", "HEAD:c/readme-link")
    assert entries["data.bin"].oid == git(repo, "rev-parse", "HEAD:data.bin")
    copy = tmp_path / "copy"
    assert os.access(copy / "bin" / "run.sh", os.X_OK) and not os.access(copy / "a", os.X_OK)
    assert os.readlink(copy / "c" / "readme-link") == "../README.md"
    assert not (copy / ".git").exists() and not (copy / "empty-folder").exists()


def test_a_submodule_is_a_gitlink_and_its_own_tree(tmp_path):
    sub = real_repo(tmp_path / "sub")
    top = tmp_path / "top"
    top.mkdir()
    git(top, "init", "-q")
    write(top, {"main.c": "int main;\n"})
    git(top, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "third/sub")
    git(top, "add", "-A")
    git(top, "commit", "-qm", "with a submodule")
    commit = git(sub, "rev-parse", "HEAD")
    entries = take(survey("dep", top), tmp_path / "copy")  # the submodule's files, checked out
    links = {"third/sub": commit}
    assert tree_hash(with_gitlinks(entries, links)) == git(top, "rev-parse", "HEAD^{tree}")
    assert tree_hash(with_gitlinks(below(entries, "third/sub"), nested(links, "third/sub"))) \
        == git(sub, "rev-parse", "HEAD^{tree}")
    assert tree_hash(entries) != git(top, "rev-parse", "HEAD^{tree}")  # as plain files: not git's
    ls = git(top, "ls-tree", "HEAD", "third/sub")
    assert ls.startswith(f"{GITLINK} commit {commit}")


def test_sha256_repositories_too(tmp_path):
    probe = subprocess.run(["git", "init", "-q", "--object-format=sha256", str(tmp_path / "p")],
                           capture_output=True, text=True)
    assert probe.returncode == 0, f"this git has no sha256 repositories: {probe.stderr}"
    repo = real_repo(tmp_path / "repo", "sha256")
    entries = take(survey("dep", repo), tmp_path / "copy", algorithm="sha256")
    assert tree_hash(entries, "sha256") == git(repo, "rev-parse", "HEAD^{tree}")


def test_a_path_given_twice_or_below_a_file_is_refused():
    with pytest.raises(ValueError, match="given twice"):
        tree_hash([Entry("a", FILE, blob_id(b"")), Entry("a", FILE, blob_id(b"x"))])
    with pytest.raises(ValueError, match="below a file"):
        tree_hash([Entry("a", FILE, blob_id(b"")), Entry("a/b", FILE, blob_id(b"x"))])
