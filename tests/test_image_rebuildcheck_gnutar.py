"""image/rebuildcheck.py on layers the real GNU ``tar`` writes from real folders (as a build
step's layer is a tar of files on disk): the same tree tarred twice agrees, and each change a
rebuild can bring (a later mtime, a mode, an owner, a link's target, a file's kind, a file more)
is named at its path; a cut layer is one line. The tarfile-written cases:
tests/test_image_rebuildcheck.py."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from edgevllm.common.errors import IntegrityError
from edgevllm.image.rebuildcheck import first_member_difference, layer_members

EPOCH = 1_700_000_000


def gnu_tar(folder: Path, *flags: str) -> bytes:
    if shutil.which("tar") is None:
        pytest.fail("GNU tar is missing: install tar")
    return subprocess.run(["tar", "-C", str(folder), "--sort=name", "--numeric-owner",
                           "--owner=0", "--group=0", *flags, "-cf", "-", "."],
                          capture_output=True, check=True).stdout


def tree(root: Path) -> Path:
    (root / "opt/app").mkdir(parents=True)
    (root / "opt/app/main.py").write_text("print('hi')\n")
    (root / "opt/app/lib.so").write_bytes(os.urandom(4096))
    os.symlink("main.py", root / "opt/app/entry")
    os.link(root / "opt/app/main.py", root / "opt/app/main-copy.py")
    for path in [*root.rglob("*"), root]:
        os.utime(path, (EPOCH, EPOCH), follow_symlinks=False)
    return root


def members(folder: Path, *flags: str) -> list:
    return layer_members(io.BytesIO(gnu_tar(folder, *flags)), "layer 3")


def test_the_same_tree_tarred_twice_agrees(tmp_path):
    folder = tree(tmp_path / "t")
    first, second = members(folder), members(folder)
    assert first_member_difference(first, second) is None
    kinds = {m.path.removeprefix("./"): m.kind for m in first}
    assert kinds["opt/app/entry"] == "symlink" and kinds["opt/app/lib.so"] == "file"
    assert {kinds["opt/app/main.py"], kinds["opt/app/main-copy.py"]} == {"file", "hardlink"}


def test_a_file_touched_later_is_named_with_both_times(tmp_path):
    folder = tree(tmp_path / "t")
    first = members(folder)
    os.utime(folder / "opt/app/lib.so", (EPOCH + 60, EPOCH + 60))
    said = first_member_difference(first, members(folder))
    assert said == ("./opt/app/lib.so: mtime 2023-11-14T22:13:20Z vs 2023-11-14T22:14:20Z")


def test_a_mode_and_an_owner_are_named(tmp_path):
    folder = tree(tmp_path / "t")
    first = members(folder)
    os.chmod(folder / "opt/app/lib.so", 0o755)
    assert first_member_difference(first, members(folder)) == \
        "./opt/app/lib.so: mode 644 vs 755"
    os.chmod(folder / "opt/app/lib.so", 0o644)
    owned = layer_members(io.BytesIO(gnu_tar(folder, "--owner=1000", "--group=1000")))
    said = first_member_difference(first, owned)
    assert said == ".: owner 0:0 vs 1000:1000"


def test_content_of_the_same_size_is_told_from_its_bytes(tmp_path):
    folder = tree(tmp_path / "t")
    first = members(folder)
    (folder / "opt/app/lib.so").write_bytes(os.urandom(4096))
    os.utime(folder / "opt/app/lib.so", (EPOCH, EPOCH))
    assert first_member_difference(first, members(folder)) == \
        "./opt/app/lib.so: content (4096 vs 4096 bytes)"


def test_a_link_pointing_elsewhere_and_a_link_become_a_file_are_named(tmp_path):
    folder = tree(tmp_path / "t")
    first = members(folder)
    (folder / "opt/app/entry").unlink()
    os.symlink("lib.so", folder / "opt/app/entry")
    os.utime(folder / "opt/app/entry", (EPOCH, EPOCH), follow_symlinks=False)
    os.utime(folder / "opt/app", (EPOCH, EPOCH))
    assert first_member_difference(first, members(folder)) == \
        "./opt/app/entry: link target main.py vs lib.so"
    (folder / "opt/app/entry").unlink()
    (folder / "opt/app/entry").write_text("main.py")
    os.utime(folder / "opt/app/entry", (EPOCH, EPOCH))
    os.utime(folder / "opt/app", (EPOCH, EPOCH))
    said = first_member_difference(first, members(folder))
    assert said is not None and said.startswith("./opt/app/entry: kind symlink vs file")


def test_a_file_more_in_the_second_build_is_named(tmp_path):
    folder = tree(tmp_path / "t")
    first = members(folder)
    (folder / "opt/app/__pycache__").mkdir()
    (folder / "opt/app/__pycache__/main.pyc").write_bytes(b"\0" * 16)
    for path in (folder / "opt/app/__pycache__", folder / "opt/app/__pycache__/main.pyc",
                 folder / "opt/app"):
        os.utime(path, (EPOCH, EPOCH))
    assert first_member_difference(first, members(folder)) == \
        "./opt/app/__pycache__: only in the second build"
    assert first_member_difference(members(folder), first) == \
        "./opt/app/__pycache__: only in the first build"


def test_a_fifo_in_a_layer_is_a_member_of_its_own_kind(tmp_path):
    folder = tree(tmp_path / "t")
    os.mkfifo(folder / "opt/app/pipe")
    os.utime(folder / "opt/app/pipe", (EPOCH, EPOCH))
    kinds = {m.path: m.kind for m in members(folder)}
    assert kinds["./opt/app/pipe"] == "fifo"


def test_a_long_path_reads_the_same_in_gnu_and_posix_formats(tmp_path):
    folder = tree(tmp_path / "t")
    deep = folder / "opt" / ("d" * 80) / ("e" * 80)
    deep.mkdir(parents=True)
    (deep / "file.txt").write_text("deep\n")
    for path in (deep / "file.txt", deep, deep.parent, folder / "opt"):
        os.utime(path, (EPOCH, EPOCH))
    gnu = {m.path: m.digest for m in members(folder, "--format=gnu")}
    posix = {m.path: m.digest for m in members(folder, "--format=posix", "--pax-option",
                                               "delete=atime,delete=ctime")}
    assert gnu == posix
    assert any(len(path) > 160 for path in gnu)


@pytest.mark.parametrize("where", ["first header", "a file's bytes", "not a tar"])
def test_a_layer_cut_short_or_no_tar_is_one_line_naming_it(tmp_path, where):
    """Both were a tarfile.ReadError traceback ("truncated header", "unexpected end of
    data"). (A cut inside a later header ends the archive there: tarfile's own rule.)"""
    data = gnu_tar(tree(tmp_path / "t"))
    cut = {"first header": data[:100], "a file's bytes": data[:data.index(b"print('hi')") + 4],
           "not a tar": b"\x89PNG\r\n" + bytes(600)}[where]
    with pytest.raises(IntegrityError) as raised:
        layer_members(io.BytesIO(cut), "layer 3 of vllm:x")
    assert str(raised.value).startswith("layer 3 of vllm:x: ")
    assert "\n" not in str(raised.value)
