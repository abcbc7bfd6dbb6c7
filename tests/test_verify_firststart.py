"""The first-start report on real nvcc-built libraries and real wheels: PTX-only units and their
PTX bytes (checked against the PTX NVIDIA's cuobjdump extracts), FlashInfer's prebuilt packages
(a raw cubin cut out of a real fatbin) judged per target, the JSON verdict, the label record and
``--diff``."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from edgevllm.verify import verify
from edgevllm.verify.diff import compare, print_diff
from edgevllm.verify.firststart import first_start_cell, human_bytes
from edgevllm.verify.report import print_verdict
from support.cuda_libs import VLLM_033, cuobjdump_binary, nvcc_libs, wheel_verdict

FA2 = "site-packages/vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so"
CUBINS = "site-packages/flashinfer_cubin/cubins/gemm/k.cubin"
JIT_CACHE = "site-packages/flashinfer_jit_cache/jit_cache/norm/norm.so"


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, variant in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(nvcc_libs()[variant], root / name)
    return root


def _cubin(root: Path, name: str) -> None:
    """A raw sm_121a cubin, cut out of an uncompressed fatbin as FlashInfer's packages ship one."""
    from edgevllm.verify import scan_file

    library = nvcc_libs()["uncompressed"]
    entry = next(e for e in scan_file(library).entries if e.kind == "sass")
    data = library.read_bytes()[entry.offset:entry.offset + entry.stored_size]
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    (root / name).write_bytes(data)


def _extracted_ptx_bytes(library: Path, work: Path) -> int:
    work.mkdir()
    subprocess.run([str(cuobjdump_binary()), "-xptx", "all", str(library)], cwd=work,
                   check=True, capture_output=True)
    return sum(p.stat().st_size for p in work.glob("*.ptx"))


def test_ptx_only_units_and_their_bytes_match_cuobjdump(tmp_path):
    root = _tree(tmp_path / "img", {FA2: "ptx_compute_110", "site-packages/vllm/_C.abi3.so":
                                    "sm_121a"})
    start = verify("spark", path=root).first_start()
    (lib,) = start.ptx
    assert lib.path.endswith("_vllm_fa2_C.abi3.so") and (lib.units, lib.total) == (1, 1)
    # The fatbin keeps PTX as a NUL-terminated string: one byte more than the extracted file.
    assert lib.ptx_bytes == _extracted_ptx_bytes(nvcc_libs()["ptx_compute_110"],
                                                 tmp_path / "x") + 1
    assert start.ptx_units == 1 and start.ptx_bytes == lib.ptx_bytes
    assert start.caches[0] == "compute"
    # On Thor the same PTX (compute_110) is the same work; sm_121a SASS runs nowhere there.
    thor = verify("thor", path=root).first_start()
    assert [p.units for p in thor.ptx] == [1]


def test_a_unit_with_sass_for_the_target_needs_no_driver_jit(tmp_path):
    root = _tree(tmp_path, {"site-packages/vllm/_C.abi3.so": "multi_gencode"})
    start = verify("spark", path=root).first_start()
    assert start.ptx == [] and "compute" not in start.caches
    assert start.summary().startswith("first start: no PTX-only units;")


def test_flashinfer_without_prebuilt_packages_jit_compiles_everything(tmp_path):
    root = _tree(tmp_path, {"site-packages/vllm/_C.abi3.so": "sm_121a"})
    start = verify("spark", path=root).first_start()
    assert start.flashinfer_state == "jit" and "flashinfer" in start.caches
    assert "no flashinfer-cubin or flashinfer-jit-cache" in start.summary()


def test_flashinfer_prebuilt_packages_are_judged_per_target(tmp_path):
    root = _tree(tmp_path, {JIT_CACHE: "sm_121a"})
    _cubin(root, CUBINS)
    spark = verify("spark", path=root).first_start()
    assert spark.flashinfer_state == "prebuilt" and "flashinfer" not in spark.caches
    cubin, jit_cache = spark.flashinfer
    assert (cubin.name, cubin.units, cubin.running) == ("flashinfer-cubin", 1, 1)
    assert jit_cache.name == "flashinfer-jit-cache" and jit_cache.running == jit_cache.units >= 1
    thor = verify("thor", path=root).first_start()  # sm_121a code runs on no Thor
    assert thor.flashinfer_state == "jit"
    assert "flashinfer-cubin 0/1 units run" in thor.summary() and ": none for thor" in \
        thor.summary()
    (root / JIT_CACHE).unlink()
    assert verify("spark", path=root).first_start().flashinfer_state == "partial"


