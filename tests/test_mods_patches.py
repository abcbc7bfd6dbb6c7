"""Source patches against the real CMake files of vLLM 0.20.2 (sdist from PyPI).

The proof that the patch does what it intends runs vLLM's own ``cuda_archs_loose_intersection``
(from the sdist's ``cmake/utils.cmake``) in cmake script mode with the CUDA 13.0 branch's
``CUDA_SUPPORTED_ARCHS`` as read from the (patched) CMakeLists.txt: 12.1a must survive.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from edgevllm.common.errors import ManifestError, ModFailedError
from edgevllm.mods.patches import apply_source_patches
from support.checks import present
from support.sdists import pypi_sdist, sdist_members

FILES = ["CMakeLists.txt", "cmake/utils.cmake"]


@pytest.fixture()
def tree(tmp_path) -> Path:
    if shutil.which("cmake") is None:
        pytest.fail("cmake is missing: install cmake >= 3.25 (apt-get install cmake)")
    return sdist_members(pypi_sdist("vllm", "0.20.2"), FILES, tmp_path / "vllm")


def cuda13_supported(tree: Path) -> str:
    text = (tree / "CMakeLists.txt").read_text()
    match = re.search(r'VERSION_GREATER_EQUAL 13\.0\)\n(?:[ \t]*#[^\n]*\n)*[ \t]*'
                      r'set\(CUDA_SUPPORTED_ARCHS "([^"]*)"\)', text)
    assert match, "no CUDA 13.0 branch in CMakeLists.txt"
    return match.group(1)


def intersect(tree: Path, supported: str, requested: str = "12.1a") -> str:
    script = tree / "probe.cmake"
    script.write_text("cmake_minimum_required(VERSION 3.25)\n"
                      f"include({tree / 'cmake' / 'utils.cmake'})\n"
                      f'cuda_archs_loose_intersection(OUT "{supported}" "{requested}")\n'
                      'message(STATUS "RESULT=${OUT}")\n')
    proc = subprocess.run(["cmake", "-P", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return present(re.search(r"RESULT=(\S*)", proc.stdout + proc.stderr), "RESULT=").group(1)


def test_applied_then_unchanged_and_121a_survives(tree):
    assert intersect(tree, cuda13_supported(tree)) == "12.0"  # the upstream bug, vllm#36835
    [result] = apply_source_patches(tree, "spark", "0.20.2")
    assert result["name"] == "vllm-cmake-keep-121a" and result["outcome"] == "applied"
    assert result["files"] == ["CMakeLists.txt"]
    assert intersect(tree, cuda13_supported(tree)) == "12.1a"
    assert intersect(tree, cuda13_supported(tree), "11.0a") == "11.0a"  # Thor untouched
    before = (tree / "CMakeLists.txt").read_bytes()
    [again] = apply_source_patches(tree, "spark", "0.20.2")
    assert again["outcome"] == "already-applied"
    assert (tree / "CMakeLists.txt").read_bytes() == before


def test_only_for_spark(tree):
    assert apply_source_patches(tree, "thor", "0.20.2") == []


def test_version_outside_range_is_not_applicable(tree):
    [result] = apply_source_patches(tree, "spark", "0.19.1")
    assert result["outcome"] == "not-applicable"
    assert result["detail"] == "vllm 0.19.1 is outside >=0.20,<0.34"


def test_upstream_already_keeps_121_is_not_applicable(tree):
    path = tree / "CMakeLists.txt"
    path.write_text(path.read_text().replace(
        'set(CUDA_SUPPORTED_ARCHS "7.5;8.0;8.6;8.7;8.9;9.0;10.0;11.0;12.0")',
        'set(CUDA_SUPPORTED_ARCHS "7.5;8.0;8.6;8.7;8.9;9.0;10.0;11.0;12.0;12.1")'))
    [result] = apply_source_patches(tree, "spark", None)
    assert result["outcome"] == "not-applicable"
    assert "upstream already does this" in result["detail"]
    assert "vLLM version unknown" in result["detail"]
    assert intersect(tree, cuda13_supported(tree)) == "12.1a"


def test_unknown_version_decides_by_content(tree):
    [result] = apply_source_patches(tree, "spark", None)
    assert result["outcome"] == "applied" and "decided by file content" in result["detail"]


def test_altered_file_fails_naming_patch_version_file_anchor(tree):
    path = tree / "CMakeLists.txt"
    path.write_text(path.read_text().replace("10.0;11.0;12.0\")", "10.0;11.0;12.0f\")", 1))
    with pytest.raises(ModFailedError) as info:
        apply_source_patches(tree, "spark", "0.20.2")
    message = str(info.value)
    assert message.startswith("patch vllm-cmake-keep-121a: vllm 0.20.2: file CMakeLists.txt: "
                              "missing anchor")
    assert "set(CUDA_SUPPORTED_ARCHS" in message and "\n" not in message


def test_malformed_patch_manifest_is_one_line(tmp_path, monkeypatch, tree):
    bad = tmp_path / "extra" / "broken"
    bad.mkdir(parents=True)
    (bad / "patch.yaml").write_text("name: broken\nversion: '1'\ndescription: x\n"
                                    "targets: [spark]\napplies_to: {torch: '>=2'}\n"
                                    "edits: [{path: a, replacements: []}]\n")
    monkeypatch.setenv("EDGEVLLM_PATCHES_PATH", str(tmp_path / "extra"))
    with pytest.raises(ManifestError, match=r"broken/patch.yaml: field 'applies_to'"):
        apply_source_patches(tree, "spark", "0.20.2")


def test_a_tree_file_that_is_not_text_fails_the_patch_in_one_line(tree):
    """The file a patch edits comes from the tree (a PR, a fork): bytes that are not UTF-8 fail
    the patch naming it, as an edit that does not apply does."""
    (tree / "CMakeLists.txt").write_bytes(b"project(vllm)\n\xff\xfe\n")
    with pytest.raises(ModFailedError, match=r"patch vllm-cmake-keep-121a: vllm 0.33.0: "
                                             r".*CMakeLists.txt: not UTF-8 text \(byte 14\)"):
        apply_source_patches(tree, "spark", "0.33.0")
