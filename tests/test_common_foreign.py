"""Names from others that become paths (common/foreign.py), and the eugr import that uses it: a
``run.sh`` line ``cp /abs/host/file …``, ``cp ../x …`` or a link in a mod folder never brings a
host file into the imported recipe, the user's mods or the image."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from edgevllm.common.errors import ManifestError
from edgevllm.common.foreign import inside, links_out
from edgevllm.common.paths import user_data_dir
from edgevllm.mods.eugr import import_eugr_mod, read_mod
from edgevllm.serve.recipe.importfolder import import_file
from support.properties import PROPERTY

TOKEN = b"hf_" + b"s" * 34  # what must never leave the host


def _leaky_repo(tmp_path: Path, link: bool) -> tuple[Path, Path]:
    secret = tmp_path / "host" / "token"
    secret.parent.mkdir()
    secret.write_bytes(TOKEN)
    repo = tmp_path / "eugr"
    mod = repo / "mods" / "leak"
    mod.mkdir(parents=True)
    (repo / "secret.txt").write_bytes(TOKEN)
    lines = [f"cp {secret} ${{WORKSPACE_DIR}}/tok.jinja",
             'cp "$(dirname "$0")/../../secret.txt" "${WORKSPACE_DIR}/s.jinja"',
             'cp ~/token "${WORKSPACE_DIR}/home.jinja"']
    if link:
        (mod / "link.jinja").symlink_to(secret)
        lines.append('cp "$(dirname "$0")/link.jinja" "${WORKSPACE_DIR}/link.jinja"')
    (mod / "run.sh").write_text("#!/bin/bash\nset -e\n" + "\n".join(lines) + "\n")
    (repo / "recipes").mkdir()
    recipe = repo / "recipes" / "leak.yaml"
    recipe.write_text(yaml.safe_dump({
        "recipe_version": "1", "name": "leak", "model": "org/m", "container": "vllm-node",
        "mods": ["mods/leak"], "defaults": {"port": 8000},
        "command": "vllm serve org/m --port {port} --chat-template tok.jinja "
                   "--a s.jinja --b home.jinja --c link.jinja"}))
    return recipe, mod


def _holds_token(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and TOKEN in p.read_bytes()]


@pytest.mark.parametrize("link", [False, True])
def test_run_sh_copies_of_host_files_are_never_carried(tmp_path, link):
    recipe, mod = _leaky_repo(tmp_path, link)
    assert read_mod("mods/leak", mod).copies == {}
    out = tmp_path / "out"
    out.mkdir()
    if link:  # the mod runs at build time: a folder with a link out is refused whole
        with pytest.raises(ManifestError, match="a link out of the mod folder"):
            import_file(recipe, out / "leak.yaml")
    else:
        result = import_file(recipe, out / "leak.yaml")
        assert result.path is not None and result.path.is_file()
        assert len(result.warnings) == 4  # each argument's file stays behind
    assert _holds_token(out) == []
    assert not user_data_dir("mods").exists() or _holds_token(user_data_dir("mods")) == []


def test_a_mod_folder_with_a_link_out_is_refused_and_nothing_is_written(tmp_path):
    _, mod = _leaky_repo(tmp_path, link=True)
    dest = tmp_path / "user-mods"
    with pytest.raises(ManifestError, match="link.jinja: a link out of the mod folder") as info:
        import_eugr_mod(mod, dest, ["spark"])
    assert "\n" not in str(info.value) and _holds_token(dest) == [] if dest.exists() else True


def test_a_mod_without_links_imports_and_carries_no_host_file(tmp_path):
    _, mod = _leaky_repo(tmp_path, link=False)
    dest = tmp_path / "user-mods"
    final = import_eugr_mod(mod, dest, ["spark"])
    assert final.is_dir() and _holds_token(dest) == []


def test_a_link_inside_the_folder_stays_a_link_and_is_allowed(tmp_path):
    mod = tmp_path / "mod"
    mod.mkdir()
    (mod / "run.sh").write_text('cp "$(dirname "$0")/t.jinja" "${WORKSPACE_DIR}/t.jinja"\n')
    (mod / "real.jinja").write_text("x")
    (mod / "t.jinja").symlink_to("real.jinja")
    assert read_mod("m", mod).copies == {"t.jinja": mod / "t.jinja"}
    final = import_eugr_mod(mod, tmp_path / "dest", ["spark"])
    assert (final / "t.jinja").is_symlink() and os.readlink(final / "t.jinja") == "real.jinja"


@pytest.mark.parametrize("name", ["/etc/passwd", "../x", "a/../../x", "~/x", "", "a\0b",
                                  "link/file", "dangling"])
def test_names_that_leave_their_folder(tmp_path, name):
    (tmp_path / "outside").mkdir()
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "link").symlink_to(tmp_path / "outside")
    (folder / "dangling").symlink_to(tmp_path / "nothing")
    assert inside(folder, name) is None
    assert links_out(folder) == [folder / "dangling", folder / "link"]


@PROPERTY
@given(st.lists(st.sampled_from(["a", "..", ".", "", "/", "~", "b.txt", "\\", "link"]),
                min_size=1, max_size=6).map("/".join))
def test_any_name_is_inside_or_refused(tmp_path_factory, name):
    folder = tmp_path_factory.mktemp("w") / "f"
    folder.mkdir()
    (folder / "link").symlink_to(folder.parent)
    found = inside(folder, name)
    if found is not None:
        real, root = found.resolve(), folder.resolve()
        assert real == root or root in real.parents
