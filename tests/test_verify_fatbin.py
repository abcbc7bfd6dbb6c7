"""The ELF/fatbin parser against NVIDIA's cuobjdump, on real nvcc-built and real aarch64 libraries.

Libraries: built during the run with nvcc 13.0 (tests/support/cuda_libs.py, cached), plus
libnvjpeg.so.13 from the aarch64 nvidia-nvjpeg wheel on PyPI. cuobjdump: the
nvidia-cuda-cuobjdump wheel for this host's machine, unzipped into the test cache.
"""

from __future__ import annotations

import pytest

from edgevllm.common.errors import CorruptBinaryError, NotElfError
from edgevllm.verify import scan_file, scan_path
from edgevllm.verify.cuobjdump import disagreement, expected_listing, run_cuobjdump
from edgevllm.verify.elf import fatbin_sections
from support.cuda_libs import VARIANTS, aarch64_cuda_lib, cuobjdump_binary, nvcc_libs

ALL_LIBS = [*VARIANTS, "mixed_tu", "aarch64-nvjpeg"]


def _lib(name: str):
    return aarch64_cuda_lib() if name == "aarch64-nvjpeg" else nvcc_libs()[name]


@pytest.mark.parametrize("name", ALL_LIBS)
def test_parser_agrees_with_cuobjdump(name):
    lib = _lib(name)
    report = scan_file(lib)
    assert report.entries, f"{name}: no device code found"
    assert (
        disagreement(expected_listing(report.entries), run_cuobjdump(cuobjdump_binary(), lib))
        is None
    )


@pytest.mark.parametrize(
    "name,sass,ptx",
    [
        ("sm_110", ["sm_110"], []),
        ("sm_110a", ["sm_110a"], []),
        ("sm_110f", ["sm_110f"], []),
        ("sm_121", ["sm_121"], []),
        ("sm_121a", ["sm_121a"], []),
        ("sm_121f", ["sm_121f"], []),
        ("sm_120a", ["sm_120a"], []),
        ("sm_120f", ["sm_120f"], []),
        ("ptx_compute_110", [], ["compute_110"]),
        ("ptx_compute_121a", [], ["compute_121a"]),
        ("multi_gencode", ["sm_110a", "sm_120f", "sm_121a"], ["compute_121"]),
        ("lz4", ["sm_110a"], ["compute_110"]),
        ("uncompressed", ["sm_121a"], ["compute_121a"]),
        ("rdc.o", ["sm_110f", "sm_121a"], []),
    ],
)
def test_arches_match_the_gencodes(name, sass, ptx):
    report = scan_file(nvcc_libs()[name])
    assert (report.arches("sass"), report.arches("ptx")) == (sass, ptx)


def test_compression_flags():
    libs = nvcc_libs()
    assert "lz4" in {e.compression for e in scan_file(libs["lz4"]).entries}
    assert {e.compression for e in scan_file(libs["uncompressed"]).entries} == {"none"}
    assert "zstd" in {e.compression for e in scan_file(libs["multi_gencode"]).entries}


def test_relocatable_object_uses_relfatbin():
    data = nvcc_libs()["rdc.o"].read_bytes()
    assert [name for name, _ in fatbin_sections(data)] == ["__nv_relfatbin"]


def test_two_translation_units_are_two_containers():
    report = scan_file(nvcc_libs()["mixed_tu"])
    by_container: dict[int, set[str]] = {}
    for entry in report.entries:
        by_container.setdefault(entry.container, set()).add(entry.arch)
    assert {"sm_121a", "sm_110a"} in by_container.values()
    assert {"sm_90"} in by_container.values()


def test_real_aarch64_library():
    lib = aarch64_cuda_lib()
    assert int.from_bytes(lib.read_bytes()[18:20], "little") == 183  # EM_AARCH64
    report = scan_file(lib)
    assert {"sm_110", "sm_121"} <= set(report.arches("sass"))
    assert report.arches("ptx") == ["compute_121"]


def test_not_elf_is_an_error(tmp_path):
    text = tmp_path / "libnot.so"
    text.write_text("INPUT(-lfoo)\n")  # a linker script, like /usr/lib/x86_64-linux-gnu/libc.so
    with pytest.raises(NotElfError):
        scan_file(text)


def _fatbin_offset(data: bytes) -> int:
    name, contents = fatbin_sections(data)[0]
    return data.find(bytes(contents[:16]))


def test_truncated_library_is_corrupt(tmp_path):
    data = nvcc_libs()["multi_gencode"].read_bytes()
    cut = tmp_path / "libcut.so"
    cut.write_bytes(data[: _fatbin_offset(data) + 100])
    with pytest.raises(CorruptBinaryError):
        scan_file(cut)


def test_bad_fatbin_magic_is_corrupt(tmp_path):
    data = bytearray(nvcc_libs()["sm_121a"].read_bytes())
    data[_fatbin_offset(bytes(data))] ^= 0xFF
    bad = tmp_path / "libbad.so"
    bad.write_bytes(bytes(data))
    with pytest.raises(CorruptBinaryError, match="magic"):
        scan_file(bad)


def test_corrupt_library_does_not_stop_a_scan(tmp_path):
    good = nvcc_libs()["sm_110a"].read_bytes()
    (tmp_path / "libgood.so").write_bytes(good)
    (tmp_path / "libcut.so").write_bytes(good[: _fatbin_offset(good) + 40])
    (tmp_path / "libc.so").write_text("GROUP ( libc.so.6 )\n")  # not ELF: skipped
    reports = {r.path: r for r in scan_path(tmp_path)}
    assert set(reports) == {"libgood.so", "libcut.so"}
    assert reports["libgood.so"].status == "ok"
    assert reports["libcut.so"].status.startswith("corrupt: ")
