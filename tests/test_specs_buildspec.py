"""specs.moderule.choose_mode, the one mode rule (asked by buildspec.resolve): the least work that
gives what was asked, for the builder that would run it (its architecture passed explicitly here;
the CLI asks the engine)."""

from __future__ import annotations

import pytest

from edgevllm.builder.estimate import (
    CROSS_FACTOR,
    EMULATION_FACTOR,
    GRAPH_FACTOR,
    UNIT_CORE_MINUTES,
    cross_compile_line,
    cross_compile_minutes,
    emulated_compile_line,
    emulated_compile_minutes,
)
from edgevllm.common.errors import SpecError
from edgevllm.specs.buildspec import (
    Builder,
    BuildSpec,
    choose_mode,
    load_spec,
    lock_overrides,
    prebuilt_wheel,
    release_of,
    resolve,
    stock_kernel_note,
)
from edgevllm.specs.lock import BaseImageLock, Lock
from edgevllm.specs.targets import load_target

X86 = Builder(arch="amd64")   # a workstation: linux/arm64 would run under qemu
ARM = Builder(arch="arm64")   # a Spark, a Thor, or an arm64 engine


def spec(target: str = "spark", **fields):
    return load_spec(target, overrides=fields)


@pytest.mark.parametrize("target", ["spark", "thor"])
def test_a_release_under_emulation_is_prebuilt_and_says_what_it_costs(target):
    mode, reason = choose_mode(spec(target), builder=X86)
    assert mode == "prebuilt"
    arch = load_target(target).cuda_arch
    assert reason.startswith("vllm 0.33.0 with nothing on top: the released wheel, stock "
                             f"kernels, the stock-kernel gate; --compile cross-compiles {arch} "
                             "on this amd64 builder")
    mode, reason = choose_mode(spec(target, toolchain="emulated"), builder=X86)
    assert mode == "prebuilt" and "--compile compiles linux/arm64 under emulation" in reason
    eff = resolve(spec(target), builder=X86)
    assert eff.images.runtime == eff.target.prebuilt.image
    note = stock_kernel_note(eff)
    assert f"against a {eff.target.cuda_arch} compile" in note
    assert f"inv verify --target {target} --path" in note


@pytest.mark.parametrize("target", ["spark", "thor"])
def test_a_release_on_a_native_builder_compiles(target):
    mode, reason = choose_mode(spec(target), builder=ARM)
    assert mode == "compile" and reason.startswith("vllm 0.33.0 on a native arm64 builder")


def test_compile_asked_for_compiles_even_under_emulation():
    assert choose_mode(spec(mode="compile"), builder=X86) == ("compile", "mode compile asked for")


@pytest.mark.parametrize("target", ["spark", "thor"])
def test_a_compile_on_an_x86_builder_cross_compiles_unless_emulation_is_asked(target):
    """The toolchain of a compile (specs/cross.compile_toolchain): cross by default on amd64
    for linux/arm64, the cross g++ joins the build base's packages; emulated when asked;
    native on the target's own platform; cross asked where no road goes is one line."""
    eff = resolve(spec(target, mode="compile"), builder=X86)
    assert eff.cross is not None and eff.cross.cuda_target_dir == "sbsa-linux"
    assert eff.toolchain == "cross"
    assert "g++-aarch64-linux-gnu" in eff.apt_packages
    emulated = resolve(spec(target, mode="compile", toolchain="emulated"), builder=X86)
    assert (emulated.toolchain, emulated.cross) == ("emulated", None)
    assert "g++-aarch64-linux-gnu" not in emulated.apt_packages
    native = resolve(spec(target, mode="compile"), builder=ARM)
    assert (native.toolchain, native.cross) == ("native", None)
    with pytest.raises(SpecError, match="builds linux/arm64 natively; drop --toolchain cross"):
        resolve(spec(target, mode="compile", toolchain="cross"), builder=ARM)
    with pytest.raises(SpecError, match="no cross road from linux/arm64 to linux/amd64"):
        resolve(spec(target, mode="compile", toolchain="cross", platform="linux/amd64"),
                builder=ARM)
    given = resolve(BuildSpec(target=target, mode="compile", apt_packages=[]), builder=X86)
    assert given.toolchain == "cross" and given.apt_packages == []  # the user's base has it
    prebuilt = resolve(spec(target), builder=X86)
    assert (prebuilt.toolchain, prebuilt.cross) == ("native", None)  # nothing compiles


