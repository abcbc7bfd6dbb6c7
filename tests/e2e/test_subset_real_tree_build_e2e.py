"""``edgevllm build --target spark --compile --extensions cumem_allocator,spinloop,fs_io_C,
_moe_C_stable_libtorch --aot tiny-llama.json`` and ``edgevllm build --target thor --compile
--extensions _moe_C_stable_libtorch`` of the real vLLM 0.33.0 tree on the cross road, through the
real CLI: the tree's own setup.py and CMake on this x86_64 host for linux/arm64, sm_121a (spark)
and sm_110a (thor), no emulation of the compile. ``_moe_C_stable_libtorch`` is vLLM's smallest
extension of CUDA kernels that builds from what PyPI gives (28 units: the plan's 10 sources and
the Marlin MoE kernels its configure generates); the others need sources from GitHub.

The tree is PyPI's 0.33.0 sdist as a git upstream (tag v0.33.0), as test_cross_real_tree_e2e.py
makes it. One file differs from the sdist: ``requirements/cuda.txt`` names torch and FlashInfer
only, so the runtime closure is torch 2.14.0, FlashInfer 0.7.2.post1 and what they bring
(aarch64, installed under qemu) instead of vLLM's 200 wheels (4.3 GB more, and half an hour of
qemu); the CMakeLists and setup.py are the release's. The build requirements are the tree's own
(x86_64, with torch 2.14.0 for the build Python), from the same wheelhouse as the real-vLLM tests
(``EDGEVLLM_CACHE``).

The subset is the build's own mechanism (builder/subset/plan.py): setup.py builds every extension's
CMake target in one ``cmake --build``; the ``cmake`` first on PATH in the compile step keeps the
chosen targets (and triton_kernels, whose build runs no command) and skips the other installs.

What stands in: the CMake dependencies vLLM pins, which this machine cannot fetch (GitHub is out
of reach), given with ``--cmake-dep NAME=FOLDER``: support/cross_real.cmake_dep_dirs makes them
(CUTLASS 4.2.0's headers from PyPI for v4.7.1; empty files at the paths the tree's CMake names for
the others; each folder holds an EDGEVLLM-STANDIN note). The configure reads them; the chosen
extensions compile none of their code. Off the device the driver library is missing:
``cumem_allocator`` links ``libcuda.so.1``, so where the extensions are loaded here the road's
stub (``inimage_stage.driver_stub``: every driver function of cuda.h, answering
CUDA_ERROR_STUB_LIBRARY) stands in for it; probe level 1 itself reports it as "needs the GPU
driver (expected off-device)".

With ``--aot`` (the shipped tiny Llama config: the FA2 batch-prefill module and the sampler) the
AOT step takes the cross road too (builder/aot/plan.py ``cross_aot``): FlashInfer's JIT in the
``aot-build`` stage on this x86_64 host (the build Python's FlashInfer from the ``aot-tools``
context), the modules copied into the image's ``flashinfer/data/aot``.

The compile is cached unit by unit (ccache, in the cross base with Debian's ccache): in
BuildKit's cache mount, and in a redis-server whose data stays in the test cache
(``--compile-cache``; support/redis_server.kept_redis_server), so a run after BuildKit's cache
was emptied takes the units from there instead of compiling them again (about 10 minutes per
target on two cores the first time).

Checks, for each target: the build passes its own checks (verify, probe level 1); every ELF in
the wheel is aarch64, the wheel's tag the road's; the wheel holds exactly the extensions asked
for; unit by unit, every unit of ``_moe_C_stable_libtorch`` has SASS for the target's arch only
or is one the kernel plan builds as ``8.0+PTX`` (the Marlin MoE kernels: they JIT at first
start), as many native units as the plan has sources for the arch, and verify agrees; the lock
names the subset, the toolchain, the plan and the stand-ins; the image's label says partial; the
linux/arm64 image (qemu) loads the extensions as probe level 1 loads a wheel's. The AOT modules: the
preflight names the cross road, the summary and label give each module as aarch64 with its
sha256, each module in the image is an aarch64 ELF with sm_121a SASS only (verify's scan), and
the linux/arm64 image loads both through FlashInfer's own load path with FLASHINFER_DISABLE_JIT=1
(nothing compiled, the JIT cache empty). Images it made are removed at the end.
"""
# Named to run after tests/e2e/test_real_vllm_e2e.py: the suite's order keeps that module's warm
# real-closure entry in BuildKit's bounded cache (.ci/run) before this module's cold ~11 GB build.


