"""The build's tail on a rebuild that changed one mod (issue 34), on a small image.

A prebuilt image of the stand-in vLLM wheel (tests/support/standin_wheels.py) that carries a real
nvcc-built sm_121a library as ``torch/lib/libtorch_cuda.so`` (one the gate judges; outside
``vllm/``, whose every library the probe loads: this one needs the CUDA runtime) and a plain
host library in ``vllm/``, built natively for spark with one mod of this test's own (a file it
installs), then built again with that file changed. What it checks: the second build's verify
reads only the layers the change made (the mods layer and those above it) and takes every other
layer from the verify cache; its verdict is the one a full scan (verify cache off) states of the
same image, bit for bit; the build summary's ``tail`` records each step's seconds and which
layers were read. No timing is asserted (bench/build_tail.py times it).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from support.files_mod import write_files_mod

pytestmark = pytest.mark.e2e

NEVER = "sys_platform == 'edgevllm-never'"
MOD = "tail-test-mod"


def write_mod(root, text: str):
    """A files-only mod under ``root`` (EDGEVLLM_MODS_PATH): one data file it installs."""
    write_files_mod(root, MOD, text, "/opt/edgevllm/tail-test", "the build tail test's mod")


@pytest.fixture()
def spec(engine, tmp_path):
    from support.cuda_libs import nvcc_libs
    from support.images import python_image
    from support.platforms import native_arch, native_platform
    from support.standin_wheels import host_library, standin_vllm_wheel

    library = nvcc_libs()["sm_121a"].read_bytes()
    wheel = standin_vllm_wheel(tmp_path, {"torch/lib/libtorch_cuda.so": library,
                                          "vllm/libstandin_host.so": host_library(tmp_path)})
    base = python_image(engine, native_arch())
    return {
        "target": "spark", "platform": native_platform(), "python": "python3.11",
        "images": {"build": base, "runtime": base}, "bytecode_image": base,
        "apt_packages": [], "mods": [MOD], "vllm_wheel": str(wheel),
        "torch": {"version": None, "index_url": None},
        "overrides": [f"torch ; {NEVER}"],  # the stand-in wheel carries the torch it imports
        "packages": {"flashinfer-python": None, "nvidia-cutlass-dsl": None},
        "image_repo": "edgevllm-test/e2e-tail", "probe_required": ["vllm"],
    }


def test_a_one_mod_rebuild_reads_only_its_new_layers_with_a_full_scans_verdict(
        spec, engine, tmp_path, monkeypatch):
    from edgevllm.builder.pipeline import build
    from edgevllm.specs.buildspec import spec_from_dict
    from edgevllm.verify.api import verify
    from edgevllm.verify.policy import mode_policy

    monkeypatch.setenv("EDGEVLLM_VERIFY_CACHE", str(tmp_path / "verify-cache"))
    monkeypatch.setenv("EDGEVLLM_MODS_PATH", str(tmp_path / "mods"))
    write_mod(tmp_path / "mods", "first\n")
    tags = []
    try:
        first = build(spec_from_dict(spec), tmp_path / "out", engine)
        tags += first.tags
        write_mod(tmp_path / "mods", "second\n")
        second = build(spec_from_dict(spec), tmp_path / "out", engine)
        tags += second.tags
        before = engine.image_inspect(first.image)["RootFS"]["Layers"]
        after = engine.image_inspect(second.image)["RootFS"]["Layers"]
        new = [layer for layer in after if layer not in before]
        assert new and len(new) < len(after) and after[:len(after) - len(new)] == \
            before[:len(after) - len(new)], (before, after)
        assert first.tail is not None and second.tail is not None
        reading = second.tail["verify_layers"]
        assert sorted(reading["read"]) == sorted(set(new)), reading
        assert set(reading["cached"]) == set(after) - set(new)
        assert set(reading["read"].values()) <= {"layer store", "docker save"}
        assert {"verify", "probe", "labels", "sbom", "total"} <= set(second.tail["seconds"])
        # The same verdict as a full scan: every layer read again, the cache off.
        # The build judged the candidate (``<tag>-unverified``), the full scan the final tag.
        built = json.loads((tmp_path / "out" / "spark" / "verify.json").read_text()
                           .replace(f"{second.image}-unverified", second.image))
        monkeypatch.setenv("EDGEVLLM_VERIFY_CACHE_MAX", "0")
        full = verify("spark", image=second.image, engine=engine,
                      json_out=tmp_path / "full.json", policy=mode_policy("prebuilt"))
        assert full.reading is not None and len(full.reading.read) == len(set(after))
        fresh = json.loads((tmp_path / "full.json").read_text())
        assert built == fresh
        kernels = "torch/lib/libtorch_cuda.so"
        assert built["passed"] and any(lib["path"].endswith(kernels)
                                       for lib in built["libraries"])
    finally:
        for tag in tags:
            subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)