def test_modules_built_in_by_warm_count_as_some_prebuilt_kernels(tmp_path):
    """inv build --aot puts one model's modules in FlashInfer's AOT folder: counted per target
    like a package; FlashInfer still JIT-builds what they do not cover."""
    root = _tree(tmp_path, {"site-packages/flashinfer/data/aot/sampling/sampling.so": "sm_121a"})
    spark = verify("spark", path=root).first_start()
    assert spark.flashinfer_state == "partial" and "flashinfer" in spark.caches
    (warmed,) = spark.flashinfer
    assert warmed.name == "flashinfer-aot (--aot)" and warmed.running == warmed.units >= 1
    assert verify("thor", path=root).first_start().flashinfer_state == "jit"


def test_json_verdict_and_label_record_carry_the_first_start(tmp_path):
    root = _tree(tmp_path / "img", {FA2: "ptx_compute_110"})
    verdict = verify("spark", path=root, json_out=tmp_path / "v.json")
    data = json.loads((tmp_path / "v.json").read_text())["first_start"]
    assert data["ptx_units"] == 1 and data["ptx_bytes"] > 1000
    assert data["ptx_libraries"][0]["path"].endswith("_vllm_fa2_C.abi3.so")
    assert data["flashinfer"] == {"state": "jit", "packages": []}
    assert set(data["caches"]) == {"compute", "flashinfer", "triton", "vllm"}
    label = verdict.summary_dict()["first_start"]
    assert label["ptx"] == {"vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so": [1, data["ptx_bytes"]]}
    assert len(json.dumps(label)) < 400  # a label, not the JSON verdict


def test_the_printout_names_each_library_the_driver_compiles(tmp_path, capsys):
    root = _tree(tmp_path, {FA2: "ptx_compute_110"})
    print_verdict(verify("spark", path=root))
    out = capsys.readouterr().out
    assert "first start: 1 PTX-only units (1.3 kB PTX) in 1 library" in out
    assert "PTX JIT: .../vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so: 1/1 units, 1.3 kB PTX" in out


def test_diff_shows_the_first_start_change(tmp_path, capsys):
    old = verify("spark", path=_tree(tmp_path / "a", {FA2: "ptx_compute_110"}))
    new = verify("spark", path=_tree(tmp_path / "b", {FA2: "sm_121a"}))
    diff = compare("spark", old, new)
    assert diff.first_start is not None
    assert diff.first_start.new == "0 PTX-only units (0 B PTX); FlashInfer jit"
    assert diff.to_json()["first_start"]["old"].startswith("1 PTX-only units (1.3 kB PTX)")
    print_diff(diff)
    assert "~ first start: 1 PTX-only units" in capsys.readouterr().out
    assert compare("spark", old, old).first_start is None


def test_cells_and_sizes():
    assert first_start_cell(None) == "not recorded"
    assert [human_bytes(n) for n in (0, 999, 1300, 12_345_678, 4 * 10**9)] == [
        "0 B", "999 B", "1.3 kB", "12.3 MB", "4.0 GB"]


@pytest.mark.parametrize("target,units", [("spark", 6 + 1 + 76), ("thor", 20 + 15 + 76)])
def test_stock_vllm_033_wheel_first_start(target, units):
    """The stock wheel's PTX-only units, as the per-library coverage counts them
    (tests/test_verify_wheels.py): FA2 is all PTX on both devices."""
    start = wheel_verdict(VLLM_033, target).first_start()
    assert start.ptx_units == units
    by_path = {lib.path: lib for lib in start.ptx}
    fa2 = by_path["vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so"]
    assert (fa2.units, fa2.total) == (76, 76) and fa2.ptx_bytes > 10**8
    assert all(lib.ptx_bytes > 0 for lib in start.ptx)
