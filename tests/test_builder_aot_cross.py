"""The AOT step's cross road pieces (builder/aot_inimage.py ``--target-lib``): the link flags
for the target's CUDA folder, the refusals, the machine each module is built for; and the AOT
road preflight names (builder/aot.py ``aot_road``). The road end to end, cross-compiled here
and loaded in a linux/arm64 container: tests/e2e/test_aot_cross_e2e.py."""

from __future__ import annotations

import platform
import sys

import pytest

from edgevllm.builder import aot_inimage
from edgevllm.builder.aot import aot_road
from edgevllm.specs.buildspec import Builder

FLAGS = "-ccbin aarch64-linux-gnu-g++ -target-dir sbsa-linux"


def target_lib(tmp_path, stub=True, cudart=True):
    lib = tmp_path / "targets" / "sbsa-linux" / "lib"
    (lib / "stubs").mkdir(parents=True)
    if cudart:
        (lib / "libcudart.so").write_bytes(b"")
    if stub:
        (lib / "stubs" / "libcuda.so").write_bytes(b"")
    return str(lib)


def test_a_cross_build_links_against_the_targets_folder_and_its_driver_stub(tmp_path,
                                                                            monkeypatch):
    monkeypatch.setenv("CXX", "aarch64-linux-gnu-g++")
    monkeypatch.setenv("NVCC_PREPEND_FLAGS", FLAGS)
    monkeypatch.setenv("CC", "aarch64-linux-gnu-gcc")
    lib = target_lib(tmp_path)
    found, cuda_flags, ld_flags = aot_inimage.cross_toolchain({"notes": []}, lib)
    assert cuda_flags == [] and ld_flags == [f"-L{lib}", f"-L{lib}/stubs"]
    assert found["cross"] == {"cxx": "aarch64-linux-gnu-g++", "target_lib": lib,
                              "nvcc_prepend_flags": FLAGS}
    # FlashInfer adds -ccbin $CC to nvcc's flags, which NVCC_PREPEND_FLAGS already names
    assert "CC" not in aot_inimage.os.environ
    assert any("CC unset" in note for note in found["notes"])


@pytest.mark.parametrize("missing", ["stub", "cudart"])
def test_a_target_folder_without_cudart_or_the_stub_fails_in_one_line(tmp_path, monkeypatch,
                                                                      capsys, missing):
    monkeypatch.setenv("CXX", "aarch64-linux-gnu-g++")
    monkeypatch.setenv("NVCC_PREPEND_FLAGS", FLAGS)
    lib = target_lib(tmp_path, stub=missing != "stub", cudart=missing != "cudart")
    with pytest.raises(SystemExit) as exc:
        aot_inimage.cross_toolchain({"notes": []}, lib)
    assert exc.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("edgevllm aot: error: ")
    assert "cross_inimage" in err[0]


@pytest.mark.parametrize("unset", ["CXX", "NVCC_PREPEND_FLAGS"])
def test_a_cross_build_without_the_roads_compilers_fails_in_one_line(tmp_path, monkeypatch,
                                                                    capsys, unset):
    monkeypatch.setenv("CXX", "aarch64-linux-gnu-g++")
    monkeypatch.setenv("NVCC_PREPEND_FLAGS", FLAGS)
    monkeypatch.delenv(unset)
    with pytest.raises(SystemExit):
        aot_inimage.cross_toolchain({"notes": []}, target_lib(tmp_path))
    assert "needs CXX" in capsys.readouterr().err


def test_the_record_names_the_machine_a_library_was_built_for(tmp_path):
    own = {"x86_64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}[platform.machine()]
    assert aot_inimage.elf_machine(sys.executable) == own
    (tmp_path / "text").write_text("not a library")
    assert aot_inimage.elf_machine(str(tmp_path / "text")) is None


def test_preflight_says_where_the_aot_step_runs():
    assert "native" in aot_road("linux/arm64", Builder("arm64"))
    assert "native" in aot_road("linux/arm64", None)
    emulated = aot_road("linux/arm64", Builder("amd64"))
    assert "under emulation (linux/arm64 on this amd64 builder" in emulated
    assert "no cross road" in emulated
