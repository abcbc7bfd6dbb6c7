"""Output folders: a folder edgevllm did not write is refused unless empty (or --force), and
nothing edgevllm did not write is ever deleted, through the real CLI as well."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgevllm.common import labels
from edgevllm.common.errors import OutputFolderError
from edgevllm.common.fsutil import OUTPUT_MARKER, StagedFile, output_dir, read_marker
from support.properties import PROPERTY, bounded


def write(folder: Path, names: list[str], force: bool = False) -> None:
    with output_dir(folder, force) as tmp:
        for name in names:
            (tmp / name).write_text(name)


def test_a_new_or_empty_folder_is_written_and_marked(tmp_path):
    for folder in (tmp_path / "new", tmp_path / "empty"):
        if folder.name == "empty":
            folder.mkdir()
        write(folder, ["a", "b"])
        assert sorted(p.name for p in folder.iterdir()) == sorted(["a", "b", OUTPUT_MARKER])
        assert read_marker(folder) == ("output", {"a", "b"})


def test_a_folder_of_the_users_is_refused_and_left_alone(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "thesis.tex").write_text("years of work")
    with pytest.raises(OutputFolderError, match=r"thesis.tex.*--force") as info:
        write(folder, ["a"])
    assert "\n" not in str(info.value)
    assert sorted(p.name for p in folder.iterdir()) == ["thesis.tex"]
    assert not list(tmp_path.glob(".mine.tmp-*"))  # the staging folder went too


def test_force_writes_beside_the_users_files_and_keeps_them(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "thesis.tex").write_text("years of work")
    write(folder, ["a", "b"], force=True)
    write(folder, ["a"])  # a rewrite without --force: the folder is marked now
    assert (folder / "thesis.tex").read_text() == "years of work"
    assert sorted(p.name for p in folder.iterdir()) == sorted(["a", "thesis.tex", OUTPUT_MARKER])


def test_a_rewrite_replaces_only_what_edgevllm_wrote(tmp_path):
    folder = tmp_path / "out"
    write(folder, ["old", "same"])
    (folder / "notes.txt").write_text("mine")
    write(folder, ["same", "new"])
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["same", "new", "notes.txt", OUTPUT_MARKER])
    assert (folder / "notes.txt").read_text() == "mine"


def test_a_user_file_where_edgevllm_would_write_is_not_replaced(tmp_path):
    folder = tmp_path / "out"
    write(folder, ["a"])
    (folder / "b").write_text("mine")
    with pytest.raises(OutputFolderError, match="did not write it"):
        write(folder, ["a", "b"])
    assert (folder / "b").read_text() == "mine"


def test_a_file_in_place_of_the_folder_is_refused(tmp_path):
    path = tmp_path / "file"
    path.write_text("x")
    with pytest.raises(OutputFolderError, match="not a folder"):
        write(path, ["a"])
    assert path.read_text() == "x"


@pytest.mark.parametrize("task", [["render", "--target", "thor"],
                                  ["sources", "--target", "thor", "--vllm-ref", "v0"]])
def test_the_cli_refuses_a_users_folder_with_one_line_before_any_work(task, tmp_path, cli):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "keep.txt").write_text("mine")
    code, _, err = cli(*task, "--out", str(folder))
    assert code == 2, err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert "did not write" in err and "--force" in err
    assert sorted(p.name for p in folder.iterdir()) == ["keep.txt"]


def test_inv_render_twice_and_with_force(tmp_path, cli):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "keep.txt").write_text("mine")
    code, _, err = cli("render", "--target", "thor", "--out", str(folder), "--force")
    assert code == 0, err
    code, _, err = cli("render", "--target", "thor", "--out", str(folder))
    assert code == 0, err
    assert (folder / "keep.txt").read_text() == "mine" and (folder / "Dockerfile").is_file()


def test_atomic_dir_replaces_what_it_wrote_and_keeps_a_folder_it_has_no_record_of(tmp_path,
                                                                                  capsys):
    """``inv build --out`` subfolders (src/<name>, context/edgevllm-mods/<mod>, wheels/<key>):
    a folder of the user's there is moved aside with one warning, never deleted."""
    from edgevllm.common.fsutil import atomic_dir

    final = tmp_path / "src" / "vllm"
    final.mkdir(parents=True)
    (final / "my-notes.txt").write_text("years of work")
    with atomic_dir(final) as tmp:
        (tmp / "setup.py").write_text("v1")
    kept = [p for p in final.parent.iterdir() if p.name.startswith("vllm.kept-")]
    assert len(kept) == 1 and (kept[0] / "my-notes.txt").read_text() == "years of work"
    assert "vllm: edgevllm has no record of writing it; kept it as vllm.kept-" in \
        capsys.readouterr().err
    with atomic_dir(final) as tmp:  # recorded now: replaced whole, nothing moved aside
        (tmp / "setup.py").write_text("v2")
    assert sorted(p.name for p in final.parent.iterdir()) == sorted(
        [kept[0].name, "vllm", OUTPUT_MARKER])
    assert [p.name for p in final.iterdir()] == ["setup.py"]
    assert read_marker(final.parent) == ("build", {"vllm"})


