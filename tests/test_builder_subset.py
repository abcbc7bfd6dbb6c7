"""A partial kernel build (``--extensions``, builder/subset/plan.py and
builder/subset/inimage_cmake.py): the
``cmake`` that keeps the chosen targets of setup.py's one ``cmake --build``, run on a real CMake
project with the real cmake and ninja; the names checked against the plan; the plan restricted;
the Dockerfile, compile key, lock, label and the wheel's check that follow. A target's
``leave_out`` (FlashAttention 3 on spark and thor) through the same wrapper, whole build or
partial."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from edgevllm.builder.render import render_dockerfile
from edgevllm.builder.runner import compile_key
from edgevllm.builder.subset import plan as subset
from edgevllm.common import labels
from edgevllm.common.errors import ArchGateFailed, SpecError
from edgevllm.sources.kernelplan import Extension, KernelPlan
from edgevllm.specs.buildspec import Builder, choose_mode, load_spec, lock_overrides, resolve

# Two extensions as vLLM defines them (a module each, installed as its own component) and a
# target that runs no command, installed from the source folder (vLLM's triton_kernels).
PROJECT = """cmake_minimum_required(VERSION 3.20)
project(demo C)
add_library(alpha MODULE alpha.c)
add_library(beta MODULE beta.c)
add_custom_target(pyonly)
install(TARGETS alpha LIBRARY DESTINATION pkg COMPONENT alpha)
install(TARGETS beta LIBRARY DESTINATION pkg COMPONENT beta)
install(FILES ${CMAKE_SOURCE_DIR}/pyonly.py DESTINATION pkg COMPONENT pyonly)
"""


@pytest.fixture(scope="module")
def configured(tmp_path_factory):
    """A configured Ninja build folder of ``PROJECT``, and a folder whose ``bin/cmake`` is the
    staged wrapper (the ``edgevllm-extensions`` context)."""
    for tool in ("cmake", "ninja", "cc"):
        assert shutil.which(tool), f"{tool} is needed: apt-get install cmake ninja-build gcc"
    root = tmp_path_factory.mktemp("subset")
    source = root / "src"
    source.mkdir()
    (source / "CMakeLists.txt").write_text(PROJECT)
    for name in ("alpha", "beta"):
        (source / f"{name}.c").write_text(f"int {name}(void) {{ return 1; }}\n")
    (source / "pyonly.py").write_text("X = 1\n")
    build = root / "build"
    subprocess.run(["cmake", "-S", str(source), "-B", str(build), "-G", "Ninja"], check=True,
                   capture_output=True)
    digest = subset.stage(root / "ctx")
    return build, root / "ctx", digest


def run_cmake(ctx: Path, build: Path, args: list[str], chosen: str | None,
              left_out: Path | None = None):
    env = dict(os.environ, PATH=f"{ctx / 'bin'}{os.pathsep}{os.environ['PATH']}")
    env.pop(subset.SETTING, None)
    env.pop(subset.LEAVE_OUT, None)
    if chosen is not None:
        env[subset.SETTING] = chosen
    if left_out is not None:
        env[subset.LEAVE_OUT] = str(left_out)
    return subprocess.run(["cmake", *args], cwd=build, env=env, capture_output=True, text=True)


def clean(build: Path) -> None:
    subprocess.run(["cmake", "--build", ".", "--target", "clean"], cwd=build, check=True,
                   capture_output=True)
    shutil.rmtree(build / "pkg", ignore_errors=True)


def install_all(ctx: Path, build: Path, prefix: Path, chosen: str | None,
                left_out: Path | None) -> dict[str, str]:
    """setup.py's installs, one per component: what each said on stderr."""
    said = {}
    for component in ("alpha", "beta", "pyonly"):
        done = run_cmake(ctx, build, ["--install", ".", "--prefix", str(prefix),
                                      "--component", component], chosen, left_out)
        assert done.returncode == 0, done.stderr
        said[component] = done.stderr
    return said


ALL = ["--build", ".", "-j=2", "--target=alpha", "--target=beta", "--target=pyonly"]


