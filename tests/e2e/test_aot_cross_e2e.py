"""FlashInfer's AOT modules cross-compiled on this x86_64 host for a linux/arm64 Spark (12.1a),
then loaded by FlashInfer's own load path in a linux/arm64 container (qemu).

What it exercises: the AOT step's in-image script (``builder/aot_inimage.py``) as a build stage
on the builder's platform would run it: the x86_64 build Python with FlashInfer 0.7.2.post1 and
the x86_64 torch 2.14.0, FlashInfer's own JIT (``build_jit_specs``) for the modules vLLM 0.33.0
asks for the shipped tiny Llama config (tests/fixtures/model-configs/tiny-llama.json: the FA2
batch-prefill module and the sampler), with the cross road's values (``builder/render.py``
``cross_values`` for spark: ``CXX`` the aarch64 g++, ``NVCC_PREPEND_FLAGS`` ``-ccbin ...
-target-dir sbsa-linux``), the target's CUDA folder laid out by ``builder/cross_inimage.py`` from
the target's aarch64 CUDA wheels, mounted as the closure's venv is (``--target-lib``). Checks:
each module is an aarch64 ELF, the record says so, verify finds sm_121a SASS (and nothing else)
in each; a linux/arm64 container with FLASHINFER_DISABLE_JIT=1, no nvcc and no ninja loads them
through ``prefill.get_batch_prefill_module`` and ``sampling.get_sampling_module``, as
tests/e2e/test_aot_e2e.py does for the in-image road.

What stands in: no GPU and no driver here: the road's ``libcuda.so`` stub (every driver function
of cuda.h, from cross_inimage.py) stands in for libcuda.so.1. The build base is the cross CUDA
base of the compile road's tests (support/images.cross_cuda_image: Debian trixie, its aarch64
g++ 14, NVIDIA's x86_64 nvcc 13.0); the build Python's venv and the target's aarch64 torch and
CUDA wheels are the caches tests/e2e/test_cross_real_tree_e2e.py makes (same keys), FlashInfer and
tvm-ffi with the few packages ``import flashinfer`` needs beyond torch come from PyPI, one set
per platform, cached. The modules are copied into the container's FlashInfer AOT folder by a
bind mount, where ``inv build`` would COPY them.

Not exercised: ``inv build --aot`` for a linux/arm64 image on this host, which still runs the AOT
step in the image under qemu (docs/build-modes.md); a real arm64 vLLM closure and an x86_64 torch
for a build stage do not fit this machine's disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# The cross road's two sides: their lists are the test cache's keys, owned by support.cross_real.
from support.cross_real import BUILD_REQUIREMENTS, PYTHON, TARGET_REQUIREMENTS, TORCH

pytestmark = pytest.mark.e2e

# FlashInfer, tvm-ffi and what ``import flashinfer`` needs beyond torch (its __init__ imports
# every op module), without dependencies: torch comes from the sets above.
FLASHINFER = ["flashinfer-python==0.7.2.post1", "apache-tvm-ffi==0.1.11", "numpy", "einops",
              "click", "tqdm", "tabulate", "nvidia-ml-py", "requests", "charset-normalizer",
              "idna", "urllib3", "certifi", "packaging"]
TINY = Path(__file__).resolve().parents[1] / "fixtures" / "model-configs" / "tiny-llama.json"
TARGET = "/opt/edgevllm-target"
AARCH64 = "aarch64"
GLIBC = (17, 24, 27, 28)


def flashinfer_site(arch: str) -> Path:
    """FLASHINFER for linux/<arch> installed into a folder (pip --target, cached), with the
    empty ``flashinfer/data/aot`` folder the load mounts the modules over."""
    from support.downloads import file_lock, test_cache_dir

    key = hashlib.sha256("|".join([arch, PYTHON, *FLASHINFER]).encode()).hexdigest()[:12]
    root = test_cache_dir("aot-cross")
    final = root / f"flashinfer-{arch}-cp{PYTHON.replace('.', '')}-{key}"
    with file_lock(root / f".{final.name}.lock"):
        if final.is_dir():
            return final
        partial = final.with_name(final.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        machine = {"amd64": "x86_64", "arm64": "aarch64"}[arch]
        tags = [f"manylinux_2_{g}_{machine}" for g in GLIBC] + [f"manylinux2014_{machine}"]
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--only-binary=:all:",
             "--target", str(partial), "--python-version", PYTHON, "--implementation", "cp",
             *[arg for tag in tags for arg in ("--platform", tag)], *FLASHINFER],
            capture_output=True, text=True)
        if proc.returncode != 0:
            raise AssertionError(f"pip install --target of {FLASHINFER} for {arch} failed: "
                                 f"{proc.stderr.strip()[-1500:]}; check access to PyPI")
        (partial / "flashinfer" / "data" / "aot").mkdir()
        os.replace(partial, final)
    return final


@pytest.fixture(scope="module")
def sides(engine, tmp_path_factory):
    """(the build Python's venv, made in the first step, the wheels it is made from, the
    target's venv for linux/arm64), as test_cross_real_tree_e2e.py makes them; removed when the
    module ends."""
    from support.cross_real import unpacked_site, wheel_set
    from support.images import cross_cuda_image

    cross_cuda_image(engine)
    venv, target = tmp_path_factory.mktemp("build-venv"), tmp_path_factory.mktemp("target-venv")
    try:
        yield (venv, wheel_set("amd64", [TORCH, *BUILD_REQUIREMENTS], PYTHON),
               unpacked_site("arm64", TARGET_REQUIREMENTS, PYTHON, target))
    finally:
        for folder in (venv, target):
            subprocess.run(["rm", "-rf", str(folder)], check=False)


def cross_script(values: dict, arch_list: str) -> str:
    """The AOT stage on the build platform: the build Python (made once, as the cross real-tree
    test makes it), the target's CUDA folder (cross_inimage.py), then the AOT step with the
    road's compilers."""
    cuda_target = f"/usr/local/cuda/targets/{values['target_dir']}/lib"
    aliases = " ".join(f"--alias {a}" for a in values["aliases"])
    return "\n".join([
        "set -e",
        "if [ ! -e /opt/venv/.complete ]; then rm -rf /opt/venv/* /opt/venv/.[!.]* || true; "
        "python3 -m venv --system-site-packages /opt/venv; /opt/venv/bin/pip install -q "
        f"--no-index --find-links /build-wheels '{TORCH}' "
        + " ".join(f"'{r}'" for r in BUILD_REQUIREMENTS) + "; touch /opt/venv/.complete; fi",
        ". /opt/venv/bin/activate",
        "export PYTHONPATH=/flashinfer",
        f"python3 /aot/cross_inimage.py --compiler {values['host_compiler']} --triple "
        f"{values['triple']} --min-gcc {values['min_gcc']} --target-dir {values['target_dir']} "
        f"{aliases} --target-venv {TARGET}",
        f"export CXX={values['host_compiler']} NVCC_PREPEND_FLAGS=\"{values['nvcc_flags']}\" "
        f"FLASHINFER_CUDA_ARCH_LIST={arch_list} MAX_JOBS=2",
        "nice python3 /aot/aot_inimage.py --plan /aot/plan.json --record /work/aot.json "
        f"--out /work/aot --target-lib {cuda_target}",
        "mkdir -p /work/stub",
        f"cp -L {cuda_target}/stubs/libcuda.so /work/stub/libcuda.so.1",
    ])


@pytest.fixture(scope="module")
def cross_aot(engine, sides, tmp_path_factory):
    from edgevllm.builder.aot import stage_aot
    from edgevllm.builder.cross import stage_cross
    from edgevllm.builder.render import cross_values
    from edgevllm.containers.docker import RunOptions
    from edgevllm.specs.buildspec import Builder, load_spec, resolve
    from support.images import cross_cuda_image
    from support.platforms import native_arch

    assert native_arch() == "amd64", "the cross road starts from an x86_64 builder"
    eff = resolve(load_spec("spark", overrides={"mode": "compile", "python": f"python{PYTHON}"}),
                  builder=Builder("amd64"))
    values = cross_values(eff)
    assert values is not None and eff.cross is not None
    staged = tmp_path_factory.mktemp("aot-context")
    stage_cross(eff.cross, staged)      # cross_inimage.py, as the edgevllm-cross context has it
    names = stage_aot(str(TINY), staged)  # aot_inimage.py and plan.json (edgevllm-aot)
    work = tmp_path_factory.mktemp("aot-work")
    (work / "run.sh").write_text(cross_script(values, eff.target.flashinfer_cuda_arch_list))
    venv, wheels, target_venv = sides
    proc = engine.run(RunOptions(
        image=cross_cuda_image(engine), remove=True, network="none",
        command=["bash", "/work/run.sh"],
        volumes=[f"{venv}:/opt/venv", f"{wheels}:/build-wheels:ro",
                 f"{flashinfer_site('amd64')}:/flashinfer:ro", f"{target_venv}:{TARGET}:ro",
                 f"{staged}:/aot:ro", f"{work}:/work"]), timeout=3600)
    assert proc.returncode == 0, proc.stdout.decode()[-4000:] + proc.stderr.decode()[-4000:]
    record = json.loads((work / "aot.json").read_text())
    print(f"aot cross: {len(record['modules'])} module(s) for {record['arch_list']} in "
          f"{record['seconds']}s: " + ", ".join(f"{m['name'][:24]}… {m['bytes']} bytes"
                                                for m in record["modules"]))
    return names, record, work, proc.stdout.decode()


def test_each_module_is_an_aarch64_library_with_sm_121a_code(cross_aot):
    from edgevllm.verify.api import scan_path

    names, record, work, log = cross_aot
    assert [m["name"] for m in record["modules"]] == names
    assert record["arch_list"] == "12.1a" and record["flashinfer"] == "0.7.2.post1"
    assert record["toolchain"]["cross"]["cxx"] == "aarch64-linux-gnu-g++"
    assert f"edgevllm aot: 2 module(s) for 12.1a in {record['seconds']}s" in log
    for module in record["modules"]:
        path = work / "aot" / module["name"] / f"{module['name']}.so"
        head = path.read_bytes()[:20]
        assert head[:4] == b"\x7fELF" and int.from_bytes(head[18:20], "little") == 183, path
        assert module["machine"] == AARCH64 and module["bytes"] == path.stat().st_size
        assert module["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        [report] = scan_path(path)
        assert report.arches("sass") == ["sm_121a"], (module["name"], report.arches("sass"))
        dynamic = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True,
                                 check=True).stdout
        assert "[libcudart.so.13]" in dynamic, dynamic   # the target's, from its folder


LOAD = """
import json, os, shutil
import torch
from flashinfer.jit import env
from flashinfer.prefill import get_batch_prefill_module
from flashinfer.sampling import get_sampling_module
prefill = get_batch_prefill_module("fa2", torch.bfloat16, torch.bfloat16, torch.bfloat16,
                                   torch.int32, 64, 64, 0, False, False, False)
sampling = get_sampling_module()
jit_cache = [f for _, _, files in os.walk(env.FLASHINFER_CACHE_DIR) for f in files
             if f.endswith(".so")]
print(json.dumps({"tools": [shutil.which(n) for n in ("nvcc", "ninja")],
                  "prefill": [callable(prefill.plan), callable(prefill.paged_run),
                              callable(prefill.ragged_run)],
                  "sampling": callable(sampling.top_k_top_p_sampling_from_probs),
                  "jit_cache": jit_cache, "aot": sorted(os.listdir(env.FLASHINFER_AOT_DIR))}))
"""


def test_a_linux_arm64_container_loads_them_without_the_jit(cross_aot, sides, engine):
    from edgevllm.containers.docker import RunOptions
    from edgevllm.specs.targets import load_target
    from support.images import cross_runtime_image
    from support.platforms import require_runnable

    require_runnable("arm64")
    names, _, work, _ = cross_aot
    site = f"{TARGET}/lib/python{PYTHON}/site-packages"
    proc = engine.run(RunOptions(
        image=cross_runtime_image(engine), remove=True, network="none", platform="linux/arm64",
        command=["python3", "-c", LOAD],
        # the image's ENV: the target's runtime env (FLASHINFER_CUDA_ARCH_LIST among it)
        env={**load_target("spark").runtime_env, "PYTHONPATH": f"/flashinfer:{site}",
             "LD_LIBRARY_PATH": "/stub", "FLASHINFER_DISABLE_JIT": "1"},
        volumes=[f"{sides[2]}:{TARGET}:ro", f"{flashinfer_site('arm64')}:/flashinfer:ro",
                 f"{work / 'aot'}:/flashinfer/flashinfer/data/aot:ro",
                 f"{work / 'stub'}:/stub:ro"]), timeout=1800)
    assert proc.returncode == 0, proc.stderr.decode()[-4000:]
    found = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    assert found["tools"] == [None, None]
    assert found["prefill"] == [True, True, True] and found["sampling"] is True
    assert found["jit_cache"] == [] and found["aot"] == sorted(names)
