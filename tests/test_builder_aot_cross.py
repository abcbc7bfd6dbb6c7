"""The AOT step's cross road pieces (builder/aot/inimage_build.py ``--target-lib``): the link flags
for the target's CUDA folder, the refusals, the machine each module is built for; and the AOT
road preflight names (builder/aot/plan.py ``aot_road``, ``cross_aot``); the ``aot-build`` stage a
compile on the cross road renders, the runtime stage's COPY of its modules and record, the
compile key it leaves alone, the aot-tools' refusal and lock field. The road end to end, through
inv build, cross-compiled here and loaded in the linux/arm64 image:
tests/e2e/test_subset_real_tree_build_e2e.py."""

from __future__ import annotations

import platform
import sys
from pathlib import Path

import pytest

from edgevllm.builder.aot import inimage_build
from edgevllm.builder.aot.plan import aot_road, cross_aot, stage_aot
from edgevllm.builder.dockerfile import needs, stages
from edgevllm.builder.render import render_dockerfile
from edgevllm.specs.buildspec import Builder, load_spec, resolve

FLAGS = "-ccbin aarch64-linux-gnu-g++ -target-dir sbsa-linux"
TINY = Path(__file__).parent / "fixtures" / "model-configs" / "tiny-llama.json"


def target_lib(tmp_path, stub=True, cudart=True):
    lib = tmp_path / "targets" / "sbsa-linux" / "lib"
    (lib / "stubs").mkdir(parents=True)
    if cudart:
        (lib / "libcudart.so").write_bytes(b"")
    if stub:
        (lib / "stubs" / "libcuda.so").write_bytes(b"")
    return str(lib)


def test_a_cross_build_links_against_the_targets_folder_and_its_driver_stub(tmp_path,
                                                                            monkeypatch):
    monkeypatch.setenv("CXX", "aarch64-linux-gnu-g++")
    monkeypatch.setenv("NVCC_PREPEND_FLAGS", FLAGS)
    monkeypatch.setenv("CC", "aarch64-linux-gnu-gcc")
    lib = target_lib(tmp_path)
    found, cuda_flags, ld_flags = inimage_build.cross_toolchain({"notes": []}, lib)
    assert cuda_flags == [] and ld_flags == [f"-L{lib}", f"-L{lib}/stubs"]
    assert found["cross"] == {"cxx": "aarch64-linux-gnu-g++", "target_lib": lib,
                              "nvcc_prepend_flags": FLAGS}
    # FlashInfer adds -ccbin $CC to nvcc's flags, which NVCC_PREPEND_FLAGS already names
    assert "CC" not in inimage_build.os.environ
    assert any("CC unset" in note for note in found["notes"])


@pytest.mark.parametrize("missing", ["stub", "cudart"])
def test_a_target_folder_without_cudart_or_the_stub_fails_in_one_line(tmp_path, monkeypatch,
                                                                      capsys, missing):
    monkeypatch.setenv("CXX", "aarch64-linux-gnu-g++")
    monkeypatch.setenv("NVCC_PREPEND_FLAGS", FLAGS)
    lib = target_lib(tmp_path, stub=missing != "stub", cudart=missing != "cudart")
    with pytest.raises(SystemExit) as exc:
        inimage_build.cross_toolchain({"notes": []}, lib)
    assert exc.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("edgevllm aot: error: ")
    assert "inimage_stage" in err[0]


@pytest.mark.parametrize("unset", ["CXX", "NVCC_PREPEND_FLAGS"])
def test_a_cross_build_without_the_roads_compilers_fails_in_one_line(tmp_path, monkeypatch,
                                                                    capsys, unset):
    monkeypatch.setenv("CXX", "aarch64-linux-gnu-g++")
    monkeypatch.setenv("NVCC_PREPEND_FLAGS", FLAGS)
    monkeypatch.delenv(unset)
    with pytest.raises(SystemExit):
        inimage_build.cross_toolchain({"notes": []}, target_lib(tmp_path))
    assert "needs CXX" in capsys.readouterr().err