def test_a_target_left_out_is_neither_built_nor_installed_and_says_why(configured, tmp_path):
    """A whole build (no chosen extensions) with the target's leave-out: setup.py's one
    ``cmake --build`` loses the left-out target, its install is nothing, both say why."""
    build, ctx, _ = configured
    clean(build)
    listed = tmp_path / subset.LEAVE_OUT_FILE
    listed.write_text(json.dumps({"beta": "Hopper only"}))
    done = run_cmake(ctx, build, ALL, None, listed)
    assert done.returncode == 0, done.stderr
    assert (build / "libalpha.so").is_file() and not (build / "libbeta.so").exists()
    assert ("edgevllm extensions: cmake --build: alpha, pyonly; left out by the target: beta "
            "(Hopper only)") in done.stderr
    said = install_all(ctx, build, tmp_path / "prefix", None, listed)
    assert sorted(p.name for p in (tmp_path / "prefix" / "pkg").iterdir()) == [
        "libalpha.so", "pyonly.py"]
    assert "--component beta: skipped (left out by the target: Hopper only)" in said["beta"]
    assert "edgevllm" not in said["alpha"] + said["pyonly"]


def test_a_partial_build_of_a_target_that_leaves_out_keeps_both_rules(configured, tmp_path):
    build, ctx, _ = configured
    clean(build)
    listed = tmp_path / subset.LEAVE_OUT_FILE
    listed.write_text(json.dumps({"beta": "Hopper only"}))
    done = run_cmake(ctx, build, ALL, "alpha,beta", listed)
    assert done.returncode == 0, done.stderr
    assert (build / "libalpha.so").is_file() and not (build / "libbeta.so").exists()
    assert ("cmake --build: alpha, pyonly; left out (not asked for): -; left out by the "
            "target: beta (Hopper only)") in done.stderr
    said = install_all(ctx, build, tmp_path / "prefix", "alpha,beta", listed)
    assert "left out by the target" in said["beta"]


def test_a_leave_out_file_that_cannot_be_read_stops_the_build_in_one_line(configured, tmp_path):
    build, ctx, _ = configured
    (tmp_path / "bad.json").write_text("[1, 2]")
    for listed in (tmp_path / "bad.json", tmp_path / "absent.json"):
        done = run_cmake(ctx, build, ALL, None, listed)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith(f"edgevllm extensions: error: {subset.LEAVE_OUT}=")


def test_only_the_chosen_targets_build_and_install(configured, tmp_path):
    build, ctx, _ = configured
    shutil.rmtree(build / "pkg", ignore_errors=True)
    done = run_cmake(ctx, build, ["--build", ".", "-j=2", "--target=alpha", "--target=beta",
                                  "--target=pyonly"], "alpha")
    assert done.returncode == 0, done.stderr
    assert (build / "libalpha.so").is_file() and not (build / "libbeta.so").exists()
    assert "cmake --build: alpha, pyonly; left out (not asked for): beta" in done.stderr
    prefix = tmp_path / "prefix"
    said = {}
    for component in ("alpha", "beta", "pyonly"):
        done = run_cmake(ctx, build, ["--install", ".", "--prefix", str(prefix),
                                      "--component", component], "alpha")
        assert done.returncode == 0, done.stderr
        said[component] = done.stderr
    assert sorted(p.name for p in (prefix / "pkg").iterdir()) == ["libalpha.so", "pyonly.py"]
    assert "--component beta: skipped" in said["beta"] and "edgevllm" not in said["alpha"]


def test_without_the_setting_every_call_is_the_real_cmakes(configured):
    build, ctx, _ = configured
    done = run_cmake(ctx, build, ["--build", ".", "--target", "alpha", "beta"], None)
    assert done.returncode == 0, done.stderr
    assert (build / "libbeta.so").is_file() and "edgevllm" not in done.stderr
    assert run_cmake(ctx, build, ["--version"], "alpha").stdout.startswith("cmake version")


def test_the_argument_forms_of_a_target():
    from edgevllm.builder.subset.inimage_cmake import split_targets

    assert split_targets(["--build", ".", "--target=a", "-t", "b", "c", "-j", "2"]) == (
        ["--build", ".", "-j", "2"], ["a", "b", "c"])