def test_atomic_dir_leaves_the_old_folder_when_the_block_fails(tmp_path):
    from edgevllm.common.fsutil import atomic_dir

    final = tmp_path / "wheels"
    with atomic_dir(final) as tmp:
        (tmp / "a.whl").write_text("a")
    with pytest.raises(RuntimeError), atomic_dir(final) as tmp:
        (tmp / "b.whl").write_text("b")
        raise RuntimeError("compile failed")
    assert [p.name for p in final.iterdir()] == ["a.whl"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["wheels", OUTPUT_MARKER])


def test_a_staged_file_keeps_its_name_only_once_committed(tmp_path):
    """Verify-then-commit: the bytes are checked under the temporary name; an abort (or a
    failed check) leaves neither the final name nor a temporary."""
    final = tmp_path / "sub" / "wheel.whl"
    with StagedFile(final) as staged:
        handle = staged.open("wb")
        handle.write(b"good")
        handle.flush()
        assert not final.exists() and staged.tmp.read_bytes() == b"good"
        staged.commit()
    assert final.read_bytes() == b"good"
    with pytest.raises(ValueError), StagedFile(final) as staged:
        staged.open("wb").write(b"bad")
        raise ValueError("sha256 differs")
    with StagedFile(tmp_path / "folder") as folder:
        folder.tmp.mkdir()
        (folder.tmp / "HEAD").write_text("x")
        folder.abort()
    assert final.read_bytes() == b"good"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["sub", "wheel.whl"]


# The in-image scripts run without edgevllm, so they rename with the standard library themselves.
RENAMERS = {"os.replace", "os.rename", "shutil.move", "os.renames"}


def renames_into_place(tree: ast.AST) -> list[str]:
    """``os.replace``/``os.rename``/``shutil.move``, and a path's ``rename``/``replace`` (one
    positional argument: ``str.replace`` takes two, ``dataclasses.replace`` keywords)."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = ast.unparse(node.func)
        if func in RENAMERS or isinstance(node.func, ast.Attribute) and (
                node.func.attr in ("rename", "link_to") or node.func.attr == "replace"
                and len(node.args) == 1 and not node.keywords):
            found.append(f"{func} (line {node.lineno})")
    return found


def test_only_fsutil_renames_files_into_place():
    package = Path(labels.__file__).resolve().parents[1]
    exempt = {"common/fsutil.py", *labels.IN_IMAGE_SCRIPTS}
    found = {str(p.relative_to(package)): renames_into_place(ast.parse(p.read_text()))
             for p in package.rglob("*.py") if str(p.relative_to(package)) not in exempt}
    found = {name: calls for name, calls in found.items() if calls}
    assert not found, f"write with common.fsutil (StagedFile, move_into_place): {found}"
    stray = "import os\ndef f(tmp, final):\n    os.replace(tmp, final)\n    tmp.rename(final)\n" \
            "    Path(tmp).replace(final)\n    'a'.replace('b', 'c')\n"
    assert len(renames_into_place(ast.parse(stray))) == 3


# --- a marker is never trusted for a path --------------------------------------------------------
def _planted(tmp_path: Path, lines: list[str]) -> tuple[Path, Path]:
    """An unpacked ``out/`` holding a marker of someone else's, and a victim folder beside it."""
    victim = tmp_path / "victim"
    victim.mkdir(exist_ok=True)
    (victim / "precious").write_text("years of work")
    out = tmp_path / "work" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / OUTPUT_MARKER).write_text("\n".join(lines) + "\n")
    return out, victim


