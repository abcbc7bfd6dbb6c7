"""Property: any folder a user supplies (``--cmake-dep``) through the gate (sources/depfolder.py)
either is refused in one line of edgevllm's own, or hashes as git hashes it: the tree of the
Python hash (sources/gittree.py) is ``git write-tree``'s for the same files, whatever the names
(dots, dashes, spaces, unicode, names that are prefixes of others), modes and links."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from edgevllm.common.errors import SuppliedFolderError
from edgevllm.sources.depfolder import survey, take
from edgevllm.sources.gittree import tree_hash
from support.properties import PROPERTY, bounded

GIT_ENV = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
# Characters that move git's order around '/' (0x2f): '-' '.' sort before it, '0' '_' 'a' after.
NAME = st.text(alphabet="ab-._0 é/", min_size=1, max_size=12)


@st.composite
def folders(draw) -> list[tuple[str, str, object]]:
    """(path, kind, payload): files (bytes, executable or not) and relative links."""
    items = []
    for _ in range(draw(st.integers(1, 8))):
        path = draw(NAME)
        kind = draw(st.sampled_from(["file", "file", "exec", "link"]))
        payload = draw(st.binary(max_size=64)) if kind != "link" else draw(
            st.sampled_from(["a", "../a", "b/c", "/etc/passwd", "../../out", "."]))
        items.append((path, kind, payload))
    return items


def _write(root: Path, items) -> bool:
    """The folder on disk; False where the file system itself refuses the layout."""
    try:
        for path, kind, payload in items:
            target = root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists() or target.is_symlink():
                continue
            if kind == "link":
                os.symlink(payload, target)
            else:
                target.write_bytes(payload)
                if kind == "exec":
                    target.chmod(0o755)
    except (OSError, ValueError):
        return False
    return True


def _git_tree(root: Path) -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                              text=True, env={**os.environ, **GIT_ENV}).stdout.strip()
    git("init", "-q")
    git("add", "-A", "--force")
    return git("write-tree")


@PROPERTY
@given(folders())
def test_a_folder_is_refused_in_one_line_or_hashes_as_git_does(items):
    work = Path(tempfile.mkdtemp(prefix="edgevllm-depfolder-"))
    try:
        root = work / "dep"
        root.mkdir()
        if not _write(root, items):
            return
        found = bounded(survey, "dep", root)
        if isinstance(found, SuppliedFolderError):
            return
        assert not isinstance(found, Exception), found
        entries = bounded(take, found, work / "copy")
        assert not isinstance(entries, Exception), entries
        assert tree_hash(entries) == _git_tree(root)
    finally:
        shutil.rmtree(work, ignore_errors=True)
