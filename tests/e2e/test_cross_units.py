"""Real vLLM 0.33.0 kernels cross-compiled on x86_64 for linux/arm64: the cross road's proof.

Two of ``_C``'s translation units (activation_kernels, layernorm_kernels) from PyPI's vLLM 0.33.0
sdist, prepared for Spark (12.1a, with ``vllm-cmake-keep-121a`` applied as the build applies it)
and for Thor (11.0a), are compiled with the arguments the kernel plan reads from the tree's CMake
(``support.cross_units``): by the x86_64 nvcc 13.0 with the road of ``edgevllm.specs.cross``
(Debian trixie's ``aarch64-linux-gnu-g++`` via ``-ccbin``, ``-target-dir sbsa-linux`` with the
sbsa target folder assembled from NVIDIA's aarch64 wheels), and by the same nvcc natively for
x86_64. Checked: every cross object is an aarch64 ELF (readelf) and every native one an x86-64
ELF; edgevllm's verify finds exactly the target's SASS (sm_121a / sm_110a) where the plan says
so; these two units' cubins are also byte-identical (sha256) between the cross and the native
x86_64 build, which holds only because neither takes a char-sized kernel parameter (x86_64's
``char`` is signed, aarch64's unsigned: such a kernel loads it ``ld.param.s8`` natively and
``u8`` cross). The invariant the road keeps for every unit is cross == arm64 nvcc: the small unit
(activation_kernels, Spark only) is compiled by the aarch64 nvcc and g++ under qemu in a
linux/arm64 container, as the compile mode does on a native arm64 builder, and its cubin is
byte-identical to the cross build's.

The compilers run in Debian trixie containers (support.images.debian_image): bookworm's own
cross g++ is GCC 12, below the road's minimum, and trixie's needs trixie's glibc. No timed
assertion: bench/cross_compile.py measures the speed.
"""

from __future__ import annotations

import pytest

from edgevllm.sources.plan import compare_with_binaries
from edgevllm.verify.api import scan_path
from support import cross_units as cu
from support.platforms import require_runnable

pytestmark = pytest.mark.e2e

UNITS = ["csrc/activation_kernels.cu", "csrc/layernorm_kernels.cu"]
SASS = {"spark": "sm_121a", "thor": "sm_110a"}


@pytest.fixture(scope="module")
def images(engine):
    require_runnable("arm64")
    return cu.images(engine)


@pytest.fixture(scope="module")
def built(engine, images, tmp_path_factory):
    """target -> (plan, tree, {mode: {unit: Compiled}}) for native and cross, compiled once."""
    done: dict[str, tuple] = {}

    def build(target_name: str):
        if target_name not in done:
            root = tmp_path_factory.mktemp(target_name)
            tree = cu.vllm_tree(target_name, root / "vllm")
            plan = cu.unit_plan(tree, target_name)
            jobs = {unit: plan.nvcc_args(unit) for unit in UNITS}
            compiled = {mode: cu.compile_units(engine, images[mode], mode, tree, jobs, root / mode)
                        for mode in ("cross", "native")}
            done[target_name] = (plan, tree, compiled)
        return done[target_name]

    return build


@pytest.mark.parametrize("target_name", ["spark", "thor"])
def test_cross_objects_are_aarch64_with_the_planned_sass_and_the_native_cubins(built,
                                                                            target_name):
    plan, _, compiled = built(target_name)
    sass = SASS[target_name]
    arch = sass.removeprefix("sm_")
    for unit in UNITS:
        assert plan.nvcc_args(unit)[:2] == ["-gencode", f"arch=compute_{arch},code=sm_{arch}"]
        cross, native = compiled["cross"][unit], compiled["native"][unit]
        assert cu.elf_machine(cross.obj) == "AArch64", unit
        assert cu.elf_machine(native.obj) == "Advanced Micro Devices X86-64", unit
        [report] = scan_path(cross.obj)
        assert report.arches("sass") == [sass], (unit, report.arches("sass"))
        assert report.arches("ptx") == []
        assert [key.rsplit(".", 2)[-2] for key in cross.cubins] == [sass], cross.cubins
        # True of these units only (no char-sized parameter); the road's invariant is the
        # arm64 one, test_small_unit_cubin_is_the_arm64_nvcc_one_under_qemu.
        assert cross.cubins == native.cubins, f"{unit}: the cross cubins differ from native's"
    planned = {cu.object_name(u): [_arch(flag) for flag in plan.flags_for(u)] for u in UNITS}
    rows = compare_with_binaries(planned, {str(c.obj): scan_path(c.obj)[0].arches("sass")
                                           for c in compiled["cross"].values()})
    assert [agrees for _, _, agrees in rows] == [True] * len(UNITS), rows


def test_small_unit_cubin_is_the_arm64_nvcc_one_under_qemu(engine, images, built,
                                                           tmp_path):
    plan, tree, compiled = built("spark")
    jobs = {cu.SMALL_UNIT: plan.nvcc_args(cu.SMALL_UNIT)}
    [qemu] = cu.compile_units(engine, images["qemu"], "qemu", tree, jobs, tmp_path).values()
    assert cu.elf_machine(qemu.obj) == "AArch64"
    cross = compiled["cross"][cu.SMALL_UNIT]
    assert list(qemu.cubins) == list(cross.cubins) and qemu.cubins, (qemu.cubins, cross.cubins)
    assert qemu.cubins == cross.cubins, "the cross cubin differs from arm64 nvcc's under qemu"


def _arch(flag: str) -> str:
    """``-gencode arch=compute_121a,code=sm_121a`` -> ``12.1a``."""
    code = flag.rsplit("code=sm_", 1)[-1]
    return f"{code[:-2]}.{code[-2:]}" if code[-1] in "af" else f"{code[:-1]}.{code[-1]}"