MARKER_LINES = ["../../victim", str(Path("/tmp") / "victim-abs"), "..", ".", "../victim",
                "a/../../victim", "Dockerfile"]


@pytest.mark.parametrize("header", ["", "# edgevllm-output 2 kind=render folder=1:2",
                                    "# edgevllm-output 2 kind=output folder={identity}"])
@pytest.mark.parametrize("force", [False, True])
def test_a_planted_marker_never_deletes_outside_the_output(tmp_path, header, force):
    out, victim = _planted(tmp_path, [])
    identity = f"{out.stat().st_dev}:{out.stat().st_ino}"
    lines = [header.format(identity=identity)] * bool(header) + MARKER_LINES
    (out / OUTPUT_MARKER).write_text("\n".join(lines) + "\n")
    (tmp_path / "work" / "sibling").mkdir()
    try:
        write(out, ["Dockerfile"], force=force)
    except OutputFolderError as exc:
        assert "\n" not in str(exc)
    assert (victim / "precious").read_text() == "years of work"
    assert (tmp_path / "work" / "sibling").is_dir() and (tmp_path / "work").is_dir()


def test_a_marker_copied_from_another_folder_is_no_record(tmp_path):
    first = tmp_path / "first"
    write(first, ["a"])
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "a").write_text("the user's now")
    (copy / OUTPUT_MARKER).write_bytes((first / OUTPUT_MARKER).read_bytes())
    assert read_marker(copy) is None
    with pytest.raises(OutputFolderError, match="did not write"):
        write(copy, ["a"])
    assert (copy / "a").read_text() == "the user's now"


def test_another_commands_output_is_refused_with_one_line(tmp_path):
    out = tmp_path / "out"
    with output_dir(out, kind="sources") as tmp:
        (tmp / "vllm").mkdir()
    with pytest.raises(OutputFolderError, match="holds what inv sources wrote; inv render") as info:
        with output_dir(out, kind="render") as tmp:
            (tmp / "Dockerfile").write_text("FROM x")
    assert "\n" not in str(info.value) and (out / "vllm").is_dir()
    with output_dir(out, force=True, kind="render") as tmp:  # --force: beside it, none removed
        (tmp / "Dockerfile").write_text("FROM x")
    assert (out / "vllm").is_dir() and (out / "Dockerfile").is_file()


@PROPERTY
@given(st.lists(st.text(alphabet=st.sampled_from("./\\a-~\n\x00 "), max_size=12)
                | st.sampled_from(MARKER_LINES).map(lambda x: [x]), max_size=8).map(
                    lambda groups: [line for group in groups for line in
                                    (group if isinstance(group, list) else [group])]),
       st.booleans(), st.booleans())
def test_any_marker_lines_remove_nothing_outside(tmp_path_factory, lines, own_header, force):
    tmp_path = tmp_path_factory.mktemp("m")
    out, victim = _planted(tmp_path, [])
    header = [f"# edgevllm-output 2 kind=output folder={out.stat().st_dev}:{out.stat().st_ino}"]
    (out / OUTPUT_MARKER).write_text("\n".join(header * own_header + lines) + "\n")
    found = bounded(write, out, ["Dockerfile"], force)
    assert found is None or isinstance(found, OutputFolderError)
    assert (victim / "precious").read_text() == "years of work"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["victim", "work"]
    assert [p.name for p in (tmp_path / "work").iterdir()] == ["out"]


def test_inv_render_refuses_what_inv_sources_wrote(tmp_path, cli):
    out = tmp_path / "out"
    with output_dir(out, kind="sources") as tmp:  # what inv sources --out writes
        (tmp / "vllm").mkdir()
        (tmp / "edgevllm.lock.json").write_text("{}")
    code, _, err = cli("render", "--target", "thor", "--out", str(out))
    assert code == 2 and err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert "holds what inv sources wrote" in err
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [OUTPUT_MARKER, "edgevllm.lock.json", "vllm"])
