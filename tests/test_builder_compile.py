"""The compile mode's closure (builder/modes/compile.py): the tree's runtime requirements resolved
for the target with uv (real PyPI), the build's torch checked, a lock rebuild that resolves
nothing, a lock from another mode refused, and the rendered stages: one install path, no index,
the lean runtime base (no container)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from edgevllm.builder.modes import check_lock_mode
from edgevllm.builder.modes.compile import (
    build_requires,
    check_torch,
    compile_closure,
    exported,
    tree_closure_inputs,
)
from edgevllm.builder.render import render_dockerfile
from edgevllm.common.errors import SourceError, SpecError
from edgevllm.sources.buildreqs import read_build_layout, read_requirement_tree
from edgevllm.sources.wheels import Closure, ClosureError, WheelPin
from edgevllm.specs.buildspec import load_spec, resolve
from edgevllm.specs.lock import ClosureLock, Lock, canonical_json, lock_hash
from support.checks import present

FAKE_VLLM = Path(__file__).parent / "e2e" / "fixtures" / "fake-vllm"
NO_TORCH_INDEX = {"version": "2.14.0", "index_url": None}   # torch's index is not reachable here


def compile_eff(**overrides):
    return resolve(load_spec("spark", overrides={"mode": "compile", **overrides}))


def tree_layout(tmp_path: Path, files: dict[str, str]):
    for name, text in {"requirements/cuda.txt": "-r common.txt\n", **files}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return dataclasses.replace(
        read_build_layout(FAKE_VLLM), runtime_file="requirements/cuda.txt",
        runtime_requirements=tuple(read_requirement_tree(tmp_path, "requirements/cuda.txt")))


def test_closure_inputs_are_the_trees_requirements_with_the_pins_as_overrides():
    eff = compile_eff(torch=NO_TORCH_INDEX, overrides=["certifi>=2026.10.18"])
    layout = read_build_layout(FAKE_VLLM)
    inputs = tree_closure_inputs(eff, layout, ["fastsafetensors==0.3.3"])
    assert inputs["requirements"][0] == "packaging>=24"   # requirements/common.txt, via cuda.txt
    assert inputs["requirements"][1].startswith("uv==")   # the in-image installer
    assert "fastsafetensors==0.3.3" in inputs["requirements"]
    assert "flashinfer-python==0.7.2.post1" in inputs["requirements"]  # pinned: installed
    assert not any(r.startswith("vllm") for r in inputs["requirements"])  # vLLM is compiled
    assert {"torch==2.14.0", "flashinfer-python==0.7.2.post1", "certifi>=2026.10.18",
            "fastsafetensors==0.3.3"} <= set(inputs["overrides"])
    assert inputs["platform"] == "aarch64-manylinux_2_34" and inputs["indexes"] == []
    source = compile_eff(torch=NO_TORCH_INDEX,
                         flashinfer={"source": {"repo": "https://example.invalid/fi.git"}})
    assert any(o.startswith("flashinfer-python ; ") for o in tree_closure_inputs(
        source, layout, [])["overrides"]), "a compiled FlashInfer replaces PyPI's"
    # What the build exports stays out of the closure's install (vllm-files installs it).
    assert exported(eff) == ("vllm",) and exported(source) == ("vllm", "flashinfer-python")
    assert build_requires(layout) == ["setuptools>=61", "wheel"]


def test_a_tree_without_runtime_requirements_is_refused_naming_the_file():
    layout = dataclasses.replace(read_build_layout(FAKE_VLLM), runtime_file="",
                                 runtime_requirements=())
    with pytest.raises(SourceError, match=r"no runtime requirement file for CUDA \(looked for "
                                        r"requirements/cuda.txt"):
        tree_closure_inputs(compile_eff(torch=NO_TORCH_INDEX), layout, [])


def test_a_closure_without_torch_is_refused_when_the_build_needs_one():
    layout = read_build_layout(FAKE_VLLM)
    empty = Closure(python_platform="x86_64-manylinux_2_34", python_version="3.12",
                    requirements=[])
    with pytest.raises(SpecError, match="holds no torch, but the build compiles against torch "
                                        "2.14.0"):
        check_torch(compile_eff(torch=NO_TORCH_INDEX), layout, empty)
    check_torch(compile_eff(torch={"version": None}), layout, empty)   # the fixture's case
    with pytest.raises(SpecError, match="holds no torch"):
        check_torch(compile_eff(torch={"version": None}),
                    dataclasses.replace(layout, builds_against_torch=True), empty)


def test_resolved_for_the_target_every_wheel_by_hash(tmp_path):
    """Real uv, real PyPI: the tree's lines and its includes, for linux/amd64 + Python 3.12."""
    layout = tree_layout(tmp_path, {"requirements/common.txt": "requests==2.32.3\n"})
    eff = compile_eff(torch={"version": None}, platform="linux/amd64")
    closure = compile_closure(eff, layout, None, [])
    names = {p.name for p in closure.pins}
    assert {"requests", "urllib3", "certifi", "uv"} <= names
    assert all(re.fullmatch(r"[0-9a-f]{64}", p.sha256) for p in closure.pins)
    uv = present(closure.pin("uv"))
    assert uv.filename.endswith("x86_64.whl") or "x86_64" in uv.filename


