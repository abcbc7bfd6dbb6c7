"""inspect/inimage_dists.py, the script the image's own python3 runs (stdlib only): names as
PEP 503 folds them, the METADATA header (never its body), the distributions of a real folder tree
(a vendored copy, a second packages folder below the first and a folder linked in are not walked),
and the installed Debian packages of a dpkg status file in Debian's own shape."""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

import pytest

from edgevllm.inspect import inimage_dists
from edgevllm.inspect.inimage_dists import (
    canonical,
    deb_packages,
    debs,
    distributions,
    entry,
    header_fields,
    unnamed,
)
from support.fake_rootfs import INSTALLED, dpkg_status, metadata, write_tree

SITE = "usr/lib/python3/dist-packages"


@pytest.mark.parametrize("name, folded", [
    ("Django", "django"), ("zope.interface", "zope-interface"), ("a__b--c..d", "a-b-c-d"),
    ("  Pillow ", "pillow"), ("_private", "private"), ("trailing_", "trailing"), ("", "")])
def test_names_fold_as_pep_503_says(name, folded):
    assert canonical(name) == folded


@pytest.mark.parametrize("data, fields", [
    (metadata("six", "1.16.0"), ("six", "1.16.0")),
    (b"Name: first\nName: second\nVersion: 1\n", ("first", "1")),
    (b"Metadata-Version: 2.1\n\nName: in-the-body\nVersion: 9\n", ("", "")),
    (b"Summary: a: b\nName:   spaced  \nVersion:2.0\n", ("spaced", "2.0")),
    (b"Name: caf\xe9\nVersion: 1\n", ("caf\ufffd", "1")),
    (b"no header at all", ("", "")),
    (b"", ("", "")),
])
def test_name_and_version_come_from_the_header_alone(data, fields):
    assert header_fields(data) == fields


@pytest.mark.parametrize("location, name", [
    ("/site/foo_bar-1.0.dist-info", "foo-bar"), ("/site/Old.egg-info", "old"),
    ("/site/.dist-info", "unnamed"), ("/site/x-1.0.dist-info/", "x")])
def test_a_distribution_without_a_name_is_named_by_its_folder(location, name):
    assert unnamed(location) == name


def test_an_entry_hashes_its_metadata_and_its_record():
    found = entry("/site/six-1.16.0.dist-info", metadata("Six", "1.16.0"), b"six.py,,\n")
    assert found["name"] == "six" and found["version"] == "1.16.0"
    assert found["metadata_sha256"] == inimage_dists.sha256(metadata("Six", "1.16.0"))
    assert found["record_sha256"] == inimage_dists.sha256(b"six.py,,\n")
    assert entry("/site/x.egg-info", b"", None)["record_sha256"] is None


def test_the_tree_s_distributions_are_found_at_the_first_packages_folder_only(tmp_path):
    root = write_tree(tmp_path / "root", {
        f"{SITE}/six-1.16.0.dist-info/METADATA": metadata("six", "1.16.0"),
        f"{SITE}/six-1.16.0.dist-info/RECORD": b"six.py,,\n",
        f"{SITE}/pip/_vendor/inner-1.0.dist-info/METADATA": metadata("inner", "1.0"),
        f"{SITE}/deeper/site-packages/deep-1.0.dist-info/METADATA": metadata("deep", "1.0"),
        f"{SITE}/nometa-1.0.dist-info/RECORD": b"",
        "opt/venv/lib/python3.12/site-packages/idna-3.10.dist-info/METADATA":
            metadata("idna", "3.10"),
        "home/user/x-1.0.dist-info/METADATA": metadata("stray", "1.0"),
    })
    found = distributions(str(root))
    assert [(d["name"], d["path"][len(str(root)):]) for d in found] == [
        ("idna", "/opt/venv/lib/python3.12/site-packages/idna-3.10.dist-info"),
        ("six", f"/{SITE}/six-1.16.0.dist-info")]


