"""image/ocilayout.py without the engine: an OCI image layout folder as ``docker save`` writes it
(``oci-layout``, ``index.json``, docker's ``manifest.json``, ``blobs/sha256/…``) written here
with real sha256-named blobs. Which names a layout may hold, the image id it names, and whether
it holds an image whole (what ``inv bundle`` run again keeps): a blob missing, changed, swapped
for a link, another image or another tag is not whole, and a damaged manifest is one line.
Saving from and loading into the engine: tests/e2e/test_offline_bundle_e2e.py."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from edgevllm.common.errors import IntegrityError
from edgevllm.image.ocilayout import complete_layout, image_id_of, is_layout_member

REF = "tiny:1"


def blob(folder: Path, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    path = folder / "blobs" / "sha256" / digest
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return digest


def layout(folder: Path) -> tuple[Path, str]:
    """A whole layout of one image tagged REF; the folder and the image id."""
    config = blob(folder, json.dumps({"architecture": "arm64", "os": "linux"}).encode())
    layer = blob(folder, b"layer bytes " * 100)
    manifest = blob(folder, json.dumps({"schemaVersion": 2, "config": {"digest":
                                        f"sha256:{config}"}}).encode())
    (folder / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (folder / "index.json").write_text(json.dumps(
        {"schemaVersion": 2, "manifests": [{"digest": f"sha256:{manifest}"}]}))
    (folder / "manifest.json").write_text(json.dumps(
        [{"Config": f"blobs/sha256/{config}", "RepoTags": [REF],
          "Layers": [f"blobs/sha256/{layer}"]}]))
    return folder, f"sha256:{config}"


@pytest.mark.parametrize(("name", "member"), [
    ("oci-layout", True), ("index.json", True), ("manifest.json", True), ("repositories", True),
    ("blobs/sha256/" + "a" * 64, True), ("blobs/sha256/" + "A" * 64, False),
    ("blobs/sha256/" + "a" * 63, False), ("blobs/sha256/../../etc/passwd", False),
    ("blobs/sha512/" + "a" * 128, False), ("other.txt", False), ("blobs/sha256/" + "a" * 64 +
                                                                  "\n", False),
])
def test_a_layout_holds_only_its_own_names(name, member):
    assert is_layout_member(name) is member


def test_a_whole_layout_is_its_files_and_names_its_image(tmp_path):
    folder, image_id = layout(tmp_path / "image")
    assert image_id_of(folder) == image_id
    files = complete_layout(folder, REF, image_id)
    assert files is not None
    assert files[:3] == ["index.json", "manifest.json", "oci-layout"]
    assert sorted(files[3:]) == sorted(f"blobs/sha256/{p.name}"
                                       for p in (folder / "blobs" / "sha256").iterdir())
    assert complete_layout(folder, image_id, image_id) == files  # named by its id


def _layer(folder: Path) -> Path:
    entry = json.loads((folder / "manifest.json").read_text())[0]
    return folder / entry["Layers"][0]


def _changed(folder: Path) -> None:
    data = bytearray(_layer(folder).read_bytes())
    data[0] ^= 1
    _layer(folder).write_bytes(bytes(data))


def _linked(folder: Path) -> None:
    path = _layer(folder)
    (folder.parent / "elsewhere").write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(folder.parent / "elsewhere")


BROKEN = {
    "layer missing": lambda folder: _layer(folder).unlink(),
    "layer changed": _changed,
    "layer a link": _linked,
    "no oci-layout": lambda folder: (folder / "oci-layout").unlink(),
    "index not json": lambda folder: (folder / "index.json").write_text("{"),
    "no manifest.json": lambda folder: (folder / "manifest.json").unlink(),
}


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_a_layout_that_is_not_whole_is_written_again(tmp_path, kind):
    folder, image_id = layout(tmp_path / "image")
    BROKEN[kind](folder)
    assert complete_layout(folder, REF, image_id) is None


def test_another_image_or_another_tag_is_not_this_layout(tmp_path):
    folder, image_id = layout(tmp_path / "image")
    assert complete_layout(folder, "other:1", image_id) is None
    assert complete_layout(folder, REF, "sha256:" + "0" * 64) is None


@pytest.mark.parametrize(("manifest", "said"), [
    ([], "not one image; a bundle carries exactly one"),
    ([{"Config": "x"}, {"Config": "y"}], "not one image"),
    ([{"Config": "blobs/sha256/short"}], "no config blob; the layout is damaged"),
    ([{"Layers": []}], "no config blob"),
], ids=["none", "two", "bad-config", "no-config"])
def test_a_damaged_docker_manifest_is_one_line(tmp_path, manifest, said):
    folder, _ = layout(tmp_path / "image")
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IntegrityError) as info:
        image_id_of(folder)
    assert said in str(info.value) and "\n" not in str(info.value)
    assert str(folder / "manifest.json") in str(info.value)


def _edit(folder: Path, name: str, change) -> None:
    data = json.loads((folder / name).read_text())
    change(data)
    (folder / name).write_text(json.dumps(data))


DAMAGED = {
    "config no blob": ("manifest.json", lambda d: d[0].update(Config="config.json")),
    "layers a number": ("manifest.json", lambda d: d[0].update(Layers=5)),
    "layers a text": ("manifest.json", lambda d: d[0].update(Layers="blobs")),
    "tags a text": ("manifest.json", lambda d: d[0].update(RepoTags=REF + "0")),
    "tags a mapping": ("manifest.json", lambda d: d[0].update(RepoTags={REF: 1})),
    "index a list": ("index.json", None),
    "manifests a number": ("index.json", lambda d: d.update(manifests=5)),
    "manifests missing": ("index.json", lambda d: d.pop("manifests")),
}


@pytest.mark.parametrize("kind", sorted(DAMAGED))
def test_a_damaged_layout_left_in_the_folder_is_saved_again_not_a_traceback(tmp_path, kind):
    """``inv bundle`` run again over a layout a run left damaged: it was a TypeError or
    AttributeError traceback (Layers or manifests of another type) or the manifest's own error
    (no config blob) instead of a fresh save; a RepoTags text was matched as a substring (a
    layout tagged tiny:10 stood for tiny:1)."""
    folder, image_id = layout(tmp_path / "image")
    name, change = DAMAGED[kind]
    if change is None:
        (folder / name).write_text("[]")
    else:
        _edit(folder, name, change)
    assert complete_layout(folder, REF, image_id) is None