from __future__ import annotations

import json
import re
import shutil
import zipfile
from pathlib import Path

import pytest

from e2e.conftest import write_spec
from e2e.test_cross_build_e2e import step_ran_or_cached
from support.timeouts import COLD_FIXTURE_TIMEOUT_S

# The first test sets up the module's cold fixtures (support/timeouts.py says why and how long).
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(COLD_FIXTURE_TIMEOUT_S)]

VLLM = "0.33.0"
PYTHON = "3.13"
EXTENSIONS = {"spark": ["cumem_allocator", "spinloop", "fs_io_C", "_moe_C_stable_libtorch"],
              "thor": ["_moe_C_stable_libtorch"]}
KERNELS = "_moe_C_stable_libtorch"
SASS = {"spark": "sm_121a", "thor": "sm_110a"}
REPO = "edgevllm-test/e2e-cross-real-subset"
AARCH64 = 183   # ELF e_machine
FLASHINFER = "0.7.2.post1"   # the spark target's pin
TINY = Path(__file__).resolve().parents[1] / "fixtures" / "model-configs" / "tiny-llama.json"


@pytest.fixture(scope="module")
def tree_upstream(tmp_path_factory):
    """(the upstream holding the sdist as tag v0.33.0, the unpacked tree)."""
    from support.sdists import narrowed_release_upstream

    return narrowed_release_upstream(tmp_path_factory.mktemp("vllm-upstream"), VLLM, FLASHINFER)


@pytest.fixture(scope="module")
def standins(tree_upstream, tmp_path_factory):
    """NAME -> folder for every CMake dependency of the tree (support/cross_real)."""
    from edgevllm.sources.plan import plan_for_target
    from edgevllm.specs.targets import load_target
    from support.cross_real import cmake_dep_dirs

    _, tree = tree_upstream
    plan = plan_for_target(tree, load_target("spark"), torch_version="2.14.0", check=False)
    root, origins = cmake_dep_dirs(plan.deps, tmp_path_factory.mktemp("deps") / "pins", tree)
    print("\n".join(f"cmake dep {name}: {origin}" for name, origin in sorted(origins.items())))
    return {dep.name: root / dep.name for dep in plan.deps}


@pytest.fixture(scope="module")
def compile_cache(engine):
    """ccache's remote storage for both builds, kept in the test cache between runs."""
    from support.downloads import test_cache_dir
    from support.redis_server import kept_redis_server

    with kept_redis_server(engine, test_cache_dir("compile-cache", "cross-subset")) as url:
        yield url