def test_a_packages_folder_linked_in_is_not_walked(tmp_path):
    elsewhere = write_tree(tmp_path / "elsewhere", {
        "site-packages/hidden-1.0.dist-info/METADATA": metadata("hidden", "1.0")})
    root = write_tree(tmp_path / "root", {f"{SITE}/real-1.0.dist-info/METADATA":
                                          metadata("real", "1.0")})
    os.symlink(elsewhere / "site-packages", root / "usr/lib/python3/site-packages")
    os.symlink(elsewhere, root / "opt")
    assert [d["name"] for d in distributions(str(root))] == ["real"]


def test_an_egg_info_file_and_folder_both_count_and_an_empty_folder_does_not(tmp_path):
    root = write_tree(tmp_path, {f"{SITE}/flat-2.0.egg-info": metadata("flat", "2.0"),
                                 f"{SITE}/Old.egg-info/PKG-INFO": metadata("Old", "0.1"),
                                 f"{SITE}/empty.egg-info/SOURCES.txt": b""})
    assert sorted(d["name"] for d in distributions(str(root))) == ["flat", "old"]


def test_an_empty_tree_has_no_distributions_and_no_packages(tmp_path):
    assert distributions(str(tmp_path)) == [] and debs(str(tmp_path)) == []


RELEASE = b'ID="ubuntu"\nVERSION_CODENAME=\'noble\'\nNAME=Ubuntu\n'


def test_installed_packages_only_sorted_by_name_then_architecture():
    status = dpkg_status(("zlib1g", "1:1.3", "arm64", INSTALLED),
                         ("libc6", "2.39", "arm64", INSTALLED),
                         ("libc6", "2.39", "amd64", INSTALLED),
                         ("held", "1", "all", "hold ok installed"),
                         ("half", "1", "all", "install ok half-installed"),
                         ("removed", "1", "all", "deinstall ok config-files"),
                         ("unpacked", "1", "all", "install ok unpacked"))
    found = deb_packages(status, RELEASE)
    assert [(d["name"], d["arch"]) for d in found] == [
        ("held", "all"), ("libc6", "amd64"), ("libc6", "arm64"), ("zlib1g", "arm64")]
    assert {(d["distro"], d["codename"]) for d in found} == {("ubuntu", "noble")}


def test_continuation_lines_never_read_as_fields():
    status = (b"Package: a\nStatus: install ok installed\nVersion: 1.0\nDescription: x\n"
              b" Version: 9.9\n Package: evil\n\tStatus: install ok installed\n")
    assert [(d["name"], d["version"]) for d in deb_packages(status)] == [("a", "1.0")]


@pytest.mark.parametrize("status", [None, b"", b"\n\n\n", b"Status: install ok installed\n",
                                    b"\xff\xfe garbage", b"Package:\nStatus: install ok installed"])
def test_a_status_with_no_named_installed_package_lists_none(status):
    assert deb_packages(status) == []


def test_a_package_without_an_os_release_has_an_empty_distro():
    found = deb_packages(dpkg_status(("a", "1", "all", INSTALLED)), None)
    assert (found[0]["distro"], found[0]["codename"]) == ("", "")


def test_etc_os_release_is_read_before_usr_lib_s(tmp_path):
    root = write_tree(tmp_path, {"var/lib/dpkg/status": dpkg_status(("a", "1", "all", INSTALLED)),
                                 "usr/lib/os-release": b"ID=debian\nVERSION_CODENAME=trixie\n"})
    assert debs(str(root))[0]["distro"] == "debian"
    (root / "etc").mkdir()
    (root / "etc/os-release").write_bytes(RELEASE)
    assert debs(str(root))[0]["codename"] == "noble"


def test_the_script_imports_only_the_standard_library():
    """It runs in the image's own python3, which holds none of edgevllm's dependencies."""
    tree = ast.parse(Path(inimage_dists.__file__).read_text())
    names = {alias.name.split(".")[0] for node in ast.walk(tree)
             if isinstance(node, ast.Import) for alias in node.names}
    names |= {node.module.split(".")[0] for node in ast.walk(tree)
              if isinstance(node, ast.ImportFrom) and node.module}
    assert names and names <= set(sys.stdlib_module_names), names - set(sys.stdlib_module_names)