def test_flashinfer_from_source_takes_the_cross_road_like_the_rest_of_the_compile():
    """FlashInfer from source compiles on the cross road too (its flashinfer-build stage is FROM
    the cross build-env); nothing sends it to the emulated road but asking."""
    flashinfer = {"source": {"repo": "flashinfer-ai/flashinfer", "ref": "v0.7.2"}}
    eff = resolve(spec(flashinfer=flashinfer), builder=X86)
    assert (eff.mode, eff.toolchain) == ("compile", "cross")
    assert eff.cross is not None and eff.cross.target_platform == "linux/arm64"
    assert resolve(spec(flashinfer=flashinfer, toolchain="cross"), builder=X86).toolchain == "cross"
    asked = resolve(spec(flashinfer=flashinfer, toolchain="emulated"), builder=X86)
    assert asked.toolchain == "emulated"
    assert asked.toolchain_reason == "--toolchain emulated asked for"
    assert resolve(spec(flashinfer=flashinfer), builder=ARM).toolchain == "native"


def test_a_lock_rebuild_says_the_mode_is_the_locks():
    mode, reason = choose_mode(spec(mode="compile", mode_from_lock=True), builder=X86)
    assert mode == "compile" and reason.startswith("the lock's mode (compile)")


def test_existing_compiled_wheels_are_reused():
    found = Builder(arch="amd64", compiled_wheels="out/spark/wheels/0123456789abcdef")
    mode, reason = choose_mode(spec(), builder=found)
    assert mode == "compile" and "out/spark/wheels/0123456789abcdef" in reason
    assert "nothing compiles" in reason


@pytest.mark.parametrize("fields, why", [
    ({"vllm": {"ref": "main"}}, "is not a vLLM release"),
    ({"vllm": {"repo": "someone/vllm", "ref": "v0.33.0"}}, "is not a vLLM release"),  # a fork
    ({"flashinfer": {"source": {"repo": "flashinfer-ai/flashinfer", "ref": "v0.7.2"}}},
     "FlashInfer from source"),
])
def test_what_only_a_compile_gives_compiles_under_emulation(fields, why):
    mode, reason = choose_mode(spec(**fields), builder=X86)
    assert mode == "compile" and why in reason, reason


def test_a_source_patch_of_compiled_code_compiles():
    patched = Builder(arch="amd64", source_patches=("keep-my-kernel",))
    mode, reason = choose_mode(spec(), builder=patched)
    assert mode == "compile" and "keep-my-kernel" in reason


def test_a_wheel_or_an_unknown_builder_keep_their_modes():
    assert choose_mode(spec(vllm_wheel="0.33.0"), builder=ARM)[0] == "prebuilt"
    assert choose_mode(spec())[0] == "compile"   # inv plan: no builder to ask


def test_release_of_and_the_wheel_prebuilt_installs():
    assert release_of(spec()) == "0.33.0"
    older = spec(vllm={"ref": "v0.20.2"})
    assert release_of(older) == "0.20.2" and prebuilt_wheel(older) == "0.20.2"
    assert release_of(spec(vllm={"ref": "v0.33.0", "pr": 5})) is None
    assert release_of(spec(vllm={"repo": "vllm-project/vllm", "ref": "0.33.0"})) == "0.33.0"


def test_a_compile_lock_rebuilds_as_a_compile_on_any_builder():
    data = lock_overrides(Lock(target="spark", mode="compile"))
    assert data["mode"] == "compile"
    rebuilt = load_spec("spark", overrides=data)
    assert choose_mode(rebuilt, builder=X86)[0] == "compile"