def test_a_conflict_names_the_package_and_the_tree_file_that_asks(tmp_path):
    layout = tree_layout(tmp_path, {"requirements/common.txt": "certifi>=2099.1.1\n"})
    with pytest.raises(ClosureError) as caught:
        compile_closure(compile_eff(torch={"version": None}), layout, None, [])
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("the tree's requirements/cuda.txt does not resolve for "
                              "aarch64-manylinux_2_34 / Python 3.12: certifi>=2099.1.1 "
                              "(requirements/common.txt): Because")


def _closure(*names: str) -> Closure:
    pins = [WheelPin(name=n, version="1.0", filename=f"{n}-1.0-py3-none-any.whl",
                     sha256=f"{i:064x}") for i, n in enumerate(names, 1)]
    return Closure(python_platform="aarch64-manylinux_2_34", python_version="3.12",
                   requirements=list(names), pins=pins)


def test_a_lock_rebuild_resolves_nothing(monkeypatch):
    import edgevllm.builder.modes.closure as closure_module

    def no_resolve(**_):
        raise AssertionError("a lock rebuild must not resolve")

    monkeypatch.setattr(closure_module, "resolve_closure", no_resolve)
    locked = Lock(target="spark", mode="compile",
                  closure=ClosureLock(**_closure("torch", "uv").to_dict()))
    closure = compile_closure(compile_eff(torch=NO_TORCH_INDEX), read_build_layout(FAKE_VLLM),
                              locked, [])
    assert locked.closure is not None
    assert [p.sha256 for p in closure.pins] == [w.sha256 for w in locked.closure.wheels]


def test_the_closure_is_hashed_into_a_compile_lock():
    one = Lock(target="spark", mode="compile", closure=ClosureLock(**_closure("torch").to_dict()))
    other = one.model_copy(update={"closure": ClosureLock(**_closure("torch", "uv").to_dict())})
    assert '"closure"' in canonical_json(one) and lock_hash(one) != lock_hash(other)


def test_a_lock_from_another_mode_is_one_line():
    check_lock_mode(Lock(target="spark", mode="compile"), "compile")
    with pytest.raises(SpecError, match=r"^--lock: the lock is a prebuilt build's and this "
                                        r"build is compile; drop the mode flag"):
        check_lock_mode(Lock(target="spark", mode="prebuilt"), "compile")


def test_compile_renders_one_install_path_on_the_lean_runtime():
    eff = compile_eff()
    text = render_dockerfile(eff, layout=read_build_layout(FAKE_VLLM))
    assert eff.images.runtime == eff.target.prebuilt.image != eff.images.build
    assert f"FROM {eff.images.runtime} AS closure-files" in text   # CUDA from the wheels
    assert f"FROM {eff.images.build} AS base" in text
    # The closure is installed once; the devel build stages get its venv, torch among it.
    assert text.count("-r /wheelhouse/requirements.txt") == 1
    env = text.split("FROM base AS build-env", 1)[1].split("#####", 1)[0]
    assert "COPY --from=closure /opt/venv /opt/venv" in env
    assert "--require-hashes" in env and "-r /build-tools/requirements.txt" in env
    vllm = text.split("FROM closure AS vllm-files", 1)[1].split("#####", 1)[0]
    assert "--no-deps --link-mode=copy \\\n         /tmp/edgevllm-wheels/*.whl" in vllm
    assert "reinstall" not in text
    runtime = text.split("FROM vllm-files AS runtime", 1)[1]
    assert not re.search(r"index-url|https?://|torch==", text)
    # The runtime gets the lean base's packages, not the devel toolchain's.
    assert "ccache" not in runtime and "libibverbs1" in runtime
    prebuilt = render_dockerfile(resolve(load_spec("spark", overrides={"vllm_wheel": "0.33.0"})))
    closure = text.split("AS closure-files", 1)[1].split("##### build-env", 1)[0]
    assert closure in prebuilt, "a compile's closure stages are a prebuilt image's"


def test_a_flashinfer_from_source_brings_its_own_requirements_into_the_closure():
    """Its wheel is installed with --no-deps: what it needs comes from its tree, PyPI's
    FlashInfer (and so its dependencies) is removed."""
    layout = read_build_layout(FAKE_VLLM)
    source = compile_eff(torch=NO_TORCH_INDEX,
                         flashinfer={"source": {"repo": "https://example.invalid/fi.git"}})
    listed = (("apache-tvm-ffi>=0.1.11,<0.2", "requirements.txt"), ("einops", "requirements.txt"),
              ("flashinfer-python", "requirements.txt"), ("packaging>=24", "requirements.txt"))
    inputs = tree_closure_inputs(source, layout, [], listed)
    assert {"apache-tvm-ffi>=0.1.11,<0.2", "einops"} <= set(inputs["requirements"])
    assert inputs["requirements"].count("packaging>=24") == 1   # vLLM's and FlashInfer's, once
    assert not any(r.startswith("flashinfer-python") for r in inputs["requirements"])
    # its [build-system] requires join the build tools (torch's family stays the closure's)
    assert build_requires(layout, ["apache-tvm-ffi>=0.1.11,<0.2", "torch", "wheel"]) == [
        "setuptools>=61", "wheel", "apache-tvm-ffi>=0.1.11,<0.2"]