def build_subset(engine, cli, tree_upstream, standins, out: Path, target: str, *extra: str,
                 compile_cache: str):
    """(the build's JSON summary with its wheels, its output) of one target's subset."""
    from support.downloads import test_cache_dir
    from support.images import cross_ccache_image, cross_runtime_image
    from support.platforms import native_arch, require_runnable

    assert native_arch() == "amd64", "the cross road starts from an x86_64 builder"
    require_runnable("arm64")
    build_image, runtime_image = cross_ccache_image(engine), cross_runtime_image(engine)
    upstream, _ = tree_upstream
    spec = write_spec(out / "spec.yaml", target=target, platform="linux/arm64",
                      vllm={"repo": upstream.url, "ref": f"v{VLLM}"},
                      images={"build": build_image, "runtime": runtime_image},
                      bytecode_image=build_image, python=f"python{PYTHON}", apt_packages=[],
                      torch={"version": "2.14.0", "index_url": None},   # PyPI's cu130 build
                      packages={"nvidia-cutlass-dsl": None},
                      mods=[], max_jobs=2, image_repo=REPO,
                      # vLLM's own Python dependencies are not in the narrowed closure, so
                      # `import vllm` cannot pass; probe level 1 still loads every library of
                      # the wheel (a failed load fails it), and torch must import.
                      probe_required=["torch"])
    deps = [arg for name, folder in sorted(standins.items())
            for arg in ("--cmake-dep", f"{name}={folder}")]
    code, stdout, stderr = cli(
        "build", "--spec", str(spec), "--compile", "--extensions",
        ",".join(EXTENSIONS[target]), *extra, *deps, "--compile-cache", compile_cache,
        "--out", str(out), "--json", str(out / "result.json"),
        env={"EDGEVLLM_CACHE": str(test_cache_dir("edgevllm-cache"))}, timeout=5400)
    assert code == 0, stdout[-6000:] + stderr[-4000:]
    result = json.loads((out / "result.json").read_text())
    result["wheels"] = sorted((out / target / "wheels").glob("*/vllm-*.whl"))
    return result, stdout + stderr


@pytest.fixture(scope="module")
def subset_builds(engine, cli, tree_upstream, standins, compile_cache, tmp_path_factory):
    """target -> (JSON summary, output): spark's with --aot, thor's."""
    try:
        yield {
            "spark": build_subset(engine, cli, tree_upstream, standins,
                                  tmp_path_factory.mktemp("subset-spark"), "spark", "--aot",
                                  str(TINY), compile_cache=compile_cache),
            "thor": build_subset(engine, cli, tree_upstream, standins,
                                 tmp_path_factory.mktemp("subset-thor"), "thor",
                                 compile_cache=compile_cache)}
    finally:   # this module's images, the final tags and a failed check's -unverified one
        listed = engine.run_cli(["images", "--format", "{{.Repository}}:{{.Tag}}", REPO])
        for tag in listed.stdout.decode().split():
            engine.remove_image(tag)


@pytest.fixture(scope="module")
def subset_build(subset_builds):
    return subset_builds["spark"]


def library_of(wheel: Path, name: str, dest: Path) -> Path:
    """One extension library of the wheel, written under ``dest``/vllm/."""
    with zipfile.ZipFile(wheel) as zf:
        (member,) = [n for n in zf.namelist() if Path(n).name.split(".")[0] == name]
        path = dest / "vllm" / Path(member).name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(zf.read(member))
    return path


def driver_stub(engine, tmp_path: Path) -> Path:
    """A folder with the road's libcuda.so.1 stand-in (``inimage_stage.driver_stub``, built with
    the cross compiler in the cross base): the driver the extensions and modules ask for."""
    from edgevllm.containers.docker import RunOptions
    from support.images import cross_cuda_image

    here = Path(__file__).resolve().parents[2] / "edgevllm"
    stub = tmp_path / "stub"
    stub.mkdir()
    made = engine.run(RunOptions(
        image=cross_cuda_image(engine), remove=True,
        command=["python3", "-c", "import sys; from pathlib import Path; sys.path.insert(0, "
                 "'/b'); from inimage_stage import driver_stub; driver_stub(Path('/out'), "
                 "'aarch64-linux-gnu-g++', Path('/usr/local/cuda/include'))"],
        volumes=[f"{here / 'builder' / 'cross'}:/b:ro", f"{stub}:/out"]), timeout=600)
    assert made.returncode == 0, made.stderr.decode()[-2000:]
    shutil.copyfile(stub / "stubs" / "libcuda.so", stub / "libcuda.so.1")
    return stub


