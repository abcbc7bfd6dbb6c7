"""The compile mode's cross road, end to end on the real engine (specs/crossroads.yaml,
builder/cross/context.py, dockerfiles/compile.Dockerfile.j2): ``build()`` of the stand-in vLLM tree
for
thor (11.0a) and spark (12.1a), linux/arm64, on this x86_64 host without emulating the compile.

What it exercises: the build stages run on the build platform (linux/amd64): the x86_64 CUDA
13.0 compiler with Debian trixie's aarch64 cross g++ 14 as host compiler, the build tools
resolved for linux/amd64; the target's CUDA runtime comes from the locked closure (aarch64
``nvidia-cuda-runtime``, pinned with ``packages``) as ``targets/sbsa-linux``. Then, as for every
compile: the wheel (tag ``linux_aarch64``) exported, the runtime image for linux/arm64 (under
qemu), verify (sm_110a / sm_121a SASS in an aarch64 ELF) and probe level 1 (``import vllm``
loads the compiled extension in the arm64 image). The compile key of the cross road differs
from the emulated road's, so their wheels are never mixed up.

What stands in: the fixture tree stands in for vLLM (tests/e2e/conftest.py), Debian trixie
with NVIDIA's CUDA wheels for nvidia/cuda:13.0.x-devel-ubuntu24.04, a trixie arm64 rootfs for
ubuntu:24.04 (both Python 3.13, as both Ubuntu images carry 3.12). On an arm64 host there is no
cross road: the same specs build natively there (a trixie arm64 CUDA base), and the tests check
the same wheel and image, with the toolchain ``native``.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest

from e2e.conftest import hermetic_spec
from support.timeouts import COLD_FIXTURE_TIMEOUT_S

# The first test sets up the module's cold fixtures (support/timeouts.py says why and how long).
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(COLD_FIXTURE_TIMEOUT_S)]

CUDA_RUNTIME = "13.0.96"   # the aarch64 nvidia-cuda-runtime the cross link takes from the closure
TARGETS = {"thor": "sm_110a", "spark": "sm_121a"}


@pytest.fixture(scope="module")
def cross_images(engine):
    """(build base, runtime base, the toolchain a compile takes on this host)."""
    from support.images import cross_cuda_image, cross_runtime_image
    from support.platforms import native_arch, require_runnable

    require_runnable("arm64")
    toolchain = "cross" if native_arch() == "amd64" else "native"
    return cross_cuda_image(engine), cross_runtime_image(engine), toolchain


def cross_spec(target: str, images: tuple[str, str, str], upstream, **extra) -> dict:
    build_image, runtime_image, _ = images
    return hermetic_spec(
        target, build_image, upstream, mode="compile", platform="linux/arm64",
        images={"build": build_image, "runtime": runtime_image},
        bytecode_image=build_image,   # Python 3.13 on the build platform
        python="python3.13", mods=[],
        packages={"flashinfer-python": None, "nvidia-cutlass-dsl": None,
                  "nvidia-cuda-runtime": CUDA_RUNTIME},
        image_repo=f"edgevllm-test/e2e-cross-{target}", **extra)


@pytest.fixture(scope="module")
def cross_builds(cross_images, fake_upstream, engine, tmp_path_factory):
    from edgevllm.builder.pipeline import build
    from edgevllm.specs.buildspec import spec_from_dict

    out = tmp_path_factory.mktemp("cross-out")
    return {target: build(spec_from_dict(cross_spec(target, cross_images, fake_upstream)),
                          out, engine) for target in TARGETS}


def step_ran_or_cached(log: str, step: str, printed: str) -> bool:
    """BuildKit's log of ``step`` (e.g. ``build-env 2/2``): it printed ``printed``, or it came
    from the cache (then nothing it printed is in the log)."""
    found = re.search(rf"#(\d+) \[{re.escape(step)}\] ", log)
    assert found, f"no step [{step}] in the build log"
    number = found[1]
    return printed in log or re.search(rf"^#{number} CACHED$", log, re.M) is not None


def elf_machine(path: Path) -> int:
    head = path.read_bytes()[:20]
    assert head[:4] == b"\x7fELF", f"{path} is no ELF"
    return int.from_bytes(head[18:20], "little")


AARCH64 = 183   # e_machine EM_AARCH64


@pytest.mark.parametrize("target", TARGETS)
def test_the_build_stages_ran_on_the_build_platform_with_the_cross_compiler(cross_builds,
                                                                            cross_images, engine,
                                                                            target):
    from edgevllm.specs.lock import read_lock

    result, toolchain = cross_builds[target], cross_images[2]
    lock = read_lock(result.lock_path)
    assert lock.settings["toolchain"] == toolchain and result.compiled
    log = result.log_path.read_text(errors="replace")
    dockerfile = (result.lock_path.parent / "context" / "Dockerfile").read_text()
    base_line = dockerfile.split(" AS base")[0].splitlines()[-1]
    if toolchain == "native":   # an arm64 host: no cross stages at all
        assert "NVCC_PREPEND_FLAGS" not in dockerfile and "$BUILDPLATFORM" not in base_line
        return
    # The stages that compile start from the build base, an amd64-only image: they cannot have
    # run on linux/arm64. The cross step prints the cross g++ it checked and the target folder,
    # unless BuildKit took the step from its cache (the second target shares the first's: the
    # step names no target); so does the compile step, whose setuptools build folder is named
    # after the target's platform.
    assert engine.image_inspect(cross_images[0])["Architecture"] == "amd64"
    assert step_ran_or_cached(log, "build-env 2/2", "edgevllm cross: aarch64-linux-gnu-g++ 14.")
    assert step_ran_or_cached(log, "build 1/1", "build/lib.linux-aarch64-")
    assert base_line.startswith("FROM --platform=$BUILDPLATFORM "), base_line
    assert 'NVCC_PREPEND_FLAGS="-ccbin aarch64-linux-gnu-g++ -target-dir sbsa-linux"' in dockerfile
    # The build tools are the build platform's: pure-Python or x86_64 wheels, never aarch64;
    # the target's CUDA runtime is the closure's, for aarch64.
    assert lock.build_closure is not None and lock.closure is not None
    assert not [w.filename for w in lock.build_closure.wheels if "aarch64" in w.filename]
    assert any(w.name == "nvidia-cuda-runtime" and "aarch64" in w.filename
               for w in lock.closure.wheels)


@pytest.mark.parametrize("target", TARGETS)
def test_the_wheel_holds_aarch64_code_with_the_targets_sass(cross_builds, target):
    from edgevllm.verify.api import scan_path

    result = cross_builds[target]
    wheels = sorted(result.wheels_dir.glob("*.whl"))
    assert len(wheels) == 1 and wheels[0].name.endswith("-linux_aarch64.whl"), wheels
    unpacked = result.wheels_dir.parent / f"{target}-unpacked"
    with zipfile.ZipFile(wheels[0]) as zf:
        zf.extractall(unpacked)
    libraries = sorted(unpacked.rglob("*.so"))
    assert libraries and all(elf_machine(lib) == AARCH64 for lib in libraries), libraries
    reports = scan_path(unpacked)
    sass = {arch for report in reports for arch in report.arches("sass")}
    assert sass == {TARGETS[target]}


@pytest.mark.parametrize("target", TARGETS)
def test_the_arm64_image_passes_verify_and_loads_the_extension(cross_builds, engine, target):
    result = cross_builds[target]
    assert engine.image_inspect(result.image)["Architecture"] == "arm64"
    assert result.verify["passed"] is True and result.probe["passed"] is True
    loaded = engine.run_cli(["run", "--rm", "--platform", "linux/arm64", "--entrypoint",
                             "python3", result.image, "-c",
                             "import ctypes, glob, vllm; "
                             "print(ctypes.CDLL(glob.glob(vllm.__path__[0] + '/_C*.so')[0]))"],
                            timeout=600)
    assert loaded.returncode == 0, loaded.stderr.decode()[-2000:]
    assert "_C.abi3.so" in loaded.stdout.decode()


def test_the_cross_and_emulated_roads_have_different_compile_keys(cross_images, fake_upstream,
                                                                  engine, tmp_path):
    """The same tree and closure by the emulated road: its compile key is not the cross one's
    (render only: nothing compiles under qemu here)."""
    from edgevllm.builder import modes
    from edgevllm.builder.runner import Workspace
    from edgevllm.specs.buildspec import spec_from_dict

    keys = {}
    if cross_images[2] != "cross":
        return test_an_arm64_host_has_no_cross_road(cross_images, engine)
    for road in ("cross", "emulated"):
        spec = spec_from_dict(cross_spec("thor", cross_images, fake_upstream, toolchain=road))
        job = modes.start(spec, Workspace(tmp_path / road), engine, None)
        assert job.eff.toolchain == road
        keys[road] = modes.prepare(job).compile_key
    assert keys["cross"] and keys["emulated"] and keys["cross"] != keys["emulated"]


def test_an_arm64_host_has_no_cross_road(cross_images, engine):
    """On an arm64 host linux/arm64 builds natively and ``--toolchain cross`` is one line; on an
    x86_64 host the cross road is the default for a compile (the tests above)."""
    from edgevllm.builder.modes import builder_of
    from edgevllm.common.errors import SpecError
    from edgevllm.specs.buildspec import load_spec, resolve

    spec = load_spec("spark", overrides={"mode": "compile"})
    builder = builder_of(engine, resolve(spec).target)
    eff = resolve(spec, builder=builder)
    if cross_images[2] == "cross":
        assert builder.arch == "amd64" and eff.toolchain == "cross"
        return
    assert builder.arch == "arm64" and eff.toolchain == "native"
    with pytest.raises(SpecError, match="natively; drop --toolchain cross"):
        resolve(load_spec("spark", overrides={"mode": "compile", "toolchain": "cross"}),
                builder=builder)



def test_flashinfer_from_source_is_cross_compiled_with_the_targets_sass(
        cross_images, fake_upstream, fake_flashinfer_upstream, engine, tmp_path):
    """FlashInfer from source on the cross road (spark): its flashinfer-build stage runs on the
    build platform, FROM the cross build-env, without network; its own setup.py calls nvcc,
    which cross-compiles through build-env's settings. The wheel is linux_aarch64 with an
    aarch64 extension of sm_121a SASS, and the arm64 image imports it (probe and a CDLL).
    The stand-in FlashInfer (tests/e2e/fixtures/fake-flashinfer) has a real CUDA kernel."""
    from edgevllm.builder.pipeline import build
    from edgevllm.specs.buildspec import spec_from_dict
    from edgevllm.specs.lock import read_lock
    from edgevllm.verify.api import scan_path

    spec = cross_spec("spark", cross_images, fake_upstream,
                      flashinfer={"source": {"repo": fake_flashinfer_upstream.url,
                                             "ref": "v0.1.0"}},
                      probe_required=["vllm", "flashinfer"])
    result = build(spec_from_dict(spec), tmp_path, engine)
    lock = read_lock(result.lock_path)
    assert lock.settings["toolchain"] == cross_images[2] and lock.flashinfer is not None
    dockerfile = (result.lock_path.parent / "context" / "Dockerfile").read_text()
    stage = dockerfile.split("AS flashinfer-build", 1)[1].split("\nFROM ", 1)[0]
    assert "RUN --network=none" in stage and "BUILD_NVEP=0" in stage
    wheels = sorted(result.wheels_dir.glob("flashinfer*.whl"))
    assert len(wheels) == 1 and wheels[0].name.endswith("-linux_aarch64.whl"), wheels
    unpacked = tmp_path / "flashinfer-unpacked"
    with zipfile.ZipFile(wheels[0]) as zf:
        zf.extractall(unpacked)
    library = unpacked / "flashinfer" / "_kernels.abi3.so"
    assert elf_machine(library) == AARCH64
    assert {a for r in scan_path(unpacked) for a in r.arches("sass")} == {"sm_121a"}
    assert result.verify is not None and result.probe is not None
    assert result.verify["passed"] is True and result.probe["passed"] is True
    loaded = engine.run_cli(["run", "--rm", "--platform", "linux/arm64", "--entrypoint",
                             "python3", result.image, "-c",
                             "import flashinfer._kernels as k; print(k.__file__)"], timeout=600)
    assert loaded.returncode == 0, loaded.stderr.decode()[-2000:]
    assert "_kernels.abi3.so" in loaded.stdout.decode()
    engine.remove_image(result.image, force=True)
