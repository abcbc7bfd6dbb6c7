"""inspect/offline.py and the rules it shares with inspect/inimage_dists.py: a published set's
archive read offline finds exactly the distributions and Debian packages the in-image script finds
in the same filesystem (written to disk here and walked by the script's own function), whatever
the layout; an archive that is no image, or one whose layers and config disagree, is named."""

from __future__ import annotations

import io
import json

import pytest

from edgevllm.common.errors import ResourceLimitError, SupplyChainError
from edgevllm.inspect import inimage_dists, offline
from edgevllm.inspect.offline import dist_file, dists_of, read_archive
from support.fake_rootfs import (
    INSTALLED,
    OS_RELEASE,
    SITE,
    dpkg_status,
    metadata,
    tar_of,
    write_tree,
)
from support.verify_layers import save_archive, sha

VENV = "opt/venv/lib/python3.12/site-packages"


@pytest.mark.parametrize("path, kept", [
    (f"{SITE}/six-1.16.0.dist-info/METADATA", True),
    (f"{SITE}/six-1.16.0.dist-info/RECORD", True),
    (f"{SITE}/six-1.16.0.dist-info/entry_points.txt", False),
    (f"{SITE}/six-1.16.0.dist-info/licenses/METADATA", False),
    (f"{SITE}/six-1.16.0.dist-info", False),
    (f"{SITE}/Old.egg-info/PKG-INFO", True),
    (f"{SITE}/Old.egg-info", True),  # a file: the metadata itself
    (f"{SITE}/Old.egg-info/SOURCES.txt", False),
    (f"{SITE}/six.py", False),
    (f"{SITE}/pip/_vendor/x-1.0.dist-info/METADATA", False),  # vendored: part of pip
    (f"{VENV}/a/site-packages/x-1.0.dist-info/METADATA", False),  # only the first folder
    ("site-packages/x-1.0.dist-info/METADATA", True),
    ("usr/lib/python3/dist-packages", False),
    ("x-1.0.dist-info/METADATA", False),  # no packages folder above it
    ("opt/my-site-packages/x-1.0.dist-info/METADATA", False),
])
def test_which_files_are_a_distribution_s_metadata(path, kept):
    assert dist_file(path) is kept


LAYOUT = {
    f"{SITE}/six-1.16.0.dist-info/METADATA": metadata("six", "1.16.0"),
    f"{SITE}/six-1.16.0.dist-info/RECORD": b"six.py,,\n",
    f"{SITE}/norecord-1.0.dist-info/METADATA": metadata("norecord", "1.0"),
    f"{SITE}/nometa-1.0.dist-info/RECORD": b"",
    f"{SITE}/Old_Pkg.egg-info/PKG-INFO": metadata("Old_Pkg", "0.1"),
    f"{SITE}/flat-2.0.egg-info": metadata("flat", "2.0"),
    f"{SITE}/empty.egg-info/SOURCES.txt": b"",
    f"{SITE}/pip/_vendor/inner-1.0.dist-info/METADATA": metadata("inner", "1.0"),
    f"{VENV}/Zope.Interface-6.0.dist-info/METADATA": metadata("Zope.Interface", "6.0"),
    f"{VENV}/nested/site-packages/deep-1.0.dist-info/METADATA": metadata("deep", "1.0"),
    f"{VENV}/noname-3.1.dist-info/METADATA": b"Metadata-Version: 2.1\n\nbody Name: x\n",
    "home/u/x-1.0.dist-info/METADATA": metadata("stray", "1.0"),
}


def offline_of(files: dict[str, bytes]) -> list[dict]:
    archive = read_archive(io.BytesIO(save_archive([tar_of(files)])), "set")
    assert archive.problems == []
    return archive.dists


