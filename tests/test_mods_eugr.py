"""eugr mods as build-time mods: the folder becomes an edgevllm mod (its files, its downloads
recorded, one script step; the build fetches each download from a loopback stand-in of the web and
pins it by sha256) and the real applier runs its run.sh against a Python environment with
WORKSPACE_DIR, PYTHON_ROOT and the environment's Python; failures name the mod and its last lines.
The applier runs here on this interpreter and a folder standing in for site-packages (the image
build runs the same applier in the image: tests/e2e/test_applier_in_container.py)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
import yaml

from edgevllm.common.errors import (
    DownloadChangedError,
    DownloadError,
    InsecureURLError,
    ManifestError,
    ModFailedError,
)
from edgevllm.common.paths import user_data_dir
from edgevllm.mods import downloads
from edgevllm.mods.catalog import apply_to_environment, stage_mods
from edgevllm.mods.eugr import import_eugr_mod, mod_name
from edgevllm.mods.manifest import ScriptStep, load_mod
from support import web_standin

MODS = Path(__file__).parent / "fixtures" / "eugr-recipes" / "mods"
PLUGIN = web_standin.PLUGIN


def imported(folder: Path, workspace: Path) -> str:
    """Import into the user's mods (where builds find mods) with the workspace in tmp."""
    path = import_eugr_mod(folder, user_data_dir("mods"), ["spark"])
    manifest = yaml.safe_load((path / "manifest.yaml").read_text())
    manifest["steps"][0]["workspace"] = str(workspace)
    (path / "manifest.yaml").write_text(yaml.safe_dump(manifest))
    return path.name


@pytest.fixture
def web():
    files = {web_standin.PLUGIN_PATH: PLUGIN}
    with web_standin.serve(files) as base:
        yield base, files


def apply(name: str, tmp_path: Path) -> dict:
    site = tmp_path / "site-packages"
    site.mkdir(exist_ok=True)
    record, _ = apply_to_environment("spark", [name], [site], python=sys.executable)
    return record


def test_renamed_copy_lands_in_the_workspace(tmp_path):
    name = imported(MODS / "fix-chat-template", tmp_path / "ws")
    assert name == "eugr-fix-chat-template" == mod_name(MODS / "fix-chat-template")
    record = apply(name, tmp_path)
    assert record["mods"][0]["outcome"] == "applied"
    assert record["mods"][0]["detail"] == "1 step(s) changed"
    assert (tmp_path / "ws" / "fixed_template.jinja").read_bytes() == \
        (MODS / "fix-chat-template" / "chat_template.jinja").read_bytes()


def test_download_is_recorded_then_fetched_by_the_build_and_pinned(tmp_path, web):
    base, _ = web
    folder = web_standin.plugin_mod(MODS / "plugin-download", tmp_path / "eugr" / "plugin", base)
    name = imported(folder, tmp_path / "ws")
    mod = load_mod(user_data_dir("mods") / name)
    step = mod.manifest.steps[0]
    url = base + web_standin.PLUGIN_PATH
    assert isinstance(step, ScriptStep) and step.downloads[0].url == url
    assert step.downloads[0].sha256 is None and not (mod.folder / "downloads").exists()
    apply(name, tmp_path)  # staged: fetched on the host, served to run.sh from the pinned file
    assert (tmp_path / "ws" / "plugin_parser.py").read_bytes() == PLUGIN
    staged = stage_mods([name], "spark", tmp_path / "stage")
    assert staged.versions[0]["downloads"] == {url: hashlib.sha256(PLUGIN).hexdigest()}
    plan = json.loads((tmp_path / "stage" / "plan.json").read_text())
    assert plan["mods"][0]["steps"][0]["downloads"][0]["sha256"] == \
        hashlib.sha256(PLUGIN).hexdigest()


def test_a_lock_rebuild_refuses_a_changed_download(tmp_path, web):
    base, files = web
    folder = web_standin.plugin_mod(MODS / "plugin-download", tmp_path / "eugr" / "plugin", base)
    name = imported(folder, tmp_path / "ws")
    pins = stage_mods([name], "spark", tmp_path / "first").versions[0]["downloads"]
    files[web_standin.PLUGIN_PATH] = b"# the same URL, other bytes\n"
    with pytest.raises(DownloadChangedError) as info:
        stage_mods([name], "spark", tmp_path / "again", {name: pins})
    assert str(info.value).startswith(f"mod {name}: the download downloads/plugin_parser.py "
                                      f"from {base}/parsers/plugin_parser.py has sha256 ")
    assert "the lock pins" in str(info.value) and "\n" not in str(info.value)
    assert DownloadChangedError.exit_code == 5
    # without a lock, the build takes the new bytes and pins them
    again = stage_mods([name], "spark", tmp_path / "unlocked").versions[0]["downloads"]
    assert again != pins


