"""The real vLLM 0.33.0 tree on the cross road: its own CMake configured for linux/arm64 on this
x86_64 host, then a slice of its real targets built, for spark (12.1a) and thor (11.0a).

What it exercises: the road's own pieces, as the compile template hands them to a build step
(``builder/render.py`` ``cross_values``: the ``CMAKE_ARGS`` of ``toolchain_cmake_args``,
``NVCC_PREPEND_FLAGS``, the cross ``CC``/``CXX``/``LDFLAGS``; the ``edgevllm-cross`` context of
``builder/cross/context.py`` ``stage_cross``: the rendered toolchain file, its emulator
``inimage_run.py``,
``inimage_stage.py`` laying out ``targets/sbsa-linux`` from the target's wheels), in the
cross build base (support/images.cross_cuda_image: Debian trixie, its aarch64 g++ 14, the x86_64
nvcc 13.0). The tree is PyPI's sdist through the build's own source preparation and the target's
source patches. The build Python is x86_64 with torch 2.14.0 and vLLM's build requirements (CMake
4 among them) from PyPI; the target side is the aarch64 torch 2.14.0 and its CUDA wheels, unpacked
as the closure's venv is mounted. The configure runs with the arguments vLLM's ``setup.py``
passes (``cmake_build_ext.configure``, ``CMAKE_ARGS`` last), the arch list of the target.

The slice: vLLM 0.33.0's setup.py builds every extension's CMake target in one ``cmake --build``
and has no knob that picks fewer (its only selector is the arch list), so the slice is chosen
with CMake's own target names, after the tree's real configure: the whole ``cumem_allocator``,
``spinloop`` and ``fs_io_C`` extensions (linked) and the object of ``csrc/activation_kernels.cu``
of ``_C_stable_libtorch`` (the plan's smallest CUDA unit).

Checks: the configure's arch list is the plan's; every ELF built is aarch64; verify finds in the
CUDA object exactly the SASS the plan gives that unit (sm_121a / sm_110a); the linux/arm64
runtime base (qemu) imports the three linked extensions after the aarch64 torch, as probe level 1
loads a wheel's, with the road's ``libcuda.so.1`` stub standing in for the driver (which comes
with the device; cumem_allocator links it, and records it as needed as a native build does).

What stands in: the CMake dependencies vLLM pins and this machine cannot fetch
(support/cross_real.cmake_dep_dirs: the pins first, through the build's own fetch; else
stand-ins any machine that reaches PyPI can make, each naming itself, listed in
docs/build-modes.md: CUTLASS 4.2.0's headers from PyPI's nvidia-cutlass wheel for v4.7.1, and
for the others empty files at the paths the tree's own external-project CMake names). None of
the stand-ins' code is in the slice; the configure reads them.

Not exercised: ``inv build`` itself (its compile step would build every target: hours on two
cores, and it fetches the pins by commit), DeepGEMM's setuptools build, the wheel.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from edgevllm.builder.cross.context import RUN_SCRIPT, TOOLCHAIN, stage_cross
from edgevllm.builder.render import cross_values, render_toolchain
from edgevllm.common.labels import CROSS_RUN, CROSS_TOOLCHAIN
from edgevllm.mods.patches import apply_source_patches
from edgevllm.sources.plan import plan_for_target
from edgevllm.sources.prepare import SourceRequest, prepare_sources
from edgevllm.specs.buildspec import Builder, load_spec, resolve
from edgevllm.specs.targets import load_target
from edgevllm.verify.api import scan_path

# The cross road's two sides: their lists are the test cache's keys, owned by support.cross_real.
from support.cross_real import (
    BUILD_REQUIREMENTS,
    PYTHON,
    TARGET_REQUIREMENTS,
    TORCH,
    cmake_dep_dirs,
    unpacked_site,
    wheel_set,
)
from support.gitfixtures import git_cache, make_upstream_repo  # noqa: F401
from support.sdists import pypi_sdist, sdist_tree
from support.timeouts import COLD_FIXTURE_TIMEOUT_S

# The first test sets up the module's cold fixtures (support/timeouts.py says why and how long).
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(COLD_FIXTURE_TIMEOUT_S)]

EXTENSIONS = ["cumem_allocator", "spinloop", "fs_io_C"]
UNIT = "csrc/activation_kernels.cu"
OBJECT = f"CMakeFiles/_C_stable_libtorch.dir/{UNIT}.o"
TARGETS = {"spark": "sm_121a", "thor": "sm_110a"}
AARCH64 = 183   # ELF e_machine


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    """vllm 0.33.0's sdist as a git repository (tag v0.33.0): what the build would clone."""
    files = sdist_tree(pypi_sdist("vllm", "0.33.0"),
                       ["CMakeLists.txt", "cmake/", "csrc/", "tools/", "vllm/third_party/",
                        "setup.py", "pyproject.toml", "requirements/"],
                       tmp_path_factory.mktemp("sdist") / "vllm")
    up = make_upstream_repo(tmp_path_factory.mktemp("remote"), files)
    up.git("update-ref", "-d", "refs/tags/v0.1.0")
    up.git("update-ref", "refs/tags/v0.33.0", up.shas["c1"])
    return up