def test_the_archive_and_the_in_image_script_find_the_same_distributions(tmp_path):
    on_disk = inimage_dists.distributions(str(write_tree(tmp_path, LAYOUT)))
    strip = len(str(tmp_path))
    expected = sorted(({**d, "path": d["path"][strip:]} for d in on_disk),
                      key=lambda d: d["path"])
    assert sorted(offline_of(LAYOUT), key=lambda d: d["path"]) == expected
    assert {d["name"] for d in expected} == {"six", "norecord", "old-pkg", "flat",
                                             "zope-interface", "noname"}


def test_each_distribution_carries_its_metadata_and_record_hashes():
    found = {d["name"]: d for d in dists_of(LAYOUT)}
    six = found["six"]
    assert six["path"] == f"/{SITE}/six-1.16.0.dist-info"
    assert six["metadata_sha256"] == sha(LAYOUT[f"{SITE}/six-1.16.0.dist-info/METADATA"])[7:]
    assert six["record_sha256"] == sha(b"six.py,,\n")[7:]
    assert found["norecord"]["record_sha256"] is None
    assert found["flat"]["path"] == f"/{SITE}/flat-2.0.egg-info"
    assert found["noname"]["version"] == ""  # the body's "Name:" is no header


def test_a_later_layer_s_whiteout_removes_a_distribution_and_an_opaque_folder_all_of_them():
    lower = tar_of(LAYOUT)
    upper = tar_of({f"{SITE}/six-1.17.0.dist-info/METADATA": metadata("six", "1.17.0")},
                   [f"{SITE}/.wh.six-1.16.0.dist-info", f"{VENV}/.wh..wh..opq"])
    archive = read_archive(io.BytesIO(save_archive([lower, upper])), "set")
    names = {(d["name"], d["version"]) for d in archive.dists}
    assert ("six", "1.17.0") in names and ("six", "1.16.0") not in names
    assert not any(d["path"].startswith(f"/{VENV}") for d in archive.dists)
    assert ("flat", "2.0") in names


def test_debian_packages_are_the_installed_ones_of_the_top_status_file():
    status = dpkg_status(("libc6", "2.41-12", "arm64", INSTALLED),
                         ("half", "1", "arm64", "install ok half-installed"),
                         ("gone", "1", "arm64", "deinstall ok config-files"),
                         ("zlib1g", "1:1.3", "arm64", INSTALLED))
    files = {"var/lib/dpkg/status": status, "etc/os-release": OS_RELEASE}
    archive = read_archive(io.BytesIO(save_archive([tar_of(files)])), "set")
    assert archive.debs == [
        {"name": "libc6", "version": "2.41-12", "arch": "arm64", "distro": "debian",
         "codename": "trixie"},
        {"name": "zlib1g", "version": "1:1.3", "arch": "arm64", "distro": "debian",
         "codename": "trixie"}]
    assert archive.debs == inimage_dists.deb_packages(status, OS_RELEASE)


def test_etc_os_release_wins_over_usr_lib_s_as_in_the_image(tmp_path):
    files = {"var/lib/dpkg/status": dpkg_status(("a", "1", "all", INSTALLED)),
             "usr/lib/os-release": b"ID=ubuntu\nVERSION_CODENAME=noble\n",
             "etc/os-release": b"ID='debian'\nVERSION_CODENAME=\"trixie\"\n"}
    offline_debs = offline.debs_of(files)
    assert [(d["distro"], d["codename"]) for d in offline_debs] == [("debian", "trixie")]
    assert offline_debs == inimage_dists.debs(str(write_tree(tmp_path, files)))


def archive_with(config: object, layers: list[bytes], names: list[str] | None = None) -> bytes:
    """A docker-save archive of ``layers`` whose config is ``config`` (any JSON)."""
    raw = json.dumps(config).encode()
    blobs = {f"blobs/sha256/{sha(b)[7:]}": b for b in layers}
    manifest = [{"Config": "config.json", "Layers": names if names is not None else list(blobs)}]
    return tar_of({"config.json": raw, **blobs, "manifest.json": json.dumps(manifest).encode()})


