"""Per-unit coverage and policy modes on real nvcc-built libraries: both fatbin compression
modes (ZSTD, LZ4; cubin headers checked through decompression), a library with one short unit
under every-unit (fails, names the kernel) and under coverage (passes, lists it), thresholds,
package-anchored rules, and ``--diff`` between two folders."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from edgevllm.specs.cuda import CudaArch
from edgevllm.verify import judge, load_policy, scan_file, verify
from edgevllm.verify.diff import diff_sources
from edgevllm.verify.library import inspect_buffer
from edgevllm.verify.policy import anchors
from edgevllm.verify.report import level_cell
from support.checks import present
from support.cuda_libs import compressed_libs, nvcc_libs

THOR, SPARK = CudaArch(11, 0), CudaArch(12, 1)


@pytest.mark.parametrize("mode", ["zstd", "lz4"])
def test_compressed_entries_are_read_and_checked(mode):
    report = scan_file(compressed_libs()[mode])
    assert report.status == "ok"
    assert {e.compression for e in report.entries} == {mode}
    assert set(report.arches("sass")) == {"sm_121a", "sm_110f"}
    levels = {target: judge([report], target, load_policy()).libraries[0].level
              for target in (THOR, SPARK)}
    assert levels == {THOR: "native", SPARK: "native"}


@pytest.mark.parametrize("mode", ["zstd", "lz4"])
def test_kernel_names_come_out_of_compressed_cubins(mode):
    data = compressed_libs()[mode].read_bytes()
    report = inspect_buffer("lib.so", data, CudaArch(9, 0))  # nothing runs on 9.0: all named
    names = [name for kernels in report.unit_kernels.values() for name in present(kernels)]
    assert {"_Z5scalePff", "_Z5shiftPff", "_Z6squarePf"} <= set(names)


def test_a_damaged_compressed_cubin_is_corrupt():
    data = bytearray(compressed_libs()["zstd"].read_bytes())
    entry = next(e for e in scan_file(compressed_libs()["zstd"]).entries if e.kind == "sass")
    data[entry.offset + 4:entry.offset + 12] = b"\xff" * 8  # inside the zstd frame header
    report = inspect_buffer("lib.so", bytes(data))
    assert report.corrupt, report.status


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, variant in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(nvcc_libs()[variant], tmp_path / name)
    return tmp_path


def test_every_unit_fails_on_one_short_unit_and_names_its_kernel(tmp_path):
    root = _tree(tmp_path, {"site-packages/vllm/_C.abi3.so": "mixed_tu"})
    verdict = verify("spark", path=root)
    (lib,) = verdict.libraries
    assert (lib.mode, lib.passed, lib.reason) == ("every-unit", False, "1/2 units below native")
    assert [unit.kernels for unit in lib.coverage.short] == [["other(int*)"]]
    assert level_cell(lib) == "native (1/2; 1 sm_90-only: other)"


def test_units_the_kernel_plan_builds_as_ptx_pass_as_planned(tmp_path):
    """A compile's own 8.0+PTX units (vLLM's Marlin kernels on a 12.1a build) pass the
    every-unit gate when the plan says so, counted apart; without the plan, or with a plan
    that names other PTX, they fail it."""
    from support.cuda_libs import planned_ptx_lib

    lib_path = tmp_path / "site-packages" / "vllm" / "_moe_C_stable_libtorch.abi3.so"
    lib_path.parent.mkdir(parents=True)
    shutil.copyfile(planned_ptx_lib(), lib_path)
    (lib,) = verify("spark", path=tmp_path,
                    planned={"_moe_C_stable_libtorch": ["12.1a", "8.0+PTX"]}).libraries
    assert (lib.mode, lib.passed, lib.as_planned) == ("every-unit", True, 1)
    assert lib.to_json()["ptx_as_planned"] == 1
    for planned in (None, {"_moe_C_stable_libtorch": ["12.1a", "8.0"]},
                    {"_C_stable_libtorch": ["8.0+PTX"]}, {"_moe_C_stable_libtorch": "8.0+PTX"}):
        (lib,) = verify("spark", path=tmp_path, planned=planned).libraries
        assert (lib.passed, lib.as_planned, lib.reason) == (False, 0, "1/2 units below native")


def test_coverage_lists_the_short_unit_and_passes(tmp_path):
    root = _tree(tmp_path, {"torch/lib/libtorch_cuda.so": "mixed_tu"})
    (lib,) = verify("thor", path=root).libraries
    assert (lib.rule, lib.mode, lib.passed) == ("torch", "coverage", True)
    assert lib.coverage.counts == {"native": 1, "none": 1}


def test_coverage_threshold_and_nothing_running(tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text("rules:\n  - name: all\n    match: ['**/*.so']\n    mode: coverage\n"
                      "    require: compatible\n    min_coverage: 0.75\n")
    root = _tree(tmp_path / "tree", {"libmixed.so": "mixed_tu"})
    (lib,) = verify("spark", path=root, policy=policy).libraries
    assert not lib.passed and lib.reason == "1/2 units reach compatible"
    (lib,) = verify("thor", path=_tree(tmp_path / "t2", {"libx.so": "sm_121a"}),
                    policy=policy).libraries
    assert not lib.passed and level_cell(lib).startswith("none (0/")


@pytest.mark.parametrize("path,rule", [
    ("vllm/_C.abi3.so", "vllm"),  # unzipped wheel or .whl
    ("usr/local/lib/python3.12/dist-packages/vllm/_C_stable_libtorch.abi3.so", "vllm"),
    ("opt/vllm/.venv/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so", "torch"),
    ("vllm/.venv/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so", "torch"),
    ("vllm/cumem_allocator.abi3.so", "vllm-extras"),
    ("opt/vllm/.cache/x/_C.abi3.so", "-"),  # a folder named vllm is not the package
    ("torch/lib/libtorch_cuda_linalg.so", "-"),  # host code calling cuSOLVER
    ("x/site-packages/flashinfer_jit_cache/jit_cache/a/b.so", "flashinfer"),
])
def test_rules_are_anchored_on_the_package_folder(path, rule):
    assert load_policy().rule_of(path).name == rule


def test_anchors():
    assert anchors("a/site-packages/b/site-packages/torch/x.so") == [
        "a/site-packages/b/site-packages/torch/x.so", "b/site-packages/torch/x.so", "torch/x.so"]


def test_diff_between_two_folders(tmp_path):
    old = _tree(tmp_path / "old", {"vllm/_C.abi3.so": "sm_120f", "vllm/_gone.abi3.so": "sm_110"})
    new = _tree(tmp_path / "new", {"lib/python3.12/site-packages/vllm/_C.abi3.so": "sm_121a",
                                   "vllm/_moe_C.abi3.so": "sm_121f"})
    diff = diff_sources("spark", str(old), str(new))
    changes = {c.path: (c.old, c.new) for c in diff.changes}
    assert changes == {"vllm/_C.abi3.so": ("compatible (2/2)", "native (2/2)"),
                       "vllm/_gone.abi3.so": ("none (0/1; 1 sm_110-only: square)", None),
                       "vllm/_moe_C.abi3.so": (None, "native (2/2)")}


@pytest.mark.parametrize("path_env", ["/usr/bin:/bin", ""])  # with c++filt, and without it
def test_demangling_with_and_without_binutils(monkeypatch, path_env):
    from edgevllm.verify.demangle import demangle, short_name

    monkeypatch.setenv("PATH", path_env)
    names = demangle(["_Z5otherPi", "_Z5scalePff", "flash_fwd.cubin"])
    assert names == {"_Z5otherPi": "other(int*)", "_Z5scalePff": "scale(float*, float)",
                     "flash_fwd.cubin": "flash_fwd.cubin"}
    assert short_name("void cutlass::device_kernel<vllm::cutlass_3x_gemm_sm90_fp8<float>>(P)") \
        == "cutlass_3x_gemm_sm90_fp8"
    assert short_name("_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalIJiEEEEvv") == \
        "GemmUniversal"


def test_an_empty_layer_is_stacked_not_missing():
    """A step that changed nothing leaves an empty tar as its layer; the archive is complete."""
    import io
    import json

    from edgevllm.verify.readers import scan_tar_stream
    from support.fake_rootfs import tar_of

    empty = tar_of({})
    assert not any(empty)  # only zero blocks: no ustar header to recognise it by
    layers = {"blobs/sha256/a": tar_of({"etc/hostname": b"x\n"}), "blobs/sha256/e": empty}
    manifest: list[dict[str, Any]] = [{"Config": "c.json",
                                       "Layers": ["blobs/sha256/a", "blobs/sha256/e"]}]
    archive = tar_of({**layers, "manifest.json": json.dumps(manifest).encode()})
    assert scan_tar_stream(io.BytesIO(archive), "test") == []
    manifest[0]["Layers"].append("blobs/sha256/gone")
    broken = tar_of({**layers, "manifest.json": json.dumps(manifest).encode()})
    with pytest.raises(Exception, match="blobs/sha256/gone named in the image manifest is missing"):
        scan_tar_stream(io.BytesIO(broken), "test")
