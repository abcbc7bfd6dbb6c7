"""The real stack end to end: a prebuilt image of real vLLM 0.33.0 through ``edgevllm build``.

Nothing stands in for vLLM here: the closure of vllm==0.33.0 (about 200 wheels, 4.3 GB: torch,
cuBLAS, cuDNN, NCCL, FlashInfer, CuTe DSL, fastsafetensors, ...) is resolved with uv on the host,
downloaded into the content-addressed wheelhouse (cached under $EDGEVLLM_TEST_CACHE) and installed
offline by hash into a Debian trixie + Python 3.13 base made locally (NVIDIA's registry is not
reachable here). The target is spark, built for the host's platform (no emulation: linux/amd64
and the x86_64 wheels on an x86_64 host, the target's own linux/arm64 on a Spark or Thor) so CI
stays inside its budget; bench/real_image.py builds the arm64 images for spark and thor.

ONE image build per module (about 10 GB, a few minutes); every test reads it. Then: the mods on
the real cutlass-dsl / FlashInfer / fastsafetensors, verify on every CUDA library, probe level 1
importing the real packages (no GPU: `vllm --version` cannot start, imports can), FlashInfer's
JIT toolchain from the closure's nvcc wheel, publish + load of the real image, and a rebuild from
the lock that reinstalls the same hashes. The images this module made are removed at its end.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from e2e.conftest import write_spec
from support.images import in_image
from support.timeouts import COLD_FIXTURE_TIMEOUT_S

# The first test sets up the module's cold fixtures (support/timeouts.py says why and how long).
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(COLD_FIXTURE_TIMEOUT_S)]

VLLM = "0.33.0"
REPO = "edgevllm-test/real-vllm"
# The PyPI mirror here lags one pin: vllm 0.33.0 asks certifi>=2026.10.19, the newest certifi it
# carries is 2026.10.18. The override is the resolver's, recorded in the lock.
CERTIFI = "certifi>=2026.10.18"


@pytest.fixture(scope="module")
def real_env(tmp_path_factory):
    from support.downloads import test_cache_dir

    # The wheelhouse is the CLI's own cache (EDGEVLLM_CACHE), kept between CI runs.
    return {"EDGEVLLM_CACHE": str(test_cache_dir("edgevllm-cache"))}


@pytest.fixture(scope="module")
def real_build(engine, cli, real_env, tmp_path_factory):
    from support.platforms import native_platform
    from support.real_vllm import PYTHON, trixie_python_image

    base = trixie_python_image(engine)
    out = tmp_path_factory.mktemp("real-out")
    spec = write_spec(out / "spec.yaml", target="spark", platform=native_platform(), python=PYTHON,
                      apt_packages=[],            # the base has the venv module and g++
                      # PyPI's torch 2.14.0 is the cu130 build; download.pytorch.org is
                      # unreachable from here, so the closure takes torch from PyPI.
                      torch={"version": "2.14.0", "index_url": None},
                      image_repo=REPO)
    code, stdout, stderr = cli("build", "--spec", str(spec), "--vllm-wheel", VLLM,
                               "--base-image", base, "--override", CERTIFI, "--out", str(out),
                               "--json", str(out / "result.json"), env=real_env, timeout=3000)
    assert code == 0, stderr[-6000:]
    result = json.loads((out / "result.json").read_text())
    yield result, out, stderr
    for tag in result["tags"]:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)


def test_preflight_names_the_mode_and_why(real_build):
    _, _, stderr = real_build
    assert f"mode: prebuilt (--vllm-wheel {VLLM}" in stderr
    assert "override certifi>=2026.10.18" in stderr


def test_lock_pins_every_installed_wheel_by_hash(real_build, engine):
    from edgevllm.specs.lock import read_lock
    from support.platforms import native_arch, python_platform

    result, _, _ = real_build
    lock = read_lock(result["lock"])
    assert lock.mode == "prebuilt"
    assert lock.closure is not None
    assert lock.closure.python_platform == python_platform(native_arch())
    assert CERTIFI in lock.closure.overrides and "torch==2.14.0" in lock.closure.overrides
    from packaging.utils import canonicalize_name

    pinned = {canonicalize_name(w.name): w.version for w in lock.closure.wheels}
    installed = json.loads(in_image(engine, result["image"], (
        "import json, re, importlib.metadata as m\n"
        "print(json.dumps({re.sub(r'[-_.]+', '-', d.metadata['Name']).lower(): d.version\n"
        "                  for d in m.distributions()}))")))
    assert {n for n in installed if n != "pip"} == set(pinned)  # pip: the venv's own
    assert all(installed[n] == v for n, v in pinned.items())
    assert pinned[canonicalize_name("vllm")] == VLLM and len(pinned) > 150
    assert all(len(w.sha256) == 64 for w in lock.closure.wheels)


def test_mods_ran_on_the_real_packages_and_recorded_why(real_build):
    """Each spark mod read the real installed versions: the cutlass-dsl and FlashInfer mods are
    written for older releases and record that 4.8.0 / 0.7.2.post1 are outside their ranges
    (so they touch nothing); the others changed the image."""
    result, _, _ = real_build
    mods = {m["name"]: m for m in result["mods"]["mods"]}
    outcomes = {name: m["outcome"] for name, m in mods.items()}
    assert outcomes == {"spark-runtime": "applied", "cutlass-dsl-gb10": "not-applicable",
                        "flashinfer-sm121": "not-applicable", "fastsafetensors": "applied",
                        "fused-moe-configs": "applied"}, outcomes
    assert "nvidia-cutlass-dsl 4.8.0 is outside" in mods["cutlass-dsl-gb10"]["detail"]
    assert "flashinfer-python 0.7.2.post1 is outside" in mods["flashinfer-sm121"]["detail"]


def test_verify_covers_every_cuda_library(real_build):
    result, out, _ = real_build
    assert result["verify"]["passed"], result["verify"]
    report = json.loads((out / "spark" / "verify.json").read_text())
    paths = " ".join(lib["path"] for lib in report["libraries"])
    for library in ("torch/lib/libtorch_cuda.so", "libcublas", "libcudnn", "libnccl",
                    "libnvshmem", "vllm/_C_stable_libtorch", "vllm/_moe_C_stable_libtorch",
                    "_vllm_fa2_C"):
        assert library in paths, f"{library} was not scanned"
    # FlashInfer 0.7.2 ships no compiled kernels (flashinfer-cubin is not in the closure): its
    # kernels come from the JIT, which test_flashinfer_jit_toolchain_from_the_closure checks.
    assert "flashinfer" not in paths


def test_probe_imports_the_real_stack(real_build, engine):
    result, _, _ = real_build
    assert result["probe"]["passed"], result["probe"]
    text = in_image(engine, result["image"], (
        "import vllm, torch, flashinfer, cutlass, fastsafetensors\n"
        "print(vllm.__version__, torch.version.cuda, sorted(torch.cuda.get_arch_list()))"))
    version, cuda, arches = text.split(" ", 2)
    assert version == VLLM and cuda.startswith("13.") and "sm_120" in arches


def test_flashinfer_jit_toolchain_from_the_closure(real_build, engine):
    """nvcc (nvidia-cuda-nvcc wheel at /usr/local/cuda) + g++ + ninja compile a kernel for
    sm_121a, and Triton's TRITON_PTXAS_PATH (spark-runtime mod) is that ptxas."""
    result, _, _ = real_build
    text = in_image(engine, result["image"], (
        "import os, shutil, subprocess, tempfile\n"
        "d = tempfile.mkdtemp(); src = os.path.join(d, 'k.cu')\n"
        "open(src, 'w').write('__global__ void k(float* x) { x[0] = 1.0f; }')\n"
        "subprocess.run(['/usr/local/cuda/bin/nvcc', '-arch=sm_121a', '-cubin', src, '-o',\n"
        "                os.path.join(d, 'k.cubin')], check=True)\n"
        "cubin = os.path.join(d, 'k.cubin')\n"
        "print(os.path.getsize(cubin) > 0, shutil.which('ninja') is not None,\n"
        "      os.environ['TRITON_PTXAS_PATH'], os.environ['CUDA_HOME'])"))
    assert text.split() == ["True", "True", "/usr/local/cuda/bin/ptxas", "/usr/local/cuda"]


