"""A supplied dependency folder (``--cmake-dep``, sources/depfolder.py) cannot be redirected while
it is copied: a folder swapped for a link between its listing and its reading is refused in one
line, a file is read from the folder that was listed, and the folder itself must be the one the
preflight surveyed. Real files and links; the swap is made deterministic by a hook on the copy of
one file (``_copy_file``, which then runs as it is), so it lands between listing and reading."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from edgevllm.common.errors import SuppliedFolderError
from edgevllm.sources import depfolder
from edgevllm.sources.depfolder import survey, take
from support.folderswap import SECRET, swap_on_first_copy, texts, tree


@pytest.mark.parametrize("absolute", [True, False], ids=["absolute-link", "relative-link"])
def test_a_folder_swapped_for_a_link_after_its_listing_is_refused_not_followed(
        tmp_path, monkeypatch, absolute):
    outside = tree(tmp_path / "outside", {"in.txt": SECRET})
    dep = tree(tmp_path / "dep", {"sub/in.txt": "inside\n", "z.txt": "z\n"})
    found = survey("cutlass", dep)
    # z.txt is copied after dep was listed (sub: a folder then), before sub is opened.
    swap_on_first_copy(monkeypatch, depfolder, dep / "sub",
                       str(outside) if absolute else "../outside")
    dest = tmp_path / "copy"
    with pytest.raises(SuppliedFolderError) as info:
        take(found, dest)
    line = str(info.value)
    assert "\n" not in line and info.value.exit_code == SuppliedFolderError.exit_code
    assert line == (f"--cmake-dep cutlass={dep}: sub: was a folder when listed and is a link "
                    "now; the folder changed while it was read (supply one nothing writes to)")
    assert SECRET not in texts(dest) and not (dest / "sub").exists()


def test_a_file_is_read_from_the_folder_that_was_listed(tmp_path, monkeypatch):
    """The folder holding the files is swapped for a link while its first file is copied: the
    next file still comes from the folder that was listed, never through the link."""
    tree(tmp_path / "outside", {"a.txt": SECRET, "b.txt": SECRET})
    dep = tree(tmp_path / "dep", {"sub/a.txt": "a\n", "sub/b.txt": "b\n"})
    found = survey("cutlass", dep)
    swap_on_first_copy(monkeypatch, depfolder, dep / "sub", str(tmp_path / "outside"))
    entries = take(found, tmp_path / "copy")
    assert sorted(e.path for e in entries) == ["sub/a.txt", "sub/b.txt"]
    assert (tmp_path / "copy" / "sub" / "a.txt").read_text() == "a\n"
    assert (tmp_path / "copy" / "sub" / "b.txt").read_text() == "b\n"
    assert SECRET not in texts(tmp_path / "copy")


def test_the_folder_swapped_after_the_preflight_is_refused(tmp_path):
    """survey, then the folder itself is put aside and a link to another takes its name, then
    take: one line, nothing of the other folder copied."""
    outside = tree(tmp_path / "outside", {"in.txt": SECRET})
    dep = tree(tmp_path / "dep", {"in.txt": "inside\n"})
    found = survey("cutlass", dep)
    dep.rename(tmp_path / "dep.old")
    os.symlink(outside, dep)
    with pytest.raises(SuppliedFolderError) as info:
        take(found, tmp_path / "copy")
    assert str(info.value) == (f"--cmake-dep cutlass={dep}: is not the folder the preflight read "
                               "(another was put in its place); supply one nothing writes to")
    assert not (tmp_path / "copy").exists() or SECRET not in texts(tmp_path / "copy")
