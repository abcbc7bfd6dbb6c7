"""The gate a supplied dependency folder passes (``--cmake-dep NAME=FOLDER``,
sources/depfolder.py): what it takes, what it refuses in one line, the caps it names, and that
the user's folder is never changed and its ``.git`` never read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from edgevllm.common.errors import ConfigError, MissingInputError, SuppliedFolderError
from edgevllm.sources.depfolder import BYTES_VAR, FILES_VAR, Caps, survey, take
from edgevllm.sources.gittree import tree_hash


def folder(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def snapshot(root: Path) -> dict[str, tuple]:
    return {str(p.relative_to(root)): (p.lstat().st_mode, p.lstat().st_size,
                                       p.lstat().st_mtime_ns)
            for p in sorted(root.rglob("*"))}


def test_a_folder_is_copied_and_hashed_and_left_as_it_was(tmp_path):
    dep = folder(tmp_path / "dep", {"include/x.h": "// x\n", "README": "r\n"})
    os.symlink("include/x.h", dep / "x-link.h")
    before = snapshot(dep)
    found = survey("cutlass", dep)
    assert (found.files, found.size) == (3, len("// x\n") + len("r\n"))
    entries = take(found, tmp_path / "copy")
    assert {e.path for e in entries} == {"include/x.h", "README", "x-link.h"}
    assert (tmp_path / "copy" / "include" / "x.h").read_text() == "// x\n"
    assert snapshot(dep) == before
    again = take(survey("cutlass", dep), tmp_path / "copy2")
    assert tree_hash(again) == tree_hash(entries)


def test_git_is_never_read_a_dot_git_is_skipped(tmp_path):
    """A repository's .git (config, hooks: code) is not copied, not hashed, not read; a
    submodule's .git file neither."""
    dep = folder(tmp_path / "dep", {"src/a.c": "a\n", ".git/config": "[core]\n\tfsmonitor = "
                                    "touch owned\n", ".git/hooks/post-checkout": "#!/bin/sh\n",
                                    "sub/.git": "gitdir: ../.git/modules/sub\n", "sub/b": "b\n"})
    entries = take(survey("dep", dep), tmp_path / "copy")
    assert sorted(e.path for e in entries) == ["src/a.c", "sub/b"]
    assert not (tmp_path / "copy" / ".git").exists()
    assert not (tmp_path / "copy" / "sub" / ".git").exists()


def test_a_missing_folder_is_an_input_error_and_a_file_is_not_a_folder(tmp_path):
    with pytest.raises(MissingInputError, match=r"--cmake-dep cutlass=.*nothere: no such folder"):
        survey("cutlass", tmp_path / "nothere")
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(SuppliedFolderError, match="not a folder"):
        survey("cutlass", tmp_path / "a-file")


@pytest.mark.parametrize("target,words", [
    ("/etc/passwd", "a link to the absolute path '/etc/passwd'"),
    ("../../outside", "leads out of its folder through a link"),
])
def test_a_link_absolute_or_out_is_refused_in_one_line(tmp_path, target, words):
    dep = folder(tmp_path / "dep", {"inc/a.h": "a\n"})
    os.symlink(target, dep / "inc" / "evil")
    with pytest.raises(SuppliedFolderError) as info:
        survey("dep", dep)
    assert words in str(info.value) and "inc/evil" in str(info.value)
    assert "\n" not in str(info.value)


def test_a_link_through_a_folder_link_stays_inside_or_is_refused(tmp_path):
    outside = folder(tmp_path / "outside", {"secret": "s\n"})
    dep = folder(tmp_path / "dep", {"a": "a\n"})
    os.symlink(str(outside), dep / "out-dir")   # absolute: refused
    with pytest.raises(SuppliedFolderError, match="absolute path"):
        survey("dep", dep)
    os.unlink(dep / "out-dir")
    os.symlink("../outside", dep / "out-dir")   # relative, but out
    with pytest.raises(SuppliedFolderError, match="leads out"):
        survey("dep", dep)


def test_a_pipe_is_refused_and_so_is_one_swapped_in_after_preflight(tmp_path):
    dep = folder(tmp_path / "dep", {"a": "a\n", "b": "b\n"})
    found = survey("dep", dep)
    os.unlink(dep / "b")
    os.mkfifo(dep / "b")
    with pytest.raises(SuppliedFolderError, match=r"b is not a file, folder or link"):
        take(found, tmp_path / "copy")


@pytest.mark.parametrize("name", ["bad\x1bname", "back\\slash"])
def test_a_name_outside_the_rules_is_refused(tmp_path, name):
    dep = folder(tmp_path / "dep", {"ok": "ok\n"})
    (dep / name).write_text("x")
    with pytest.raises(SuppliedFolderError, match="is not a file name") as info:
        survey("dep", dep)
    assert "\x1b" not in str(info.value)


def test_a_name_that_is_not_utf8_is_refused(tmp_path):
    dep = folder(tmp_path / "dep", {"ok": "ok\n"})
    with open(os.path.join(os.fsencode(dep), b"\xff\xfe.h"), "w") as handle:
        handle.write("x")
    with pytest.raises(SuppliedFolderError, match="not UTF-8"):
        survey("dep", dep)


def test_the_caps_are_named_when_passed(tmp_path, monkeypatch):
    dep = folder(tmp_path / "dep", {f"f{i}": "0123456789" for i in range(5)})
    with pytest.raises(SuppliedFolderError) as info:
        survey("dep", dep, Caps(files=4))
    assert f"more than 4 files, the cap of a dependency folder ({FILES_VAR})" in str(info.value)
    with pytest.raises(SuppliedFolderError, match=rf"more than 40 bytes in all.*{BYTES_VAR}"):
        survey("dep", dep, Caps(bytes=40))
    monkeypatch.setenv(FILES_VAR, "3")
    with pytest.raises(SuppliedFolderError, match="more than 3 files"):
        survey("dep", dep)
    monkeypatch.setenv(FILES_VAR, "lots")
    with pytest.raises(ConfigError, match=f"{FILES_VAR} 'lots': expected a whole number"):
        survey("dep", dep)
    monkeypatch.setenv(FILES_VAR, "5")
    assert survey("dep", dep).files == 5


def test_a_folder_too_deep_is_refused(tmp_path):
    deep = tmp_path / "dep" / "/".join(["d"] * 70)
    deep.mkdir(parents=True)
    (deep / "f").write_text("x")
    with pytest.raises(SuppliedFolderError, match="more than 64 folders deep"):
        survey("dep", tmp_path / "dep")