def plan() -> KernelPlan:
    ext = [Extension(name=n, file="CMakeLists.txt", line=1, language=lang, arches=[], kind="",
                     cuda_sources=units) for n, lang, units in
           [("cumem_allocator", "CXX", 0), ("spinloop", "CXX", 0),
            ("_C_stable_libtorch", "CUDA", 61)]]
    return KernelPlan(arch_list="12.1a", device_arch="12.1a", cuda_version="13.0",
                      cuda_archs=["12.1a"], extensions=ext)


def test_names_are_the_plans_and_the_plan_is_restricted_to_them():
    with pytest.raises(SpecError, match=r"field 'extensions' \(--extensions\): _moe_C is not a "
                                        r"CMake extension .*cumem_allocator, spinloop, _C_stable"):
        subset.restrict(plan(), ["cumem_allocator", "_moe_C"])
    restricted = subset.restrict(plan(), ["spinloop", "cumem_allocator"])
    assert [e.name for e in restricted.extensions] == ["cumem_allocator", "spinloop"]  # plan order
    note = subset.partial_note(["cumem_allocator"], plan())
    assert note.startswith("a partial kernel build: 1 of 3 extensions") and "cannot serve" in note


def test_a_partial_build_compiles_and_a_prebuilt_one_refuses_it():
    spec = load_spec("spark", overrides={"extensions": ["cumem_allocator"]})
    mode, why = choose_mode(spec, builder=Builder("amd64"))
    assert mode == "compile" and "partial kernel build" in why
    with pytest.raises(SpecError, match="field 'extensions'.*needs mode compile, not prebuilt"):
        choose_mode(load_spec("spark", overrides={"extensions": ["spinloop"],
                                                   "mode": "prebuilt"}))


def test_the_names_change_the_dockerfile_and_so_the_compile_key():
    whole = resolve(load_spec("spark", overrides={"mode": "compile"}), builder=Builder("amd64"))
    part = resolve(load_spec("spark", overrides={"mode": "compile",
                                                 "extensions": ["cumem_allocator", "spinloop"]}),
                   builder=Builder("amd64"))
    text = render_dockerfile(part)
    assert (f'PATH="{labels.EXTENSIONS_MOUNT}/bin:$PATH" '
            f"{subset.SETTING}=cumem_allocator,spinloop {subset.LEAVE_OUT}="
            f"{labels.EXTENSIONS_MOUNT}/{subset.LEAVE_OUT_FILE} pip wheel") in text
    assert f"from={subset.CONTEXT}," in text
    keys = {compile_key(render_dockerfile(e), {}, {}, {}) for e in (whole, part)}
    assert len(keys) == 2


def without_leave_out(eff):
    return eff.model_copy(update={"target": eff.target.model_copy(update={"leave_out": {}})})


def test_a_whole_build_that_leaves_out_never_shares_a_key_with_a_full_one(tmp_path):
    """spark's whole compile runs the wrapper with the leave-out (no chosen names); the same
    build with nothing left out renders no wrapper; the keys differ by text and by the staged
    context's digest (which moves with the reasons too)."""
    whole = resolve(load_spec("spark", overrides={"mode": "compile"}), builder=Builder("amd64"))
    text, full = render_dockerfile(whole), render_dockerfile(without_leave_out(whole))
    assert (f'PATH="{labels.EXTENSIONS_MOUNT}/bin:$PATH" {subset.LEAVE_OUT}='
            f"{labels.EXTENSIONS_MOUNT}/{subset.LEAVE_OUT_FILE} pip wheel") in text
    assert subset.SETTING not in text and "_vllm_fa3_C" in text
    assert subset.CONTEXT not in full and subset.LEAVE_OUT not in full
    assert compile_key(text, {}, {}, {}) != compile_key(full, {}, {}, {})
    digests = {subset.stage(tmp_path / "a", whole.target.leave_out),
               subset.stage(tmp_path / "b", {"_vllm_fa3_C": "another reason"}),
               subset.stage(tmp_path / "c")}
    assert len(digests) == 3
    assert json.loads((tmp_path / "a" / subset.LEAVE_OUT_FILE).read_text()) == \
        whole.target.leave_out
    assert not (tmp_path / "c" / subset.LEAVE_OUT_FILE).exists()


