"""The free disk a build asks for in preflight (builder/runner.disk_gb)."""

from __future__ import annotations

from edgevllm.builder.runner import disk_gb
from edgevllm.specs.buildspec import load_spec, resolve


def test_a_compile_that_reuses_its_wheels_asks_for_the_closure_disk_only():
    """A compile whose compiled wheels may be reused (nothing compiles: ``inv build --lock`` of a
    compile image, or the reuse road) asks for the disk a prebuilt image needs, not the 60 GB a
    compile's devel image and build stage take; a compile that compiles still asks for those."""
    compile_eff = resolve(load_spec("spark", overrides={"mode": "compile"}))
    prebuilt_eff = resolve(load_spec("spark", overrides={"vllm_wheel": "0.33.0"}))
    target = compile_eff.target
    assert target.min_disk_gb > target.prebuilt.min_disk_gb  # the figures under test differ
    assert disk_gb(compile_eff) == target.min_disk_gb
    assert disk_gb(compile_eff, compiles=False) == target.prebuilt.min_disk_gb
    assert disk_gb(prebuilt_eff) == disk_gb(prebuilt_eff, compiles=False) == \
        target.prebuilt.min_disk_gb


def test_precompiled_asks_for_the_target_figure_whatever_the_wheels():
    """Only the compile mode reuses compiled wheels by key; precompiled builds its tree's wheel."""
    eff = resolve(load_spec("spark", overrides={"mode": "precompiled"}))
    assert disk_gb(eff, compiles=False) == disk_gb(eff) == eff.target.min_disk_gb