def test_a_lock_rebuilds_with_the_bytecode_base_it_was_built_with():
    """The byte-code base is one of the lock's base images (``base_images.bytecode``): a rebuild
    names it by its digest where the lock has one, by its ref where it was local only; a lock
    made before (the ref in ``settings``) still rebuilds with it."""
    digest = "sha256:" + "1" * 64
    pinned = Lock(target="spark", mode="prebuilt", base_images={
        "bytecode": BaseImageLock(ref="reg.example/twin:1", digest=digest)})
    data = lock_overrides(pinned)
    assert data["bytecode_image"] == f"reg.example/twin:1@{digest}"
    assert resolve(load_spec("spark", overrides=data)).bytecode_image == \
        f"reg.example/twin:1@{digest}"
    local = Lock(target="spark", mode="prebuilt",
                 base_images={"bytecode": BaseImageLock(ref="twin:1")})
    assert lock_overrides(local)["bytecode_image"] == "twin:1"
    older = Lock(target="spark", mode="prebuilt", settings={"bytecode_image": "twin:1"})
    assert load_spec("spark", overrides=lock_overrides(older)).bytecode_image == "twin:1"
    both = older.model_copy(update={"base_images": pinned.base_images})
    assert lock_overrides(both)["bytecode_image"] == f"reg.example/twin:1@{digest}"


def test_the_bytecode_base_is_the_runtime_base_unless_the_spec_names_one():
    from edgevllm.builder.steps import lock_settings

    eff = resolve(load_spec("spark", overrides={"vllm_wheel": "0.33.0"}))
    assert eff.bytecode_image == eff.images.runtime
    named = resolve(load_spec("spark", overrides={"vllm_wheel": "0.33.0",
                                                  "bytecode_image": "twin:1"}))
    assert named.bytecode_image == "twin:1" and named.images.runtime == eff.images.runtime
    assert "bytecode_image" not in lock_settings(named)  # a base image of the lock now


def test_the_emulated_compile_estimate_names_its_inputs():
    line = emulated_compile_line(78, "amd64", "linux/arm64", cores=2)
    assert "78 CUDA units" in line and f"{EMULATION_FACTOR:.1f}" in line and "/ 2 cores" in line
    assert "h" in line.split("≈")[1] and "--compile" in line
    fewer = emulated_compile_line(78, "amd64", "linux/arm64", cores=64)
    assert fewer != line


def test_the_cross_compile_estimate_names_its_inputs_and_is_the_native_time_times_the_factor():
    line = cross_compile_line(78, "amd64", "linux/arm64", cores=16)
    assert "78 CUDA units" in line and f"{CROSS_FACTOR:g} (cross over native" in line
    assert "/ 16 cores" in line and "--toolchain emulated" in line
    assert "× 2.45 (the build graph's, measured) ≈ 191" in line
    assert cross_compile_minutes(78, 16) == \
        pytest.approx(78 * GRAPH_FACTOR * UNIT_CORE_MINUTES * CROSS_FACTOR / 16)
    assert cross_compile_minutes(78, 16) <= 45   # the goal for a 16-core workstation
    assert cross_compile_minutes(78, 16) * EMULATION_FACTOR / CROSS_FACTOR == \
        pytest.approx(emulated_compile_minutes(78, 16))


def test_a_lock_rebuilds_its_road_where_the_builder_emulates():
    """An emulated compile's lock asks for emulation again on an x86_64 builder; a cross lock
    takes the default road; on the target's own platform both compile natively."""
    from edgevllm.specs.lock import Lock

    def lock_of(toolchain: str | None) -> Lock:
        return Lock(created_at="2026-11-27T00:00:00Z", target="thor", mode="compile",
                    settings={"toolchain": toolchain} if toolchain else {})

    for toolchain, on_x86 in (("emulated", "emulated"), ("cross", "cross"),
                              ("native", "cross"), (None, "emulated")):  # None: before the road
        spec = BuildSpec(**lock_overrides(lock_of(toolchain)))
        assert resolve(spec, builder=X86).toolchain == on_x86
        assert resolve(spec, builder=ARM).toolchain == "native"
