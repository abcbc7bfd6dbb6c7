"""A folder swapped for a link while it is copied: what a hostile writer of a folder it gave does
between the copy's listing and its reading. Made deterministic by a hook on the copying module's
``_copy_file`` (which then runs as it is): when the first file is copied, the folder moves aside
and a link takes its name. The descriptor copies (common/fdtree.py, sources/depfolder.py) are
tested with it."""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

import pytest

SECRET = "host secret: must never land in the copy"


def tree(root: Path, files: dict[str, str]) -> Path:
    """``files`` (relative path -> text) written under ``root``; ``root``."""
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def texts(folder: Path) -> str:
    """Every file's text under ``folder``, joined (to look for SECRET in a copy)."""
    return "".join(p.read_text() for p in folder.rglob("*") if p.is_file())


def swap_on_first_copy(monkeypatch: pytest.MonkeyPatch, module: ModuleType, folder: Path,
                       target: str | Path) -> None:
    """When ``module._copy_file`` first runs, ``folder`` is renamed to ``<folder>.old`` and a
    link to ``target`` takes its place."""
    real = module._copy_file
    done: list[bool] = []

    def hook(*args, **kwargs):
        if not done:
            done.append(True)
            folder.rename(folder.with_name(folder.name + ".old"))
            os.symlink(target, folder)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "_copy_file", hook)