def test_no_wheel_and_no_uv_cache_in_the_image(real_build, engine):
    result, _, _ = real_build
    text = in_image(engine, result["image"], (
        "import glob, os\n"
        "found = [w for top in ('/opt', '/usr', '/root', '/tmp', '/var', '/home')\n"
        "         for w in glob.glob(top + '/**/*.whl', recursive=True)\n"
        # Debian's own pip/setuptools wheels (python3-venv's ensurepip) come with the base.
        "         if not w.startswith('/usr/share/python-wheels/')]\n"
        "print(len(found), os.path.exists('/root/.cache/uv'), os.path.exists('/wheelhouse'))"))
    assert text.split() == ["0", "False", "False"]


def test_sbom_covers_every_installed_distribution_and_the_signature_holds(real_build, cli,
                                                                         tmp_path):
    """The build wrote the SBOM beside the lock; every locked wheel is in it by its sha256, and
    inv verify-supply-chain (which fails on any installed distribution the SBOM leaves out)
    passes once the provenance is signed with a key made here."""
    from pathlib import Path

    from edgevllm.inspect.dsse import generate_key
    from edgevllm.inspect.inimage_dists import canonical
    from edgevllm.specs.lock import read_lock

    result, _, _ = real_build
    record = result["supply_chain"]
    doc = json.loads(Path(record["sbom"]).read_text())
    python = [c for c in doc["components"] if c.get("group") == "python"]
    assert len(python) == record["distributions"] > 150
    hashed = {c["name"]: c["hashes"][0]["content"] for c in python if c.get("hashes")}
    lock = read_lock(result["lock"])
    assert lock.closure is not None
    assert {canonical(w.name): w.sha256 for w in lock.closure.wheels}.items() <= hashed.items()
    key, public = generate_key(tmp_path / "signing.pem")
    where = ["--image", result["image"], "--lock", result["lock"]]
    code, _, stderr = cli("sign", *where, "--key", str(key))
    assert code == 0, stderr[-2000:]
    code, _, stderr = cli("verify-supply-chain", *where, "--key", str(public))
    assert code == 0, stderr[-2000:]


