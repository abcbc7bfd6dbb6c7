"""``inv build --aot`` end to end on the real vLLM 0.33.0 prebuilt image for spark (the host's
platform, built as tests/e2e/test_real_vllm_e2e.py builds it, from the same cached closure).

The AOT step runs FlashInfer 0.7.2's own JIT inside the image build, with the closure's nvcc
(nvidia-cuda-nvcc wheel), g++ and ninja and no GPU, for the modules vLLM asks for the shipped tiny
Llama config (tests/fixtures/model-configs/tiny-llama.json, head_dim 64): the FA2 batch-prefill
module and the sampler. Then:

- the build summary and the image label record each module (bytes, sha256) and verify finds
  sm_121a code in each library;
- a fresh container (no network) with nvcc's folder and every ninja hidden (empty mounts over
  them) and FLASHINFER_DISABLE_JIT=1 loads them through FlashInfer's own load path
  (``prefill.get_batch_prefill_module``, what vLLM's wrappers call, and
  ``sampling.get_sampling_module``): FlashInfer takes its AOT modules and compiles nothing.

What stands in: no GPU and no driver here. Loading a module needs no GPU, but each one asks for
the driver library (libcuda.so.1, as every FlashInfer module does); the container gets a stand-in
libcuda.so.1 built in the image's own build step (``inimage_build.link_stub``), mounted over
nothing the image holds. The image is removed at the end of the module.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from e2e.conftest import write_spec

pytestmark = pytest.mark.e2e

VLLM = "0.33.0"
REPO = "edgevllm-test/warm26-warm"
CERTIFI = "certifi>=2026.10.18"   # as test_real_vllm_e2e: the PyPI mirror lags one pin
TINY = Path(__file__).resolve().parents[1] / "fixtures" / "model-configs" / "tiny-llama.json"
SITE = "/opt/venv/lib/python3.13/site-packages"
AOT = SITE + "/flashinfer/data/aot"


@pytest.fixture(scope="module")
def warm_build(engine, cli, tmp_path_factory):
    from support.downloads import test_cache_dir
    from support.platforms import native_platform
    from support.real_vllm import PYTHON, trixie_python_image

    base = trixie_python_image(engine)
    out = tmp_path_factory.mktemp("warm-out")
    spec = write_spec(out / "spec.yaml", target="spark", platform=native_platform(), python=PYTHON,
                      apt_packages=[], torch={"version": "2.14.0", "index_url": None},
                      image_repo=REPO)
    code, _, stderr = cli("build", "--spec", str(spec), "--vllm-wheel", VLLM,
                          "--base-image", base, "--override", CERTIFI, "--aot", str(TINY),
                          "--out", str(out), "--json", str(out / "result.json"),
                          env={"EDGEVLLM_CACHE": str(test_cache_dir("edgevllm-cache"))},
                          timeout=5400)
    assert code == 0, stderr[-6000:]
    result = json.loads((out / "result.json").read_text())
    yield result, out, stderr
    for tag in result["tags"]:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)


def test_the_build_records_each_module(warm_build, engine):
    from edgevllm.builder.aot.modules import modules_for_file

    result, _, stderr = warm_build
    warm = result["aot"]
    assert [m["name"] for m in warm["modules"]] == modules_for_file(TINY)
    assert warm["arch_list"] == "12.1a" and warm["config"] == "tiny-llama.json"
    assert all(m["bytes"] > 100_000 and len(m["sha256"]) == 64 for m in warm["modules"])
    assert f"flashinfer aot: 2 module(s) for 12.1a in {warm['seconds']}s" in stderr
    label = engine.image_labels(result["image"])["io.edgevllm.aot"]
    assert json.loads(label) == warm


def test_verify_finds_sm_121a_code_in_each_module(warm_build):
    result, out, _ = warm_build
    report = json.loads((out / "spark" / "verify.json").read_text())
    scanned = {lib["path"]: lib for lib in report["libraries"]}
    for module in result["aot"]["modules"]:
        path = f"{AOT}/{module['name']}/{module['name']}.so".lstrip("/")
        found = [lib for p, lib in scanned.items() if p.lstrip("/").endswith(path)]
        assert found, f"{path} not scanned: {sorted(scanned)[:5]}"
        assert found[0]["sass"] == ["sm_121a"] and found[0]["level"] == "native", found[0]


LOAD = """
import hashlib, json, os, shutil
hidden = {name: shutil.which(name) for name in ("nvcc", "ninja")}
hidden["/usr/local/cuda/bin/nvcc"] = os.path.exists("/usr/local/cuda/bin/nvcc")
import torch
from flashinfer.jit import env
from flashinfer.prefill import get_batch_prefill_module
from flashinfer.sampling import get_sampling_module
prefill = get_batch_prefill_module("fa2", torch.bfloat16, torch.bfloat16, torch.bfloat16,
                                   torch.int32, 64, 64, 0, False, False, False)
sampling = get_sampling_module()
jit_cache = [f for _, _, files in os.walk(env.FLASHINFER_CACHE_DIR) for f in files
             if f.endswith(".so")]
print(json.dumps({"hidden": hidden, "prefill": [callable(prefill.plan),
                  callable(prefill.paged_run), callable(prefill.ragged_run)],
                  "sampling": callable(sampling.top_k_top_p_sampling_from_probs),
                  "jit_cache": jit_cache, "aot": sorted(os.listdir(env.FLASHINFER_AOT_DIR))}))
"""


def test_a_fresh_container_loads_them_without_nvcc_or_ninja(warm_build, engine, tmp_path):
    from edgevllm.containers.options import RunOptions
    from support.platforms import multiarch_libdir, native_arch

    result, _, _ = warm_build
    stub = _driver_stand_in(engine, result["image"], tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    hide = [f"{empty}:{SITE}/nvidia/cu13/bin:ro", f"{empty}:{SITE}/ninja/data/bin:ro",
            f"{tmp_path / 'not-ninja'}:/opt/venv/bin/ninja:ro",
            f"{stub}:{multiarch_libdir(native_arch())}/libcuda.so.1:ro"]
    (tmp_path / "not-ninja").write_text("")  # an empty file, not executable: no ninja to run
    proc = engine.run(RunOptions(image=result["image"], remove=True, network="none",
                                 volumes=hide, env={"FLASHINFER_DISABLE_JIT": "1"},
                                 command=["python3", "-c", LOAD]), timeout=600)
    assert proc.returncode == 0, proc.stderr.decode()[-4000:]
    found = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    assert found["hidden"] == {"nvcc": None, "ninja": None, "/usr/local/cuda/bin/nvcc": False}
    assert found["prefill"] == [True, True, True] and found["sampling"] is True
    assert found["jit_cache"] == []  # nothing was compiled into FlashInfer's JIT cache
    assert found["aot"] == sorted(m["name"] for m in result["aot"]["modules"])


def _driver_stand_in(engine, image: str, tmp_path: Path) -> Path:
    """libcuda.so.1 standing in for the driver (no GPU here): an empty library with the driver's
    soname, built by the image's own C compiler, copied out."""
    from edgevllm.containers.options import RunOptions

    out = tmp_path / "driver"
    out.mkdir()
    proc = engine.run(RunOptions(
        image=image, remove=True, network="none", volumes=[f"{out}:/out"],
        entrypoint="bash", command=["-c", "echo '/* stand-in */' > /tmp/s.c && cc -shared "
                                    "-fPIC -Wl,-soname,libcuda.so.1 /tmp/s.c -o /out/libcuda.so.1"
                                    ]), timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    return out / "libcuda.so.1"