@pytest.fixture(scope="module")
def sides(engine, tmp_path_factory):
    """(the build Python's venv folder, mounted at /opt/venv and made in the first build step,
    the folder of the wheels it is made from, the target's venv for linux/arm64). Both venvs
    are made in this run's temporary folder and removed when the module ends (10 GB)."""
    from support.images import cross_cuda_image

    cross_cuda_image(engine)
    venv, target = tmp_path_factory.mktemp("build-venv"), tmp_path_factory.mktemp("target-venv")
    try:
        yield (venv, wheel_set("amd64", [TORCH, *BUILD_REQUIREMENTS], PYTHON),
               unpacked_site("arm64", TARGET_REQUIREMENTS, PYTHON, target))
    finally:
        for folder in (venv, target):   # written by root in the container: removed as root
            subprocess.run(["rm", "-rf", str(folder)], check=False)


def build_script(values: dict, arch_list: str, deps: dict[str, str]) -> str:
    """The build step's environment (compile.Dockerfile.j2's cross ENV), then the tree's CMake
    with setup.py's own arguments, then ninja on the slice."""
    env = {**cross_env(values), "TORCH_CUDA_ARCH_LIST": arch_list, "VLLM_TARGET_DEVICE": "cuda",
           **deps}
    setup_args = ["-G", "Ninja", "-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DVLLM_TARGET_DEVICE=cuda",
                  "-DVLLM_PYTHON_EXECUTABLE=/opt/venv/bin/python3",
                  "-DVLLM_PYTHON_PATH=$(python3 -c 'import sys; print(\":\".join(sys.path))')",
                  "-DFETCHCONTENT_BASE_DIR=/src/vllm/.deps", "-DNVCC_THREADS=1",
                  "-DCMAKE_JOB_POOL_COMPILE:STRING=compile",
                  "-DCMAKE_JOB_POOLS:STRING=compile=2",
                  "-DCMAKE_CUDA_COMPILER=$CUDA_HOME/bin/nvcc"]
    return "\n".join([
        *build_env_lines(values),
        *[f'export {k}="{v}"' for k, v in env.items()],
        "mkdir -p /work/b && cd /work/b",
        "nice cmake /src/vllm " + " ".join(setup_args) + " $CMAKE_ARGS > /work/configure.log 2>&1 "
        "|| { tail -60 /work/configure.log; exit 1; }",
        f"nice ninja -j2 {' '.join(EXTENSIONS)} {OBJECT} > /work/ninja.log 2>&1 "
        "|| { tail -60 /work/ninja.log; exit 1; }",
        "mkdir -p /work/out /work/stub",
        f"cp {' '.join(f'{e}.abi3.so' for e in EXTENSIONS)} {OBJECT} /work/out/",
        # The driver library comes with the device: the road's stub (every driver function of
        # cuda.h, answering CUDA_ERROR_STUB_LIBRARY) stands in for it when the extensions load.
        f"cp -L $CUDA_HOME/targets/{values['target_dir']}/lib/libcuda.so /work/stub/libcuda.so.1",
    ])


def cross_env(values: dict) -> dict[str, str]:
    """The cross ENV of compile.Dockerfile.j2's build-env stage, from the same values."""
    return {"NVCC_PREPEND_FLAGS": values["nvcc_flags"], "CMAKE_ARGS": values["cmake_args"],
            "CC": values["c_compiler"], "CXX": values["host_compiler"],
            "LDSHARED": f"{values['c_compiler']} -shared", "LDFLAGS": values["ldflags"],
            "SETUPTOOLS_EXT_SUFFIX": values["ext_suffix"],
            "_PYTHON_HOST_PLATFORM": values["host_platform"]}


