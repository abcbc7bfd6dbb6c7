"""cuobjdump agrees with the parser on every CUDA library of the real vLLM 0.33.0 aarch64 wheel
and on torch 2.14.0's relocatable-code libtorch_nvshmem.so (listed with ``-all``). Slow (several
hundred MB through cuobjdump), so end-to-end; the parsed counts are pinned in
tests/test_verify_wheels.py."""

from __future__ import annotations

import zipfile

import pytest

from edgevllm.verify import verify
from support.cuda_libs import TORCH_214, VLLM_033, cuobjdump_binary, real_wheel
from support.downloads import unpacked_wheel

pytestmark = pytest.mark.e2e


def test_cuobjdump_agrees_on_every_vllm_033_library(monkeypatch):
    monkeypatch.setenv("EDGEVLLM_CUOBJDUMP", str(cuobjdump_binary()))
    verdict = verify("spark", path=unpacked_wheel(real_wheel(VLLM_033)), cuobjdump=True)
    assert verdict.cuobjdump_checked, verdict.summary()
    assert [lib.note for lib in verdict.libraries if lib.note] == []
    assert sum(1 for lib in verdict.libraries if lib.report.has_device_code) == 9
    assert "cuobjdump agrees" in verdict.summary()


def test_cuobjdump_agrees_on_torch_nvshmem_relocatable_code(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEVLLM_CUOBJDUMP", str(cuobjdump_binary()))
    library = tmp_path / "torch" / "lib" / "libtorch_nvshmem.so"
    library.parent.mkdir(parents=True)
    with zipfile.ZipFile(real_wheel(TORCH_214)) as archive:
        library.write_bytes(archive.read("torch/lib/libtorch_nvshmem.so"))
    verdict = verify("thor", path=tmp_path, cuobjdump=True)
    (lib,) = verdict.libraries
    assert any(e.section == "__nv_relfatbin" for e in lib.report.entries)
    assert verdict.cuobjdump_checked and not lib.note
