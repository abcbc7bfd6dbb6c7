"""Preflight's check of every image a build's stages start from, for the platform each stage
runs on (builder/basecheck.py): the pairs read from each mode's rendered Dockerfile, and, on the
real engine, a base held only for the target's platform stopped in seconds with one line that
says how to give the build platform's twin, where it used to build for minutes and then fail in
BuildKit's words."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from edgevllm.builder.basecheck import check_stage_bases
from edgevllm.builder.dockerfile import bases
from edgevllm.builder.render import render_dockerfile
from edgevllm.common.errors import ImageNotFoundError
from edgevllm.specs.buildspec import Builder, load_spec, resolve
from support.platforms import foreign_platform, native_arch, native_platform

RELEASE = {"compile": {}, "prebuilt": {"vllm_wheel": "0.33.0"},
           "precompiled": {"vllm_wheel": "0.33.0"}}


@pytest.mark.parametrize("mode", sorted(RELEASE))
def test_each_modes_stages_start_from_their_bases_on_their_platforms(mode):
    eff = resolve(load_spec("spark", overrides={"mode": mode, "base_image": "b:1",
                                                "bytecode_image": "twin:1", **RELEASE[mode]}),
                  builder=Builder(arch=native_arch()))
    text = render_dockerfile(eff)
    pairs = bases(text, ["runtime"], eff.platform, native_platform())
    assert {("b:1", eff.platform), ("twin:1", native_platform())} <= set(pairs)
    every = bases(text, ["wheels", "runtime"] if "AS wheels" in text else ["runtime"],
                  eff.platform, native_platform())
    # a compile on a cross road runs its build stages on the builder's platform too
    assert set(pairs) <= set(every) and {ref for ref, _ in every} == {"b:1", "twin:1"}


def test_a_stage_on_the_build_platform_is_a_pair_of_its_own():
    """A new stage that runs where the builder runs (a cross compile's) needs no change here."""
    text = ("FROM --platform=$BUILDPLATFORM cross:1 AS cross\nFROM base:1 AS base\n"
            "FROM cross AS more\nFROM scratch AS wheels\nCOPY --from=more /a /a\n"
            "FROM --platform=linux/riscv64 odd:1 AS odd\n# FROM comment:1\n"
            "FROM base AS runtime\nRUN --mount=type=bind,from=odd,target=/o true\n")
    assert bases(text, ["wheels", "runtime"], "linux/arm64", "linux/ppc64le") == [
        ("cross:1", "linux/ppc64le"), ("base:1", "linux/arm64"), ("odd:1", "linux/riscv64")]
    # a build that reuses its wheels builds the runtime only: the cross base is not needed
    assert bases(text, ["runtime"], "linux/arm64", "linux/ppc64le") == [
        ("base:1", "linux/arm64"), ("odd:1", "linux/riscv64")]


@pytest.fixture
def foreign_only(engine, tmp_path):
    """A base this engine holds for the foreign platform only, as an air-gapped user makes one."""
    tarball = tmp_path / "rootfs.tar"
    with tarfile.open(tarball, "w"):
        pass
    tag = "edgevllm-test/foreign-only-base:1"
    engine.import_rootfs(tarball, tag, platform=foreign_platform())
    yield tag
    engine.remove_image(tag, force=True)


def test_a_base_held_for_the_target_only_stops_preflight_with_the_twin_named(engine,
                                                                               foreign_only):
    check_stage_bases(engine, [(foreign_only, foreign_platform())], foreign_platform())
    with pytest.raises(ImageNotFoundError, match=rf"needed for {native_platform()} .*"
                       rf"holds it for {foreign_platform()} only.*bytecode_image"):
        check_stage_bases(engine, [(foreign_only, native_platform())], foreign_platform())
    with pytest.raises(ImageNotFoundError, match="does not hold it.*docker pull --platform"):
        check_stage_bases(engine, [("edgevllm-test/no-such-base:1", foreign_platform())],
                          foreign_platform())


def test_inv_build_with_such_a_base_is_one_line_before_anything_is_fetched(engine, foreign_only,
                                                                           tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("edgevllm")), "build", "--target", "spark",
         "--platform", foreign_platform(), "--base-image", foreign_only, "--out", str(out)],
        capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 4, proc.stderr
    assert len(lines) == 1 and "bytecode_image" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and "registry-1" not in proc.stderr
    assert not list(out.rglob("*.whl")), "the closure was fetched before the check"