def build_env_lines(values: dict) -> list[str]:
    """The build Python (made in the first step of each run, from the cached wheels) and
    the build-env stage's cross step."""
    aliases = " ".join(f"--alias {a}" for a in values["aliases"])
    return [
        "set -e",
        "if [ ! -e /opt/venv/.complete ]; then rm -rf /opt/venv/* /opt/venv/.[!.]* || true; "
        "python3 -m venv --system-site-packages /opt/venv; /opt/venv/bin/pip install -q "
        "--no-index --find-links /build-wheels "
        + " ".join(shlex.quote(r) for r in [TORCH, *BUILD_REQUIREMENTS])
        + "; touch /opt/venv/.complete; fi",
        ". /opt/venv/bin/activate",
        f"python3 /cross/inimage_stage.py --compiler {values['host_compiler']} --triple "
        f"{values['triple']} --min-gcc {values['min_gcc']} --target-dir {values['target_dir']} "
        f"{aliases} --target-venv /opt/edgevllm-target",
        f"mkdir -p {Path(CROSS_TOOLCHAIN).parent} && cp /cross/{TOOLCHAIN} {CROSS_TOOLCHAIN} "
        f"&& install -m 0755 /cross/{RUN_SCRIPT} {CROSS_RUN}"]


def prepared_tree(upstream, dest: Path, target: str) -> Path:
    prepared = prepare_sources(SourceRequest.from_cli("vllm", upstream.url, "v0.33.0"), dest)
    assert prepared.version == "0.33.0" and prepared.tree_dir is not None
    apply_source_patches(prepared.tree_dir, target, prepared.version)
    return prepared.tree_dir


@pytest.mark.parametrize("target_name", TARGETS)
def test_the_real_tree_configures_and_its_slice_builds_for_the_device(
        engine, upstream, sides, git_cache, tmp_path, target_name):  # noqa: F811
    from edgevllm.containers.docker import RunOptions
    from support.images import cross_cuda_image, cross_runtime_image
    from support.platforms import native_arch, require_runnable

    assert native_arch() == "amd64", "the cross road starts from an x86_64 builder"
    require_runnable("arm64")
    target = load_target(target_name)
    overrides = {"mode": "compile", "python": f"python{PYTHON}"}
    eff = resolve(load_spec(target_name, overrides=overrides), builder=Builder("amd64"))
    values = cross_values(eff)
    assert values is not None and eff.toolchain == "cross" and eff.cross is not None
    tree = prepared_tree(upstream, tmp_path / "vllm", target_name)
    plan = plan_for_target(tree, target, torch_version="2.14.0", check=False)
    deps_root, origins = cmake_dep_dirs(plan.deps, tmp_path / "deps", tree)
    print("\n".join(f"cmake dep {name}: {origin}" for name, origin in sorted(origins.items())))
    deps = {d.env_var: "/".join(["/src/deps", d.name, *([d.override_subdir] if d.override_subdir
                                                       else [])])
            for d in plan.deps if d.env_var}
    stage_cross(render_toolchain(eff.cross), tmp_path / "cross")  # the edgevllm-cross context
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "run.sh").write_text(
        build_script(values, target.torch_cuda_arch_list, deps))
    venv, build_wheels, target_venv = sides
    image = cross_cuda_image(engine)
    proc = engine.run(RunOptions(
        image=image, remove=True, command=["bash", "/work/run.sh"],
        volumes=[f"{tree}:/src/vllm", f"{deps_root}:/src/deps:ro", f"{venv}:/opt/venv",
                 f"{build_wheels}:/build-wheels:ro", f"{target_venv}:/opt/edgevllm-target:ro",
                 f"{tmp_path / 'cross'}:/cross:ro", f"{tmp_path / 'work'}:/work"]), timeout=2400)
    assert proc.returncode == 0, proc.stdout.decode()[-4000:] + proc.stderr.decode()[-3000:]

    configure = (tmp_path / "work" / "configure.log").read_text()
    said = re.search(r"CUDA supported target architectures: (\S+)", configure)
    assert said and said[1].split(";") == plan.cuda_archs, (said, plan.cuda_archs)
    out = tmp_path / "work" / "out"
    built = sorted(out.iterdir())
    assert len(built) == len(EXTENSIONS) + 1
    for path in built:
        head = path.read_bytes()[:20]
        assert head[:4] == b"\x7fELF" and int.from_bytes(head[18:20], "little") == AARCH64, path
    # cumem_allocator links the driver (CUDA::cuda_driver), as a native build records it
    dynamic = subprocess.run(["readelf", "-d", str(out / "cumem_allocator.abi3.so")],
                             capture_output=True, text=True, check=True).stdout
    assert "[libcuda.so.1]" in dynamic and "[libtorch_cuda.so]" in dynamic, dynamic
    sass = TARGETS[target_name]
    assert plan.flags_for(UNIT) == [f"-gencode arch=compute_{sass[3:]},code={sass}"]
    [report] = scan_path(out / Path(OBJECT).name)
    assert report.arches("sass") == [sass]

    site = f"/opt/edgevllm-target/lib/python{PYTHON}/site-packages"
    load = ("import importlib.util, torch\n"
            f"for name in {EXTENSIONS!r}:\n"
            "    spec = importlib.util.spec_from_file_location('vllm.' + name,\n"
            "        f'/ext/{name}.abi3.so')\n"
            "    spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
            "    print('loaded', name)\n")
    loaded = engine.run(RunOptions(
        image=cross_runtime_image(engine), remove=True, platform="linux/arm64",
        command=["python3", "-c", load],
        env={"PYTHONPATH": site, "LD_LIBRARY_PATH": "/stub"},
        volumes=[f"{target_venv}:/opt/edgevllm-target:ro", f"{out}:/ext:ro",
                 f"{tmp_path / 'work' / 'stub'}:/stub:ro"]), timeout=1200)
    assert loaded.returncode == 0, loaded.stderr.decode()[-3000:]
    assert loaded.stdout.decode().split("\n")[:3] == [f"loaded {e}" for e in EXTENSIONS]


