"""Folders others gave, copied through directory descriptors (``common/fdtree.py``), with real
files, links and a FIFO: what is copied, what is refused in one line, and that a folder swapped
for a link between its listing and its reading is refused, not followed (the swap is made
deterministic by a hook on the copy of the first file, which then runs as it is). The mods'
copies go through it: a mod staged for a build and an eugr mod imported."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from edgevllm.common import fdtree
from edgevllm.common.errors import ManifestError
from edgevllm.common.fdtree import copy_tree
from edgevllm.mods.eugr import import_eugr_mod
from support.folderswap import SECRET, swap_on_first_copy, texts, tree


def test_files_folders_and_inside_links_are_copied_names_skipped(tmp_path):
    src = tree(tmp_path / "src", {"a.sh": "#!/bin/sh\n", "d/b.txt": "b\n",
                                  "__pycache__/x.pyc": "x"})
    (src / "a.sh").chmod(0o755)
    os.symlink("d/b.txt", src / "link")
    assert copy_tree(src, tmp_path / "out", what="mod m", error=ManifestError,
                     skip=["__pycache__"]) == 2
    out = tmp_path / "out"
    assert (out / "d" / "b.txt").read_text() == "b\n" and os.access(out / "a.sh", os.X_OK)
    assert os.readlink(out / "link") == "d/b.txt" and not (out / "__pycache__").exists()


@pytest.mark.parametrize("target", ["/etc/hostname", "../outside", "d/../../outside"])
def test_a_link_that_may_lead_out_is_one_line(tmp_path, target):
    src = tree(tmp_path / "src", {"d/b.txt": "b\n"})
    os.symlink(target, src / "evil")
    with pytest.raises(ManifestError) as info:
        copy_tree(src, tmp_path / "out", what="mod m", error=ManifestError)
    assert str(info.value) == (f"mod m: evil: a link to {target!r}, which may lead out of the "
                               "folder; only relative links without '..' are copied (put the "
                               "file itself there)")


def test_a_pipe_is_one_line_and_never_waited_on(tmp_path):
    src = tree(tmp_path / "src", {"a.txt": "a\n"})
    os.mkfifo(src / "pipe")
    with pytest.raises(ManifestError, match="pipe is not a file, folder or link"):
        copy_tree(src, tmp_path / "out", what="mod m", error=ManifestError)


def test_a_folder_swapped_for_a_link_mid_copy_is_refused_not_followed(tmp_path, monkeypatch):
    outside = tree(tmp_path / "outside", {"in.txt": SECRET})
    src = tree(tmp_path / "src", {"a.txt": "a\n", "sub/in.txt": "inside\n"})
    # a.txt is copied after src was listed, before sub is opened
    swap_on_first_copy(monkeypatch, fdtree, src / "sub", outside)
    with pytest.raises(ManifestError) as info:
        copy_tree(src, tmp_path / "out", what="mod m", error=ManifestError)
    assert str(info.value) == ("mod m: sub: was a folder when listed and is a link now; the "
                               "folder changed while it was read (supply one nothing writes to)")
    assert SECRET not in texts(tmp_path / "out")


def test_an_eugr_mod_is_imported_through_the_descriptor_copy(tmp_path):
    mod = tree(tmp_path / "mod-x", {"run.sh": "echo hi\n", "data/f.txt": "f\n"})
    os.mkfifo(mod / "data" / "pipe")
    with pytest.raises(ManifestError, match="data/pipe is not a file, folder or link"):
        import_eugr_mod(mod, tmp_path / "mods", ["spark"])
    (mod / "data" / "pipe").unlink()
    final = import_eugr_mod(mod, tmp_path / "mods", ["spark"])
    assert (final / "data" / "f.txt").read_text() == "f\n" and (final / "run.sh").is_file()