def test_the_lock_records_the_names_and_rebuilds_them():
    from edgevllm.specs.lock import Lock

    settings = subset.lock_settings(["cumem_allocator"])
    lock = Lock(target="spark", mode="compile", settings={"mode": "compile", **settings})
    assert lock_overrides(lock)["extensions"] == ["cumem_allocator"]
    assert subset.lock_settings(None) == {}
    found = subset.label(settings)[labels.EXTENSIONS]
    assert found == '{"partial":true,"extensions":["cumem_allocator"],"serves":false}'
    assert subset.label({}) == {}


def test_the_lock_and_label_record_what_the_target_left_out_and_preflight_says_it():
    from edgevllm.specs.lock import Lock
    from edgevllm.specs.targets import load_target

    left_out = load_target("spark").leave_out
    settings = subset.lock_settings(None, left_out)
    assert settings == {"left_out": left_out}
    lock = Lock(target="spark", mode="compile", settings={"mode": "compile", **settings})
    assert "left_out" not in lock_overrides(lock)   # the rebuild's target data says it again
    assert json.loads(subset.label(settings)[labels.EXTENSIONS]) == {
        "partial": False, "left_out": ["_vllm_fa3_C"], "serves": True}
    both = subset.lock_settings(["spinloop"], left_out)
    assert json.loads(subset.label(both)[labels.EXTENSIONS]) == {
        "partial": True, "extensions": ["spinloop"], "left_out": ["_vllm_fa3_C"],
        "serves": False}
    assert subset.left_out_note(left_out) == (
        "left out: _vllm_fa3_C (FlashAttention 3: sm_90a only, no code for 12.1a (vLLM uses "
        "FlashAttention 2 without it))")
    assert subset.left_out_note({}) == ""


def write_wheel(folder: Path, members: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(folder / "vllm-0.33.0-cp38-abi3-linux_aarch64.whl", "w") as archive:
        for member in members:
            archive.writestr(member, b"\x7fELF")


def test_the_wheel_must_hold_every_extension_asked_for_and_no_other(tmp_path):
    settings = subset.lock_settings(["cumem_allocator", "spinloop"])
    write_wheel(tmp_path / "ok", ["vllm/cumem_allocator.abi3.so", "vllm/spinloop.abi3.so",
                                  "vllm/__init__.py"])
    subset.check_wheels(settings, tmp_path / "ok")   # no _C_stable_libtorch: not asked for
    write_wheel(tmp_path / "short", ["vllm/cumem_allocator.abi3.so"])
    with pytest.raises(ArchGateFailed, match="asked for spinloop, and the vLLM wheel holds no"):
        subset.check_wheels(settings, tmp_path / "short")
    subset.check_wheels({}, tmp_path / "short")      # a whole build: nothing to check here
    # a whole build that left FlashAttention 3 out: its wheel lacks it, and nothing asks for it
    left = subset.lock_settings(None, {"_vllm_fa3_C": "Hopper only"})
    write_wheel(tmp_path / "whole", ["vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so"])
    subset.check_wheels(left, tmp_path / "whole")


def test_preflight_names_what_the_target_leaves_out_in_one_line(tmp_path, capsys):
    """The compile's kernel plan (builder/tree.kernel_plan, preflight) on the real vLLM 0.33.0
    tree (sdist from PyPI) for thor says the leave-out in one line."""
    from edgevllm.builder.tree import kernel_plan
    from edgevllm.sources.prepare import PreparedSource
    from support.sdists import sdist_tree_cached

    assert shutil.which("cmake"), "cmake is needed: apt-get install cmake"
    tree = sdist_tree_cached("vllm", "0.33.0", ["CMakeLists.txt", "cmake/", "setup.py",
                                                "pyproject.toml", "rust-toolchain.toml",
                                                "rust/Cargo.toml"])
    eff = resolve(load_spec("thor", overrides={"mode": "compile"}), builder=Builder("amd64"))
    prepared = PreparedSource(name="vllm", repo="sdist", base_sha="0" * 40, commit="0" * 40,
                              tree_hash="0" * 40, version="0.33.0", tree_dir=tree)
    kernel_plan(eff, prepared)
    said = [line for line in capsys.readouterr().err.splitlines() if "left out:" in line]
    assert said == ["  left out: _vllm_fa3_C (FlashAttention 3: sm_90a only, no code for 11.0a "
                    "(vLLM uses FlashAttention 2 without it))"], said