def test_the_record_names_the_machine_a_library_was_built_for(tmp_path):
    own = {"x86_64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}[platform.machine()]
    assert inimage_build.elf_machine(sys.executable) == own
    (tmp_path / "text").write_text("not a library")
    assert inimage_build.elf_machine(str(tmp_path / "text")) is None


def eff_of(target="spark", **overrides):
    spec = load_spec(target, overrides={"mode": "compile", "python": "python3.12",
                                        "aot": str(TINY), **overrides})
    return resolve(spec, builder=Builder("amd64"))


def test_preflight_says_where_the_aot_step_runs_and_why_not_cross():
    native = eff_of()
    assert "native" in aot_road(native, Builder("arm64"))
    assert "native" in aot_road(native, None)
    road = eff_of().cross
    assert road is not None
    cross = aot_road(eff_of(), Builder("amd64"))
    assert cross.startswith(f"cross: on this amd64 builder's own platform ({road.build_platform}")
    assert "aarch64-linux-gnu-g++ for linux/arm64" in cross and "\n" not in cross
    emulated = aot_road(eff_of(toolchain="emulated"), Builder("amd64"))
    assert "under emulation (linux/arm64 on this amd64 builder" in emulated
    assert "the compile's toolchain is emulated" in emulated
    prebuilt = aot_road(eff_of(mode="prebuilt", vllm_wheel="0.33.0"), Builder("amd64"))
    assert "the prebuilt mode has no build stage on the builder's platform" in prebuilt
    source = aot_road(eff_of(flashinfer={"source": {"repo": "https://example.invalid/fi.git",
                                                    "ref": "v0.7.2"}}), Builder("amd64"))
    assert "FlashInfer from source" in source and "under emulation" in source


@pytest.mark.parametrize("target", ["spark", "thor"])
def test_the_cross_road_builds_the_modules_in_a_buildplatform_stage_and_copies_them(
        target, tmp_path):
    eff = eff_of(target)
    assert cross_aot(eff) and eff.cross is not None
    text = render_dockerfile(eff)
    stage = stages(text)["aot-build"]
    assert stage.startswith("FROM build-env AS aot-build")
    assert "aot-build" in needs(text, "runtime") and "aot-build" not in needs(text, "wheels")
    # FROM build-env, itself FROM base on $BUILDPLATFORM: the road's compilers and target folder
    assert "FROM --platform=$BUILDPLATFORM" in text[:text.index("AS base")]
    assert "from=aot-tools,target=/aot-tools" in stage and "--require-hashes" in stage
    assert "from=closure,source=/opt/venv,target=/opt/edgevllm-target" in stage
    assert f'FLASHINFER_CUDA_ARCH_LIST="{eff.target.flashinfer_cuda_arch_list}"' in stage
    assert (f'--target-lib "${{CUDA_HOME:-/usr/local/cuda}}/targets/{eff.cross.cuda_target_dir}'
            f'/lib"') in stage
    runtime = text[text.index("FROM vllm-files AS runtime"):]
    site = "/opt/venv/lib/python3.12/site-packages"
    assert (f"COPY --from=aot-build /edgevllm-aot-out/modules/ {site}/flashinfer/data/aot/"
            in runtime)
    assert "COPY --from=aot-build /edgevllm-aot-out/aot.json /opt/edgevllm/aot.json" in runtime
    assert runtime.count("inimage_build.py") == 0  # no in-image run under emulation
    for name in stage_aot(str(TINY), tmp_path / "aot"):
        assert name not in text  # module names are plan.json's data, never Dockerfile text
    assert "batch_prefill" not in text


def test_the_stage_appears_only_on_the_cross_road():
    for eff in (eff_of(toolchain="emulated"), eff_of(mode="prebuilt", vllm_wheel="0.33.0")):
        text = render_dockerfile(eff)
        assert not cross_aot(eff)
        assert "aot-build" not in text and "aot-tools" not in text
        assert "--record /opt/edgevllm/aot.json" in text  # the in-image step
    native = resolve(load_spec("spark", overrides={"mode": "compile", "aot": str(TINY)}),
                     builder=Builder("arm64"))
    assert not cross_aot(native) and "aot-build" not in render_dockerfile(native)
    assert "aot-build" not in render_dockerfile(eff_of(aot=None))


def test_aot_on_the_cross_road_leaves_the_compile_key_as_it_was():
    """The aot-build stage is no stage the wheels need: --aot never compiles vLLM again."""
    from edgevllm.builder.runner import compile_key

    texts = [render_dockerfile(eff_of(aot=aot)) for aot in (None, str(TINY))]
    assert texts[0] != texts[1]
    assert compile_key(texts[0], {}, {}) == compile_key(texts[1], {}, {})


def test_a_closure_without_flashinfer_is_one_line_before_any_resolve():
    from edgevllm.builder.cross.context import cross_aot_tools
    from edgevllm.common.errors import SpecError
    from edgevllm.sources.wheels import Closure

    empty = Closure(python_platform="aarch64-manylinux_2_34", python_version="3.12",
                    requirements=[])
    with pytest.raises(SpecError, match="closure holds no flashinfer-python.*--package"):
        cross_aot_tools(eff_of(), empty, empty)


def test_the_lock_keeps_the_aot_tools_and_hashes_as_before_without_them():
    from edgevllm.specs.lock import ClosureLock, Lock, canonical_json

    tools = ClosureLock(python_platform="x86_64-manylinux_2_28", python_version="3.12")
    plain, with_tools = Lock(target="spark"), Lock(target="spark", aot_closure=tools)
    assert "aot_closure" not in canonical_json(plain)
    assert canonical_json(plain) != canonical_json(with_tools)
    assert Lock.model_validate_json(with_tools.model_dump_json()).aot_closure == tools


def test_render_names_the_aot_tools_context_only_on_the_cross_road(tmp_path):
    """``inv render`` of a compile with --aot on this machine: an x86_64 host cross-compiles a
    linux/arm64 image, so the plan names the aot-tools context; an arm64 host builds natively."""
    import json

    from edgevllm.builder.renderout import render_to
    from edgevllm.containers.host import host_arch

    render_to(load_spec("spark", overrides={"mode": "compile", "aot": str(TINY)}), tmp_path / "r")
    plan = json.loads((tmp_path / "r" / "build-plan.json").read_text())
    assert "edgevllm-aot" in plan["contexts"]
    assert ("aot-tools" in plan["contexts"]) == (host_arch() == "amd64")
    render_to(load_spec("spark", overrides={"mode": "compile"}), tmp_path / "p")
    plain = json.loads((tmp_path / "p" / "build-plan.json").read_text())
    assert "aot-tools" not in plain["contexts"]
