"""A partial kernel build (``--extensions``, builder/subset.py and builder/cmake_subset.py): the
``cmake`` that keeps the chosen targets of setup.py's one ``cmake --build``, run on a real CMake
project with the real cmake and ninja; the names checked against the plan; the plan restricted;
the Dockerfile, compile key, lock, label and the wheel's check that follow."""

from __future__ import annotations

import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from edgevllm.builder import subset
from edgevllm.builder.render import render_dockerfile
from edgevllm.builder.runner import compile_key
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


def run_cmake(ctx: Path, build: Path, args: list[str], chosen: str | None):
    env = dict(os.environ, PATH=f"{ctx / 'bin'}{os.pathsep}{os.environ['PATH']}")
    env.pop(subset.SETTING, None)
    if chosen is not None:
        env[subset.SETTING] = chosen
    return subprocess.run(["cmake", *args], cwd=build, env=env, capture_output=True, text=True)


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
    from edgevllm.builder.cmake_subset import split_targets

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
            f"{subset.SETTING}=cumem_allocator,spinloop pip wheel") in text
    assert f"from={subset.CONTEXT}," in text and subset.CONTEXT not in render_dockerfile(whole)
    keys = {compile_key(render_dockerfile(e), {}, {}, {}) for e in (whole, part)}
    assert len(keys) == 2


def test_the_lock_records_the_names_and_rebuilds_them():
    from edgevllm.specs.lock import Lock

    settings = subset.lock_settings(["cumem_allocator"])
    lock = Lock(target="spark", mode="compile", settings={"mode": "compile", **settings})
    assert lock_overrides(lock)["extensions"] == ["cumem_allocator"]
    assert subset.lock_settings(None) == {}
    found = subset.label(settings)[labels.EXTENSIONS]
    assert found == '{"partial":true,"extensions":["cumem_allocator"],"serves":false}'
    assert subset.label({}) == {}


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
