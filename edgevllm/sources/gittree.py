"""A folder's git tree hash, computed here without git: the one owner of that arithmetic.

A folder a user supplies (``--cmake-dep NAME=FOLDER``, ``sources/depfolder.py``) is data from
others: git is never run in it (a repository's config and hooks could run code). Its identity is
the hash git would give its content, so that it can be compared with a lock's tree hash:

- a blob is ``sha1(b"blob <size>\\0" + bytes)``: a file's bytes, or a link's target;
- a tree lists its entries as ``<mode> <name>\\0<binary id>``, sorted by name as bytes with a
  folder's name compared as if it ended in ``/`` (so ``a.b`` sorts before the folder ``a`` but
  after a file ``a``), and is hashed as ``sha1(b"tree <length>\\0" + entries)``;
- modes: ``100644`` a file, ``100755`` an executable one (the owner's execute bit), ``120000`` a
  link, ``40000`` a folder, ``160000`` a submodule (a gitlink: the commit's id, not its files);
- a folder without files is no entry (git keeps no empty folder).

``tests/test_sources_gittree.py`` holds it against ``git write-tree`` on real repositories.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Iterable

FILE, EXECUTABLE, LINK, TREE, GITLINK = "100644", "100755", "120000", "40000", "160000"
ALGORITHMS = {40: "sha1", 64: "sha256"}  # an object id's length in hex -> git's hash


@dataclass(frozen=True)
class Entry:
    """One path of a folder as git would store it: ``path`` relative, ``/``-separated; ``oid``
    the blob's id (a file or a link) or a submodule's commit (``GITLINK``)."""

    path: str
    mode: str
    oid: str


def blob_hasher(size: int, algorithm: str = "sha1"):
    """A hash fed with a blob's header; ``update`` it with exactly ``size`` bytes."""
    digest = hashlib.new(algorithm)
    digest.update(b"blob %d\0" % size)
    return digest


def blob_id(data: bytes, algorithm: str = "sha1") -> str:
    digest = blob_hasher(len(data), algorithm)
    digest.update(data)
    return digest.hexdigest()


def tree_hash(entries: Iterable[Entry], algorithm: str = "sha1") -> str:
    """The id of the tree holding ``entries`` (every path a file, link or gitlink)."""
    root: dict = {}
    for entry in entries:
        *folders, leaf = entry.path.split("/")
        node = root
        for folder in folders:
            node = node.setdefault(folder, {})
            if not isinstance(node, dict):
                raise ValueError(f"{entry.path}: a path below a file")
        if leaf in node:
            raise ValueError(f"{entry.path}: given twice")
        node[leaf] = entry
    return _tree_id(root, algorithm)


def _tree_id(node: dict, algorithm: str) -> str:
    rows = []
    for name, value in node.items():
        raw = name.encode("utf-8")
        if isinstance(value, dict):
            rows.append((raw + b"/", TREE, raw, _tree_id(value, algorithm)))
        else:
            rows.append((raw, value.mode, raw, value.oid))
    body = b"".join(b"%s %s\0" % (mode.encode(), raw) + bytes.fromhex(oid)
                    for _, mode, raw, oid in sorted(rows))
    digest = hashlib.new(algorithm)
    digest.update(b"tree %d\0" % len(body))
    digest.update(body)
    return digest.hexdigest()


def with_gitlinks(entries: Iterable[Entry], links: dict[str, str]) -> list[Entry]:
    """``entries`` with each folder in ``links`` (path -> commit) as git records a submodule:
    one gitlink entry in place of its files. A link inside another (a nested submodule) is
    that one's business: only the outermost count here."""
    outer = {path: sha for path, sha in links.items()
             if not any(path.startswith(other + "/") for other in links)}
    kept = [e for e in entries
            if not any(e.path == p or e.path.startswith(p + "/") for p in outer)]
    return kept + [Entry(path, GITLINK, sha) for path, sha in sorted(outer.items())]


def below(entries: Iterable[Entry], folder: str) -> list[Entry]:
    """The entries under ``folder``, relative to it (a submodule's own files)."""
    prefix = folder + "/"
    return [Entry(e.path[len(prefix):], e.mode, e.oid) for e in entries
            if e.path.startswith(prefix)]


def nested(links: dict[str, str], folder: str) -> dict[str, str]:
    """The submodules inside ``folder``, relative to it."""
    prefix = folder + "/"
    return {path[len(prefix):]: sha for path, sha in links.items() if path.startswith(prefix)}
