"""The kernel plan on the real vLLM 0.33.0 tree (sdist from PyPI), evaluated by its own CMake.

The expected arches are the ones vLLM's CMake gives for CUDA 13.0 (its real configure prints
them as "CUDA supported target architectures"; `python bench/compile_slice.py --target spark`
runs that configure beside the plan where GitHub is reachable): Thor 11.0a stays 11.0a; Spark
12.1a becomes 12.0 without the vllm-cmake-keep-121a patch and stays 12.1a with it. A git
repository made from the sdist stands in for the GitHub clone in the CLI tests.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from edgevllm.common.errors import PlanError, PlanGapError
from edgevllm.mods.patches import apply_source_patches
from edgevllm.sources.plan import (
    check_required,
    check_target,
    compare_with_binaries,
    evaluate_plan,
    plan_for_target,
    torch_gencode_flags,
)
from edgevllm.specs.targets import load_target
from support.gitfixtures import assert_one_error_line, git_cache, make_upstream_repo, run_cli  # noqa: F401
from support.sdists import sdist_tree_cached

PLAN_FILES = ["CMakeLists.txt", "cmake/", "setup.py", "pyproject.toml", "rust-toolchain.toml",
              "rust/Cargo.toml"]


@pytest.fixture(scope="module")
def vllm_tree() -> Path:
    if shutil.which("cmake") is None:
        pytest.fail("cmake is missing: install cmake >= 3.25 (apt-get install cmake)")
    return sdist_tree_cached("vllm", "0.33.0", PLAN_FILES)


@pytest.fixture()
def tree(vllm_tree, tmp_path) -> Path:
    copy = tmp_path / "vllm"
    shutil.copytree(vllm_tree, copy)
    return copy


def plan(tree: Path, arch: str):
    return evaluate_plan(tree, arch, cuda_version="13.0.2", device_arch=arch,
                         torch_version="2.14.0")


def groups_with(plan_, kind: str) -> set[str]:
    return {g.name for g in plan_.groups if g.kind == kind}


def test_thor_11_0a_stays_and_the_groups_that_get_nothing(tree):
    thor = plan(tree, "11.0a")
    assert thor.cuda_archs == ["11.0a"]
    assert thor.group("CUDA_ARCHS").where == "CMakeLists.txt:228"
    assert thor.group("FP4_SM100_ARCHS").result == ["11.0a"]
    assert thor.group("FP4_SM100_ARCHS").kind == "native"
    assert {"MACHETE_ARCHS", "W4A8_ARCHS", "MARLIN_FP8_ARCHS", "FUSED_KDA_DECODE_ARCHS",
            "DEEPGEMM_ARCHS", "FLASH_KDA_ARCHS", "FLASH_MLA_ARCHS", "DEEPSELECT_ARCHS",
            "QUTLASS_SM120_ARCHS"} <= groups_with(thor, "none")
    # PTX only: the driver JITs them at first use.
    for name in ("MARLIN_ARCHS", "MARLIN_BF16_ARCHS", "HADACORE_ARCHS", "MARLIN_MOE_ARCHS"):
        assert thor.group(name).kind == "ptx", name
    assert thor.group("MARLIN_ARCHS").result == ["8.0+PTX"]
    deepgemm = thor.group("DEEPGEMM_ARCHS")
    assert deepgemm.file == "cmake/external_projects/deepgemm.cmake"
    assert deepgemm.requested == ["9.0a", "10.0f", "12.0f"]
    assert thor.group("MACHETE_ARCHS").label.startswith("Not building Machete kernels")


def test_spark_12_1a_becomes_12_0_without_the_patch(tree):
    spark = plan(tree, "12.1a")
    assert spark.cuda_archs == ["12.0"]
    assert spark.group("CUDA_ARCHS").kind == "family"   # runs on GB10, but not what was asked
    assert spark.group("FP4_SM120_ARCHS").result == ["12.0f"]
    assert {"MACHETE_ARCHS", "W4A8_ARCHS", "MLA_ARCHS", "FP4_SM100_ARCHS", "FLASH_MLA_ARCHS",
            "DEEPSELECT_ARCHS"} <= groups_with(spark, "none")
    assert not groups_with(spark, "native")
    ext = {e.name: e for e in spark.extensions}
    assert ext["_C_stable_libtorch"].kind == "family" and "12.0" in ext["_C_stable_libtorch"].arches
    assert spark.flags_for("csrc/activation_kernels.cu") == [
        "-gencode arch=compute_120,code=sm_120"]


def test_spark_with_the_patch_keeps_12_1a(tree):
    [outcome] = apply_source_patches(tree, "spark", "0.33.0")
    assert outcome["outcome"] == "applied"
    spark = plan(tree, "12.1a")
    assert spark.cuda_archs == ["12.1a"]
    for name in ("FP4_SM120_ARCHS", "MARLIN_ARCHS", "CUTLASS_MOE_DATA_ARCHS", "DEEPGEMM_ARCHS"):
        assert spark.group(name).result == ["12.1a"], name
    assert spark.flags_for("csrc/layernorm_kernels.cu") == [
        "-gencode arch=compute_121a,code=sm_121a"]
    check_target(spark, load_target("spark"))  # every needed group is native now


def test_external_dependencies_with_their_overrides(tree):
    deps = {d.name: d for d in plan(tree, "11.0a").deps}
    assert set(deps) == {"cutlass", "vllm-flash-attn", "flashmla", "deepgemm", "deepselect",
                         "flashkda", "fmha_sm100", "qutlass", "tml_fa4", "triton_kernels"}
    assert (deps["cutlass"].repo, deps["cutlass"].tag) == ("https://github.com/nvidia/cutlass.git",
                                                           "v4.7.1")
    assert deps["cutlass"].env_var == "VLLM_CUTLASS_SRC_DIR"
    assert deps["vllm-flash-attn"].tag == "b273a02621d3c94bc747df67204f591b67f38fae"
    assert deps["vllm-flash-attn"].env_var == "VLLM_FLASH_ATTN_SRC_DIR"
    assert deps["qutlass"].env_var == "QUTLASS_SRC_DIR"
    assert all(d.env_var for d in deps.values())
    # The one override that stands for a folder inside its clone (its declare has no
    # SOURCE_SUBDIR, the clone's has): every other override is the clone's root.
    assert {n: d.override_subdir for n, d in deps.items() if d.override_subdir} == {
        "triton_kernels": "python/triton_kernels/triton_kernels"}


def test_nothing_is_written_into_the_tree(tree):
    before = sorted(p.relative_to(tree) for p in tree.rglob("*"))
    plan(tree, "12.1a")
    assert sorted(p.relative_to(tree) for p in tree.rglob("*")) == before


def test_a_needed_group_with_too_little_fails_naming_group_and_line(tree):
    spark = plan(tree, "12.1a")  # unpatched: 12.0
    with pytest.raises(PlanGapError) as info:
        check_target(spark, load_target("spark"))
    message = str(info.value)
    assert "needed group CUDA_ARCHS gets family (12.0), needs native" in message
    assert "CMakeLists.txt:228" in message and "\n" not in message
    check_required(spark, {"CUDA_ARCHS": "native"}, "spark", code="family")  # family: enough
    thor = plan(tree, "11.0a")
    with pytest.raises(PlanGapError, match=r"DEEPGEMM_ARCHS gets none .*/deepgemm.cmake:91"):
        check_required(thor, {"DEEPGEMM_ARCHS": "ptx"}, "thor")
    with pytest.raises(PlanGapError,
                       match=re.escape("'NO_SUCH_ARCHS|OTHER' is not in the tree's CMake")):
        check_required(thor, {"NO_SUCH_ARCHS|OTHER": "ptx"}, "thor")


def test_bad_trees_fail_with_one_line(tree, tmp_path):
    with pytest.raises(PlanError, match=r"no CMakeLists.txt; this is not a vLLM source tree"):
        plan(tmp_path / "empty", "12.1a")
    with pytest.raises(PlanError, match=r"refuses 7.0: CMakeLists.txt:232: No supported CUDA"):
        plan(tree, "7.0")
    broken = tree / "CMakeLists.txt"
    broken.write_text(broken.read_text().replace("if(VLLM_GPU_LANG STREQUAL \"CUDA\")\n",
                                                 "if(VLLM_GPU_LANG STREQUAL \"CUDA\"\n", 1))
    with pytest.raises(PlanError) as info:
        plan(tree, "12.1a")
    assert "cannot be evaluated" in str(info.value) and "CMakeLists.txt:" in str(info.value)
    assert "\n" not in str(info.value) and "_ev_" not in str(info.value)
    with pytest.raises(PlanError, match="'12.1x' is not like 12.1a"):
        torch_gencode_flags("12.1x")


def test_torch_gencode_flags():
    assert torch_gencode_flags("11.0a 8.0+PTX") == ("-gencode arch=compute_110a,code=sm_110a "
                                                    "-gencode arch=compute_80,code=sm_80 "
                                                    "-gencode arch=compute_80,code=compute_80")


def test_plan_against_binaries():
    rows = compare_with_binaries(
        {"_C_stable_libtorch": ["12.1a", "8.0+PTX"], "_qutlass_C": ["12.1a"], "_absent": ["12.1a"]},
        {"/opt/venv/lib/python3.12/site-packages/vllm/_C_stable_libtorch.abi3.so":
            ["sm_121a", "sm_80", "compute_80"],
         "/x/vllm/_qutlass_C.abi3.so": ["sm_120"]})
    assert rows == [("_C_stable_libtorch", "plan: 12.1a;8.0+PTX; binary: compute_80, sm_121a, "
                     "sm_80", True),
                    ("_qutlass_C", "plan: 12.1a; binary: sm_120", False)]


def test_plan_for_target_reads_the_target(tree):
    thor = plan_for_target(tree, load_target("thor"), torch_version="2.14.0")
    assert thor.arch_list == "11.0a" and thor.cuda_version == "13.0.2"
    assert thor.rust_frontend.startswith("absent: the tree's Rust frontend (vllm-rs)")
    summary = thor.summary()
    assert summary["groups"]["CUDA_ARCHS"] == {"gets": ["11.0a"], "kind": "native",
                                               "at": "CMakeLists.txt:228"}
    assert "MACHETE_ARCHS" in summary["none"]


# --- inv plan, on a git repository made from the sdist --------------------------------------------
@pytest.fixture(scope="module")
def sdist_upstream(vllm_tree, tmp_path_factory):
    upstream = make_upstream_repo(tmp_path_factory.mktemp("remote"), vllm_tree)
    upstream.git("update-ref", "-d", "refs/tags/v0.1.0")  # the release tag says what version it is
    upstream.git("update-ref", "refs/tags/v0.33.0", upstream.shas["c1"])
    return upstream


def test_inv_plan_spark_prints_the_table_in_seconds(sdist_upstream, git_cache, tmp_path):  # noqa: F811
    out = tmp_path / "plan.json"
    proc = run_cli("plan", "--target", "spark", "--vllm-repo", sdist_upstream.url,
                   "--vllm-ref", "v0.33.0", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "patch vllm-cmake-keep-121a: applied" in proc.stderr
    assert "12.1a → CUDA_ARCHS 12.1a" in proc.stdout
    assert "compile nothing for 12.1a: MACHETE_ARCHS" in proc.stdout
    assert "clones cutlass: https://github.com/nvidia/cutlass.git @ v4.7.1" in proc.stdout
    data = json.loads(out.read_text())
    assert data["target"] == "spark" and data["cuda_archs"] == ["12.1a"]
    machete = next(g for g in data["groups"] if g["name"] == "MACHETE_ARCHS")
    assert (machete["kind"], machete["line"]) == ("none", 553)


def test_inv_plan_fails_when_a_needed_group_gets_too_little(sdist_upstream, git_cache, tmp_path):  # noqa: F811
    targets = tmp_path / "targets"
    targets.mkdir()
    spark = (Path(__file__).parents[1] / "targets" / "spark.yaml").read_text()
    # A target (a user's own file) that needs Machete, which vLLM builds for 9.0a only.
    needs_machete = "MARLIN_ARCHS: native\n    MACHETE_ARCHS: ptx"
    (targets / "spark.yaml").write_text(spark.replace("MARLIN_ARCHS: native", needs_machete))
    proc = run_cli("plan", "--target", "spark", "--vllm-repo", sdist_upstream.url,
                   "--vllm-ref", "v0.33.0", env={"EDGEVLLM_TARGETS_PATH": str(targets)})
    assert "compile nothing for 12.1a" in proc.stdout  # the table comes first
    assert_one_error_line(proc, "needed group MACHETE_ARCHS gets none", "CMakeLists.txt:553")
    assert proc.returncode == 5


def test_inv_plan_family_code_skips_the_patch(sdist_upstream, git_cache, tmp_path):  # noqa: F811
    targets = tmp_path / "targets"
    targets.mkdir()
    spark = (Path(__file__).parents[1] / "targets" / "spark.yaml").read_text()
    (targets / "spark.yaml").write_text(spark.replace("  code: native", "  code: family"))
    proc = run_cli("plan", "--target", "spark", "--vllm-repo", sdist_upstream.url,
                   "--vllm-ref", "v0.33.0", env={"EDGEVLLM_TARGETS_PATH": str(targets)})
    assert proc.returncode == 0, proc.stderr
    assert "vllm-cmake-keep-121a" not in proc.stderr
    assert "12.1a → CUDA_ARCHS 12.0" in proc.stdout


def test_inv_plan_on_a_folder_without_cmakelists(tmp_path):
    (tmp_path / "notvllm").mkdir()
    proc = run_cli("plan", "--target", "thor", "--tree", str(tmp_path / "notvllm"))
    assert_one_error_line(proc, "no CMakeLists.txt; this is not a vLLM source tree")


def test_rust_frontend_env_is_refused_for_an_image_without_it(tree):
    from edgevllm.sources.plan import check_rust_env

    thor = plan_for_target(tree, load_target("thor"), torch_version="2.14.0")
    check_rust_env(thor, {"VLLM_USE_RUST_FRONTEND": "0"})
    with pytest.raises(PlanError, match=r"--env VLLM_USE_RUST_FRONTEND=1: edgevllm images do "
                                        r"not carry vLLM's Rust frontend \(vllm-rs"):
        check_rust_env(thor, {"VLLM_USE_RUST_FRONTEND": "1"})


def test_rust_decision_evidence_in_the_sdist():
    """Why images go without vllm-rs: in 0.33.0 it is one optional executable, no Python module
    imports Rust, and vLLM reaches it only behind VLLM_USE_RUST_FRONTEND / _BENCH."""
    files = sdist_tree_cached("vllm", "0.33.0", ["tools/build_rust.py", "vllm/envs.py"])
    build_rust = (files / "tools/build_rust.py").read_text()
    live = [ln for ln in build_rust.splitlines() if not ln.lstrip().startswith("#")]
    assert sum("RustExtension(" in ln for ln in live) == 1       # only vllm-rs
    assert any("binding=Binding.Exec" in ln for ln in live)      # an executable, not a module
    assert not any("Binding.PyO3," in ln for ln in live)
    assert "optional=optional" in build_rust
    envs = (files / "vllm/envs.py").read_text()
    assert '"VLLM_USE_RUST_FRONTEND"' in envs and "vllm-rs binary was" in envs


@pytest.mark.parametrize("make", ["no-cmakelists", "link-in-cmake"])
def test_inv_plan_refusals_name_the_users_tree_not_its_copy(tmp_path, make):
    given = tmp_path / "mytree"
    (given / "cmake").mkdir(parents=True)
    if make == "link-in-cmake":
        (given / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.26)\n"
                                              "project(vllm)\ninclude(cmake/evil.cmake)\n")
        (given / "cmake" / "evil.cmake").symlink_to("/etc/hostname")
    proc = run_cli("plan", "--target", "thor", "--tree", str(given))
    assert proc.returncode != 0 and proc.stderr.startswith(f"error: {given}"), proc.stderr
    assert "edgevllm-plan-" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