def test_publish_and_load_the_real_image(real_build, engine, cli, tmp_path):
    import shutil

    result, _, _ = real_build
    try:
        code, stdout, stderr = cli("publish", "--image", result["image"], "--out",
                                   str(tmp_path / "pub"), timeout=1800,
                                   env={"EDGEVLLM_LAYER_CACHE": str(tmp_path / "layers")})
        assert code == 0, stderr[-3000:]
        manifest = [line for line in stdout.splitlines() if line.endswith(".manifest.json")][-1]
        # The load needs only the set: the layer cache (~4 GB) goes first.
        shutil.rmtree(tmp_path / "layers")
        # The engine keeps the image under a second name while its tag goes, as a device keeps
        # the image it runs while an update loads: the set is read whole (every part's sha256,
        # the 10 GB archive decompressed and every blob hashed), and docker load gets the
        # archive without the layers the engine holds (its full road, on images whose layers it
        # lacks: tests/test_image_publish.py; a whole 10 GB docker load here would unpack 10 GB into
        # the engine's temporary folder beside the 4 GB set, more than this CI disk spares).
        keep = f"{REPO}-keep:{result['image_id'][7:19]}"
        engine.tag(result["image"], keep)
        removed = subprocess.run(["docker", "rmi", result["image"]], capture_output=True,
                                 text=True)
        assert removed.returncode == 0, removed.stderr
        assert not engine.image_exists(result["image"])
        code, stdout, stderr = cli("load", manifest, timeout=1800)
        assert code == 0, stderr[-3000:]
        layers = len(engine.image_inspect(keep)["RootFS"]["Layers"])
        assert f"{layers} of {layers} layers" in stderr and "not sent" in stderr, stderr[-3000:]
        assert result["image"] in stdout
        assert engine.image_id(result["image"]) == result["image_id"]
    finally:  # about 4 GB: gone at once, not at pytest's clean-up of old runs
        for folder in ("pub", "layers"):
            shutil.rmtree(tmp_path / folder, ignore_errors=True)
        subprocess.run(["docker", "rmi", f"{REPO}-keep:{result['image_id'][7:19]}"],
                       capture_output=True)


def test_lock_rebuild_reinstalls_the_same_hashes(real_build, cli, real_env, engine):
    from edgevllm.specs.lock import read_lock

    result, out, _ = real_build
    rebuild = out / "rebuild"
    code, stdout, stderr = cli("build", "--lock", result["lock"], "--out", str(rebuild),
                               "--image-repo", REPO + "-rebuild", "--no-verify", "--json",
                               str(rebuild / "result.json"), env=real_env, timeout=3000)
    assert code == 0, stderr[-4000:]
    again = json.loads((rebuild / "result.json").read_text())
    try:
        assert "closure: " in stderr and "from the lock (no resolve)" in stderr
        first, second = read_lock(result["lock"]), read_lock(again["lock"])
        assert first.closure is not None and second.closure is not None
        assert [(w.filename, w.sha256) for w in second.closure.wheels] == \
               [(w.filename, w.sha256) for w in first.closure.wheels]
        assert again["image"].split(":")[1] == result["image"].split(":")[1]
    finally:
        for tag in again["tags"]:
            subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)


def test_stock_kernel_policy_passes_the_release_wheel_the_default_refuses():
    """The release wheel's core extensions carry sm_120 (not sm_121a): the compile gate refuses
    them, the stock-kernel gate of prebuilt builds lets them run by family and reports FA3,
    FlashMLA & co (Hopper/Blackwell-datacenter only) without gating."""
    from edgevllm.verify.api import verify
    from edgevllm.verify.policy import STOCK_POLICY
    from support.downloads import pypi_download

    # The x86_64 release wheel as a file to read (any host): its kernels are what this checks.
    wheel = pypi_download(f"vllm=={VLLM}", ["manylinux_2_28_x86_64"], "3.13")
    strict = verify("spark", path=wheel)
    stock = verify("spark", path=wheel, policy=STOCK_POLICY)
    assert not strict.passed and "_C_stable_libtorch" in strict.summary()
    assert stock.passed, stock.summary()
    reported = {lib.report.path.rsplit("/", 1)[-1] for lib in stock.libraries if not lib.gated}
    assert {"_vllm_fa3_C.abi3.so", "_flashmla_C.abi3.so"} <= reported
