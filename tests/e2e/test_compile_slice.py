"""A real slice of the vLLM 0.33.0 compile: the sdist from PyPI, the real nvcc 13.0, torch 2.14.0.

A git repository made from the sdist stands in for the GitHub clone and goes through the build's
own source preparation (``prepare_sources``) and source patches. The kernel plan is evaluated on
it for Thor (11.0a) and Spark (12.1a, with and without vllm-cmake-keep-121a); then two of ``_C``'s
translation units that need only torch and CUDA headers are compiled with exactly the arguments
the plan reads from the tree's CMake (``KernelPlan.nvcc_args``: per-source ``-gencode``, the
extension's COMPILE_FLAGS and definitions, the CUDA standard). What CMake and torch's CMake config
add on their own is added here and named: torch's include folders, cuBLAS headers (the
``nvidia-cublas`` wheel torch depends on), ``-fPIC`` and the build type's ``-O2``. ``verify``
then scans the objects: the SASS found must be what the plan says.

No Docker is needed; it is marked e2e because the four compiles take minutes on a small machine.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from edgevllm.mods.patches import apply_source_patches
from edgevllm.sources.plan import compare_with_binaries, plan_for_target
from edgevllm.sources.prepare import SourceRequest, prepare_sources
from edgevllm.specs.targets import load_target
from edgevllm.verify.api import scan_path
from support.cross_units import torch_nvcc_flags, wheel_members
from support.cuda_libs import require_nvcc
from support.downloads import pypi_download
from support.gitfixtures import git_cache, make_upstream_repo  # noqa: F401
from support.sdists import pypi_sdist, sdist_tree

pytestmark = pytest.mark.e2e

TORCH = ("torch==2.14.0", ["manylinux_2_28_aarch64"], "3.12")   # headers: same on every arch
CUBLAS = ("nvidia-cublas==13.1.1.3", ["manylinux_2_27_x86_64"], None)   # headers: the same too
UNITS = ["csrc/activation_kernels.cu", "csrc/layernorm_kernels.cu"]


@pytest.fixture(scope="module")
def toolchain():
    nvcc = require_nvcc()
    if shutil.which("cmake") is None:
        pytest.fail("cmake is missing: install cmake >= 3.25 (apt-get install cmake)")
    torch_wheel = pypi_download(*TORCH)
    torch_root = wheel_members(torch_wheel, "torch/include/", "torch-2.14.0-include")
    cublas_root = wheel_members(pypi_download(*CUBLAS), "nvidia/cu13/include/",
                              "cublas-13.1.1.3-include")
    includes = [torch_root / "torch" / "include",
                torch_root / "torch" / "include" / "torch" / "csrc" / "api" / "include",
                cublas_root / "nvidia" / "cu13" / "include"]
    return nvcc, torch_nvcc_flags(torch_wheel), [f"-I{p}" for p in includes]


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    """vllm 0.33.0 as a git repository (tag v0.33.0): what the build would clone."""
    files = sdist_tree(pypi_sdist("vllm", "0.33.0"), ["CMakeLists.txt", "cmake/", "csrc/"],
                       tmp_path_factory.mktemp("sdist") / "vllm")
    up = make_upstream_repo(tmp_path_factory.mktemp("remote"), files)
    up.git("update-ref", "-d", "refs/tags/v0.1.0")
    up.git("update-ref", "refs/tags/v0.33.0", up.shas["c1"])
    return up


def prepared_tree(upstream, dest: Path, target: str, patched: bool) -> Path:
    request = SourceRequest.from_cli("vllm", upstream.url, "v0.33.0")
    prepared = prepare_sources(request, dest)
    assert prepared.version == "0.33.0"
    assert prepared.tree_dir is not None
    if patched:
        outcomes = apply_source_patches(prepared.tree_dir, target, prepared.version)
        assert [o["outcome"] for o in outcomes] in ([], ["applied"])
    return prepared.tree_dir


def compile_units(nvcc: Path, tree: Path, jobs: dict[str, list[str]], extra: list[str],
                  out_dir: Path) -> dict[str, Path]:
    """nvcc -c for each unit (all at once: one per core), with its arguments -> objects."""
    running = {}
    for unit, args in jobs.items():
        out = out_dir / f"{Path(unit).stem}.o"
        argv = [str(nvcc), "-c", unit, *args, *extra, "-Xcompiler=-fPIC", "-O2", "-o", str(out)]
        running[unit] = (argv, out, subprocess.Popen(argv, cwd=tree, stdout=subprocess.PIPE,
                                                     stderr=subprocess.STDOUT, text=True))
    objects = {}
    for unit, (argv, out, proc) in running.items():
        output, _ = proc.communicate()
        assert proc.returncode == 0, f"{' '.join(argv)}\n{output[-3000:]}"
        objects[Path(unit).stem] = out
    return objects


@pytest.mark.parametrize("target_name,sass", [("spark", "sm_121a"), ("thor", "sm_110a")])
def test_plan_then_real_kernels_then_verify(upstream, toolchain, git_cache, tmp_path,  # noqa: F811
                                            target_name, sass):
    nvcc, torch_flags, torch_includes = toolchain
    target = load_target(target_name)
    assert target.kernel_plan.code == "native"
    tree = prepared_tree(upstream, tmp_path / "vllm", target_name, patched=True)
    plan = plan_for_target(tree, target, torch_version="2.14.0", torch_nvcc_flags=torch_flags)
    assert plan.cuda_archs == [target.cuda_arch]
    jobs = {unit: plan.nvcc_args(unit) for unit in UNITS}
    arch = target.cuda_arch.replace(".", "")
    for args in jobs.values():
        assert args[:2] == ["-gencode", f"arch=compute_{arch},code=sm_{arch}"]
        assert "--expt-relaxed-constexpr" in args and "-std=c++20" in args
    objects = compile_units(nvcc, tree, jobs, torch_includes, tmp_path)
    for name, obj in objects.items():
        [report] = scan_path(obj)
        assert report.arches("sass") == [sass], (name, report.arches("sass"))
        assert report.arches("ptx") == []
    planned = {Path(u).stem: [a for a in _arches(plan.flags_for(u))] for u in UNITS}
    rows = compare_with_binaries(planned, {str(o): scan_path(o)[0].arches("sass")
                                           for o in objects.values()})
    assert [agrees for _, _, agrees in rows] == [True, True], rows


def _arches(flags: list[str]) -> list[str]:
    out = []
    for flag in flags:
        code = flag.rsplit("code=sm_", 1)[-1]
        out.append(f"{code[:-2]}.{code[-2:]}" if code[-1] in "af" else f"{code[:-1]}.{code[-1]}")
    return out


def test_spark_without_the_patch_plans_12_0(upstream, git_cache, tmp_path):  # noqa: F811
    tree = prepared_tree(upstream, tmp_path / "vllm", "spark", patched=False)
    plan = plan_for_target(tree, load_target("spark"), torch_version="2.14.0", check=False)
    assert plan.cuda_archs == ["12.0"]
    assert plan.flags_for("csrc/activation_kernels.cu") == ["-gencode arch=compute_120,code=sm_120"]