def elf_machine(data: bytes) -> int:
    assert data[:4] == b"\x7fELF"
    return int.from_bytes(data[18:20], "little")


TARGETS = pytest.mark.parametrize("target", ["spark", "thor"])


@TARGETS
def test_preflight_names_the_partial_build_and_the_checks_pass(subset_builds, target):
    result, output = subset_builds[target]
    asked = EXTENSIONS[target]
    assert f"a partial kernel build: {len(asked)} of " in output and "cannot serve" in output
    assert "toolchain: cross" in output
    # the compile step's own lines, unless BuildKit took the step from its cache
    log = Path(result["log"]).read_text(errors="replace")
    built = re.search(r"edgevllm extensions: cmake --build: ([\w, ]+)", log)
    assert step_ran_or_cached(log, "build 1/1", "edgevllm extensions: cmake --build: ")
    if built:   # the chosen ones, and those whose build runs no command (triton_kernels, ...)
        listed = set(built[1].split(", "))
        assert set(asked) <= listed, built[0]
        assert not {"_C_stable_libtorch", "_vllm_fa2_C", "_vllm_fa3_C", "_qutlass_C",
                    *EXTENSIONS["spark"]} - set(asked) - {"triton_kernels"} & listed, built[0]
    assert step_ran_or_cached(log, "build 1/1", "left out by the target: _vllm_fa3_C "
                              "(FlashAttention 3: sm_90a only")
    assert "left out: _vllm_fa3_C (FlashAttention 3: sm_90a only" in output   # preflight's line
    assert result["verify"]["passed"] is True and result["probe"]["passed"] is True


@TARGETS
def test_the_wheel_holds_the_extensions_for_aarch64(subset_builds, target):
    from edgevllm.specs.buildspec import Builder, load_spec, resolve

    result, _ = subset_builds[target]
    road = resolve(load_spec(target, overrides={"mode": "compile"}),
                   builder=Builder("amd64")).cross
    assert road is not None
    wheels = result["wheels"]
    assert len(wheels) == 1 and wheels[0].name.endswith(f"-{road.wheel_platform}.whl"), wheels
    with zipfile.ZipFile(wheels[0]) as zf:
        libraries = {n: zf.read(n) for n in zf.namelist() if ".so" in Path(n).name}
    assert sorted(Path(n).name.split(".")[0] for n in libraries) == sorted(EXTENSIONS[target])
    assert all(elf_machine(data) == AARCH64 for data in libraries.values()), list(libraries)


@TARGETS
def test_the_kernels_are_native_unit_by_unit_where_the_plan_says(subset_builds, target,
                                                                 tree_upstream, tmp_path):
    """Every unit of the kernel extension: SASS for the target only, or one of the units the
    kernel plan builds as 8.0+PTX (sm_80 and compute_80: vLLM's Marlin MoE kernels); at least
    as many native units as the plan has sources with the target's arch; verify agrees."""
    from edgevllm.builder.tail import planned_arches
    from edgevllm.mods.patches import apply_source_patches
    from edgevllm.sources.plan import plan_for_target
    from edgevllm.specs.lock import read_lock
    from edgevllm.specs.targets import load_target
    from edgevllm.verify import verify
    from edgevllm.verify.api import scan_path

    result, _ = subset_builds[target]
    lock = read_lock(Path(result["lock"]))
    planned = planned_arches(lock)
    assert list(planned) == [KERNELS] and "8.0+PTX" in planned[KERNELS], planned
    library = library_of(result["wheels"][0], KERNELS, tmp_path / "scan")
    [report] = scan_path(library)
    units: dict[int, set[str]] = {}
    for entry in report.entries:
        units.setdefault(entry.container, set()).add(entry.arch)
    native = [u for u, arches in units.items() if arches == {SASS[target]}]
    ptx = [u for u, arches in units.items() if arches == {"sm_80", "compute_80"}]
    assert len(native) + len(ptx) == len(units), units
    _, sdist_tree = tree_upstream
    tree = tmp_path / "tree"   # the tree as the build compiled it: the target's source patches
    shutil.copytree(sdist_tree, tree)
    apply_source_patches(tree, target, VLLM)
    plan = plan_for_target(tree, load_target(target), torch_version="2.14.0", check=False)
    (ext,) = [e for e in plan.extensions if e.name == KERNELS]
    with_arch = {s for s in ext.sources
                 if any(SASS[target].split("_")[1] in f for f in plan.flags_for(s))}
    assert with_arch and len(native) >= len(with_arch), (len(native), sorted(with_arch))
    assert ptx, "no 8.0+PTX unit: the plan's Marlin MoE group is missing"
    (lib,) = verify(target, path=tmp_path / "scan", planned=planned).libraries
    assert (lib.mode, lib.passed, lib.as_planned) == ("every-unit", True, len(ptx)), lib.reason
    assert lib.coverage.counts.get("native") == len(native)