def test_bad_downloads_are_one_line_each(tmp_path, web, monkeypatch):
    base, _ = web
    name = imported(MODS / "plugin-download", tmp_path / "ws")  # http://example.org: not https
    with pytest.raises(InsecureURLError, match=r"^mod eugr-plugin-download: the download "
                       r"downloads/plugin_parser.py: http://example.org/parsers/plugin_parser.py "
                       r"is not an https URL; .*change the URL to https$"):
        stage_mods([name], "spark", tmp_path / "s1")
    assert InsecureURLError.exit_code == 2
    # the import of that mod fetched nothing: it worked offline
    assert not (user_data_dir("mods") / name / "downloads").exists()
    folder = web_standin.plugin_mod(MODS / "plugin-download", tmp_path / "eugr" / "plugin", base)
    served = imported(folder, tmp_path / "ws")
    monkeypatch.setattr(downloads, "MAX_DOWNLOAD", len(PLUGIN) - 1)
    with pytest.raises(DownloadError, match=f"is over the {len(PLUGIN) - 1} bytes a download"):
        stage_mods([served], "spark", tmp_path / "s2")
    monkeypatch.undo()
    gone = web_standin.plugin_mod(MODS / "plugin-download", tmp_path / "eugr" / "gone",
                                  base + "/nothing")
    with pytest.raises(DownloadError, match="answered HTTP 404; check the URL"):
        stage_mods([imported(gone, tmp_path / "ws")], "spark", tmp_path / "s3")
    assert DownloadError.exit_code == 5
    assert not list((tmp_path / "s2").rglob("plugin_parser.py"))


def test_script_sees_workspace_python_root_and_the_python(tmp_path):
    folder = tmp_path / "eugr" / "env-probe"
    folder.mkdir(parents=True)
    (folder / "run.sh").write_text(
        "set -e\necho \"$PYTHON_ROOT\" > $WORKSPACE_DIR/root.txt\n"
        "python3 -c 'import sys; print(sys.prefix)' > $WORKSPACE_DIR/python.txt\n")
    apply(imported(folder, tmp_path / "ws"), tmp_path)
    assert (tmp_path / "ws" / "root.txt").read_text().strip() == str(tmp_path / "site-packages")
    assert (tmp_path / "ws" / "python.txt").read_text().strip() == sys.prefix


def test_failing_script_fails_naming_the_mod_and_its_last_lines(tmp_path):
    folder = tmp_path / "eugr" / "broken"
    folder.mkdir(parents=True)
    (folder / "run.sh").write_text("echo one\necho two\necho 'anchor not found' >&2\nexit 3\n")
    with pytest.raises(ModFailedError) as info:
        apply(imported(folder, tmp_path / "ws"), tmp_path)
    assert str(info.value) == ("mod eugr-broken: run.sh exited with 3: one | two | "
                               "anchor not found")


def test_an_unpinned_download_fails_the_mod(tmp_path):
    folder = tmp_path / "eugr" / "sneaky"
    folder.mkdir(parents=True)
    # The URL is built at run time: the import cannot see it, so nothing is pinned for it.
    (folder / "run.sh").write_text("set -e\nHOST=$(echo example.org)\n"
                                   "curl -sL http://$HOST/x.py -o x\n")
    with pytest.raises(ModFailedError, match="not a download the mod pinned"):
        apply(imported(folder, tmp_path / "ws"), tmp_path)


def test_a_background_loop_is_not_a_build_mod(tmp_path):
    with pytest.raises(ManifestError) as info:
        import_eugr_mod(MODS / "cache-loop", tmp_path, ["spark"])
    assert "starts a background loop at every start, which an image cannot hold: run it on " \
           "the host before inv serve (sudo bash " in str(info.value)


def test_add_mod_takes_an_eugr_mod_folder(tmp_path, cli):
    code, _, err = cli("render", "--target", "spark", "--add-mod",
                       str(MODS / "fix-chat-template"), "--out", str(tmp_path / "r"))
    assert code == 0, err
    assert "mod eugr-fix-chat-template (runs at build time)" in err
    staged = tmp_path / "r" / "edgevllm-mods" / "eugr-fix-chat-template"
    assert (staged / "run.sh").is_file() and (staged / "chat_template.jinja").is_file()


def test_importing_again_replaces_the_import_and_never_a_mod_of_the_users(tmp_path):
    source = next(p for p in sorted(MODS.iterdir()) if (p / "run.sh").is_file()
                  and p.name != "cache-loop")
    first = import_eugr_mod(source, tmp_path, ["spark"])
    (first / "stale.txt").write_text("from the first import")
    again = import_eugr_mod(source, tmp_path, ["spark"])
    assert again == first and not (again / "stale.txt").exists()
    (again / "manifest.yaml").write_text("name: " + again.name + "\nversion: '1.0'\n")
    (again / "mine.py").write_text("# the user's own mod, by the same name")
    with pytest.raises(ManifestError, match="not an eugr import; edgevllm will not replace it"):
        import_eugr_mod(source, tmp_path, ["spark"])
    assert (again / "mine.py").read_text() == "# the user's own mod, by the same name"
