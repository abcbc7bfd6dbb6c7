"""Names from others that become paths: inside their folder, and no link out of it.

An eugr mod's ``run.sh`` names the files it copies (``cp chat.jinja $WORKSPACE_DIR/``), a recipe
names the files its mods provide, and a mod folder arrives with whatever links its author made.
A name like ``/home/me/.ssh/id_ed25519``, ``../../secret`` or a link to one must never make
edgevllm read a host file into a recipe, a user's mod or an image. ``inside`` is the one check of
such a name; ``links_out`` finds the links of a folder that leave it (or lead nowhere).
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath


def inside(folder: Path, name: str) -> Path | None:
    """``folder / name`` when ``name`` is relative, climbs with no ``..`` and, links resolved,
    stays inside ``folder``; None otherwise."""
    if not name or "\0" in name or name.startswith(("/", "~", "\\")):
        return None
    if ".." in PurePosixPath(name).parts:
        return None
    path = folder / name
    return path if _within(path, folder) else None


def links_out(folder: Path) -> list[Path]:
    """Every symbolic link under ``folder`` whose target is outside it or missing (walked
    without following links)."""
    found = []
    for top, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(top) / name
            if path.is_symlink() and not (path.exists() and _within(path, folder)):
                found.append(path)
    return sorted(found)


def _within(path: Path, folder: Path) -> bool:
    try:
        real, root = path.resolve(), folder.resolve()
    except (OSError, RuntimeError):
        return False
    return real == root or root in real.parents