@TARGETS
def test_the_lock_and_label_say_partial_and_name_the_standins(subset_builds, target, engine,
                                                              standins):
    from edgevllm.common import labels
    from edgevllm.specs.lock import read_lock
    from edgevllm.specs.targets import load_target

    result, _ = subset_builds[target]
    lock = read_lock(Path(result["lock"]))
    assert lock.settings["extensions"] == EXTENSIONS[target]
    assert lock.settings["toolchain"] == "cross"
    # the target leaves FlashAttention 3 out of every compile, a partial one too (its leave_out)
    assert lock.settings["left_out"] == load_target(target).leave_out
    # the plan's CUDA extensions: the one asked for
    assert list(lock.kernel_plan["extensions"]) == [KERNELS]
    assert set(lock.cmake_deps) == set(standins)
    image_labels = engine.image_inspect(result["image"])["Config"]["Labels"]
    assert json.loads(image_labels[labels.EXTENSIONS]) == {
        "partial": True, "extensions": EXTENSIONS[target], "left_out": ["_vllm_fa3_C"],
        "serves": False}


@TARGETS
def test_the_arm64_image_loads_the_extensions_as_probe_level_1_does(subset_builds, target,
                                                                    engine, tmp_path):
    """probe/inimage_check.py's own ``extension_facts`` in the image, with the road's driver
    stub for libcuda.so.1 (built with the cross compiler in the cross base)."""
    result, _ = subset_builds[target]
    here = Path(__file__).resolve().parents[2] / "edgevllm"
    stub = driver_stub(engine, tmp_path)
    load = ("import json, sys; sys.path.insert(0, '/probe'); import inimage_check as c; "
            "print(json.dumps(c.extension_facts('vllm', 900)))")
    loaded = engine.run_cli(["run", "--rm", "--platform", "linux/arm64", "--entrypoint",
                             "python3", "-e", "LD_LIBRARY_PATH=/stub", "-v",
                             f"{here / 'probe'}:/probe:ro", "-v", f"{stub}:/stub:ro",
                             result["image"], "-c", load], timeout=1200)
    assert loaded.returncode == 0, loaded.stderr.decode()[-3000:]
    facts = json.loads(loaded.stdout.decode().strip().splitlines()[-1])
    items = {Path(i["path"]).name.split(".")[0]: i for i in facts["items"]}
    assert sorted(items) == sorted(EXTENSIONS[target]), facts
    assert all(i["ok"] and i["kind"] == "extension" for i in items.values()), facts