def test_a_config_naming_other_layers_is_a_problem_naming_the_layer():
    layer = tar_of({"a": b"x"})
    config = {"rootfs": {"diff_ids": [sha(b"other")]}}
    archive = read_archive(io.BytesIO(archive_with(config, [layer])), "out/s.tar.zst")
    assert archive.problems == [f"out/s.tar.zst: layer 0 hashes to {sha(layer)}, the image "
                                f"config says {sha(b'other')}"]


def test_a_config_counting_other_layers_and_a_layer_missing_are_both_named():
    layer = tar_of({"a": b"x"})
    config = {"rootfs": {"diff_ids": [sha(layer), sha(b"second")]}}
    data = archive_with(config, [layer], [f"blobs/sha256/{sha(layer)[7:]}", "blobs/missing"])
    problems = read_archive(io.BytesIO(data), "set").problems
    assert problems == ["set: layer 1 (blobs/missing) is missing from the archive"]
    short = read_archive(io.BytesIO(archive_with({"rootfs": {"diff_ids": []}}, [layer])), "set")
    assert short.problems == ["set: the image config names 0 layers, the archive 1"]


def test_the_image_id_is_the_config_s_sha256_and_its_labels_are_read():
    config = {"config": {"Labels": {"edgevllm.target": "spark"}}, "rootfs": {"diff_ids": []}}
    archive = read_archive(io.BytesIO(archive_with(config, [])), "set")
    assert archive.config_sha256 == sha(json.dumps(config).encode())
    assert archive.labels == {"edgevllm.target": "spark"}
    assert read_archive(io.BytesIO(archive_with({"config": None}, [])), "set").labels == {}


@pytest.mark.parametrize("labels", [["a"], {"a": 1}, {"a": None}, "text"])
def test_labels_that_are_not_a_mapping_of_strings_are_one_line(labels):
    with pytest.raises(SupplyChainError) as raised:
        read_archive(io.BytesIO(archive_with({"config": {"Labels": labels}}, [])), "set")
    assert str(raised.value) == ("set: the image config's field 'config.Labels' is not a "
                                 "mapping of strings; the archive is damaged")


@pytest.mark.parametrize("config", [[1], "text", None, 7])
def test_a_config_that_is_no_object_means_no_image_archive(config):
    with pytest.raises(SupplyChainError, match="^set: no docker-save manifest.json naming"):
        read_archive(io.BytesIO(archive_with(config, [])), "set")


def test_an_archive_without_a_manifest_is_no_image_archive():
    data = tar_of({"config.json": b"{}", "other": b"x"})
    with pytest.raises(SupplyChainError, match="not an image archive"):
        read_archive(io.BytesIO(data), "set")


def test_one_metadata_file_over_its_limit_is_refused_naming_it(monkeypatch):
    monkeypatch.setattr(offline, "KEPT_LIMIT", 100)
    path = f"{SITE}/big-1.0.dist-info/METADATA"
    data = save_archive([tar_of({path: metadata("big", "1.0") + b"x" * 200,
                                 f"{SITE}/big.py": b"y" * 500})])
    with pytest.raises(ResourceLimitError, match=f"^{path}: declares 2[0-9][0-9] bytes"):
        read_archive(io.BytesIO(data), "set")


def test_large_files_that_are_no_metadata_are_not_kept(monkeypatch):
    monkeypatch.setattr(offline, "KEPT_LIMIT", 100)
    monkeypatch.setattr(offline, "ALL_KEPT_LIMIT", 100)
    files = {f"{SITE}/torch/lib/libtorch.so": b"\x7fELF" + b"z" * 5000,
             f"{SITE}/t-1.0.dist-info/METADATA": metadata("t", "1.0")}
    archive = read_archive(io.BytesIO(save_archive([tar_of(files)])), "set")
    assert [d["name"] for d in archive.dists] == ["t"]
