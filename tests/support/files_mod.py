"""A files-only mod written for a test or a bench: one data file it installs, nothing else, so a
rebuild that changes the file changes only the mods layer (the build tail's one-mod case)."""

from __future__ import annotations

from pathlib import Path


def write_files_mod(root: Path, name: str, text: str, dest: str, description: str) -> Path:
    """The mod ``name`` under ``root`` (an EDGEVLLM_MODS_PATH folder), installing ``text`` as
    ``dest/setting.txt``; its folder."""
    folder = root / name
    (folder / "data").mkdir(parents=True, exist_ok=True)
    (folder / "data" / "setting.txt").write_text(text)
    (folder / "manifest.yaml").write_text(
        f"name: {name}\nversion: \"1\"\ndescription: {description}\n"
        "targets: [spark]\nsteps:\n  - kind: files\n    title: install the setting\n"
        f"    source: data\n    dest: {dest}\n")
    return folder