def test_the_aot_step_took_the_cross_road_and_its_record_says_aarch64(subset_build, engine):
    from edgevllm.common import labels

    result, output = subset_build
    assert "flashinfer aot: cross: on this amd64 builder's own platform" in output
    summary = result["aot"]
    assert summary["arch_list"] == "12.1a" and summary["flashinfer"] == FLASHINFER
    assert [m["machine"] for m in summary["modules"]] == ["aarch64", "aarch64"]
    assert any("cross-built with aarch64-linux-gnu-g++" in n for n in summary["notes"])
    image_labels = engine.image_inspect(result["image"])["Config"]["Labels"]
    assert json.loads(image_labels[labels.AOT])["modules"] == summary["modules"]


@pytest.fixture(scope="module")
def aot_modules(subset_build, engine, tmp_path_factory):
    """The image's FlashInfer AOT folder, copied out (docker create + docker cp)."""
    result, _ = subset_build
    folder = f"/opt/venv/lib/python{PYTHON}/site-packages/flashinfer/data/aot"
    out = tmp_path_factory.mktemp("aot-out")
    made = engine.run_cli(["create", "--platform", "linux/arm64", result["image"]])
    assert made.returncode == 0, made.stderr.decode()
    box = made.stdout.decode().strip()
    try:
        copied = engine.run_cli(["cp", f"{box}:{folder}", str(out)])
        assert copied.returncode == 0, copied.stderr.decode()
    finally:
        engine.run_cli(["rm", box])
    return result["aot"], out / "aot"


def test_each_aot_module_is_an_aarch64_library_with_sm_121a_code_only(aot_modules):
    import hashlib

    from edgevllm.verify.api import scan_path

    summary, folder = aot_modules
    assert sorted(p.name for p in folder.iterdir()) == sorted(m["name"] for m in
                                                               summary["modules"])
    for module in summary["modules"]:
        path = folder / module["name"] / f"{module['name']}.so"
        data = path.read_bytes()
        assert elf_machine(data) == AARCH64 and len(data) == module["bytes"], path
        assert hashlib.sha256(data).hexdigest() == module["sha256"]
        [report] = scan_path(path)
        assert report.arches("sass") == ["sm_121a"], (module["name"], report.arches("sass"))


LOAD = """
import json, os
import torch
from flashinfer.jit import env
from flashinfer.prefill import get_batch_prefill_module
from flashinfer.sampling import get_sampling_module
prefill = get_batch_prefill_module("fa2", torch.bfloat16, torch.bfloat16, torch.bfloat16,
                                   torch.int32, 64, 64, 0, False, False, False)
sampling = get_sampling_module()
jit_cache = [f for _, _, files in os.walk(env.FLASHINFER_CACHE_DIR) for f in files
             if f.endswith(".so")]
print(json.dumps({"prefill": [callable(prefill.plan), callable(prefill.paged_run),
                              callable(prefill.ragged_run)],
                  "sampling": callable(sampling.top_k_top_p_sampling_from_probs),
                  "jit_cache": jit_cache, "aot": sorted(os.listdir(env.FLASHINFER_AOT_DIR))}))
"""


def test_the_arm64_image_loads_the_aot_modules_without_the_jit(subset_build, engine, tmp_path):
    """FlashInfer's own load path in the linux/arm64 image (qemu), its JIT disabled: a module
    it had to compile would fail the load. The road's driver stub stands in for libcuda.so.1."""
    result, _ = subset_build
    stub = driver_stub(engine, tmp_path)
    loaded = engine.run_cli(["run", "--rm", "--platform", "linux/arm64", "--network", "none",
                             "--entrypoint", "python3", "-e", "LD_LIBRARY_PATH=/stub",
                             "-e", "FLASHINFER_DISABLE_JIT=1", "-v", f"{stub}:/stub:ro",
                             result["image"], "-c", LOAD], timeout=1800)
    assert loaded.returncode == 0, loaded.stderr.decode()[-4000:]
    found = json.loads(loaded.stdout.decode().strip().splitlines()[-1])
    assert found["prefill"] == [True, True, True] and found["sampling"] is True
    assert found["jit_cache"] == []
    assert found["aot"] == sorted(m["name"] for m in result["aot"]["modules"])