TORCH_EXTENSION = """
#include <torch/extension.h>
torch::Tensor twice(torch::Tensor x) { return x * 2; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("twice", &twice); }
"""
SETUP = """
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension
setup(name="crossext", ext_modules=[CppExtension("crossext", ["ext.cpp"])],
      cmdclass={"build_ext": BuildExtension})
"""


def test_a_setup_py_torch_extension_builds_with_the_build_python_for_the_target(
        engine, sides, tmp_path):
    """DeepGEMM's way inside vLLM's build on Spark (tools/build_deepgemm_C.py runs its setup.py
    with the build Python): ``torch.utils.cpp_extension`` of the x86_64 torch, the road's cross
    ENV (LDFLAGS puts the target's torch first; SETUPTOOLS_EXT_SUFFIX names the module for the
    target). The module loads and runs in the linux/arm64 base (qemu) with the aarch64 torch."""
    from edgevllm.containers.docker import RunOptions
    from support.images import cross_cuda_image, cross_runtime_image

    eff = resolve(load_spec("spark", overrides={"mode": "compile", "python": f"python{PYTHON}"}),
                  builder=Builder("amd64"))
    values = cross_values(eff)
    assert values is not None and eff.cross is not None
    stage_cross(render_toolchain(eff.cross), tmp_path / "cross")  # the edgevllm-cross context
    work = tmp_path / "work"
    work.mkdir()
    (work / "ext.cpp").write_text(TORCH_EXTENSION)
    (work / "setup.py").write_text(SETUP)
    (work / "run.sh").write_text("\n".join([
        *build_env_lines(values), *[f'export {k}="{v}"' for k, v in cross_env(values).items()],
        "cd /work && python3 setup.py -q build_ext --inplace > build.log 2>&1 "
        "|| { grep -v 'skipping incompatible' build.log | tail -40; exit 1; }"]))
    venv, build_wheels, target_venv = sides
    image = cross_cuda_image(engine)
    proc = engine.run(RunOptions(
        image=image, remove=True, command=["bash", "/work/run.sh"],
        volumes=[f"{venv}:/opt/venv", f"{build_wheels}:/build-wheels:ro",
                 f"{target_venv}:/opt/edgevllm-target:ro", f"{tmp_path / 'cross'}:/cross:ro",
                 f"{work}:/work"]), timeout=1800)
    assert proc.returncode == 0, proc.stdout.decode()[-4000:] + proc.stderr.decode()[-3000:]
    [module] = list(work.glob("crossext*.so"))
    assert module.name == f"crossext.cpython-{PYTHON.replace('.', '')}-aarch64-linux-gnu.so"
    assert int.from_bytes(module.read_bytes()[18:20], "little") == AARCH64
    site = f"/opt/edgevllm-target/lib/python{PYTHON}/site-packages"
    ran = engine.run(RunOptions(
        image=cross_runtime_image(engine), remove=True, platform="linux/arm64",
        command=["python3", "-c", "import torch, crossext; print(crossext.twice(torch.ones(2)))"],
        env={"PYTHONPATH": f"{site}:/ext"}, volumes=[f"{target_venv}:/opt/edgevllm-target:ro",
                                                    f"{work}:/ext:ro"]), timeout=1200)
    assert ran.returncode == 0, ran.stderr.decode()[-3000:]
    assert ran.stdout.decode().strip() == "tensor([2., 2.])"
