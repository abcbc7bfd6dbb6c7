"""The precompiled mode's build side (builder/modes/precompiled.py, the mode decided by
builder/modes.start): when the tree decides the mode, what it becomes, the release wheel check
and the rendered stages (real git for the sources; no container)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgevllm.builder.modes import start
from edgevllm.builder.modes.precompiled import release_wheel
from edgevllm.builder.render import render_dockerfile
from edgevllm.builder.runner import Workspace
from edgevllm.common.errors import SpecError
from edgevllm.sources.buildreqs import read_build_layout
from edgevllm.sources.pythononly import PythonOnlyCheck
from edgevllm.sources.wheels import Closure, WheelPin
from edgevllm.specs.buildspec import load_spec, resolve
from edgevllm.specs.moderule import wants_tree_check
from support.gitfixtures import add_pr, make_upstream_repo

FAKE_VLLM = Path(__file__).parent / "e2e" / "fixtures" / "fake-vllm"


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    """fake-vllm as release v0.1.0; PR 1 changes Python only, PR 2 a kernel."""
    up = make_upstream_repo(tmp_path_factory.mktemp("up"), FAKE_VLLM)
    add_pr(up, 1, {"vllm/__init__.py": "MARKER = 'pr-1'\n"}, base="v0.1.0")
    add_pr(up, 2, {"csrc/kernels.cu": "// changed\n"}, base="v0.1.0")
    return up


def eff_for(upstream, **overrides):
    return resolve(load_spec("spark", overrides={"vllm": {"repo": upstream.url, "pr": 1},
                                                 **overrides}))


def decided(eff, tmp_path):
    """The build's own mode decision: the sources prepared, the tree's change checked."""
    job = start(eff.spec, Workspace(tmp_path / "out"), engine=None, locked=None)
    return job.eff, job.check, job


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEVLLM_CACHE", str(tmp_path / "cache"))


def test_when_the_tree_decides(upstream):
    assert wants_tree_check(eff_for(upstream).spec)
    assert not wants_tree_check(eff_for(upstream, mode="compile").spec)       # --compile
    assert wants_tree_check(eff_for(upstream, mode="precompiled").spec)
    assert not wants_tree_check(eff_for(upstream, vllm_wheel="0.33.0").spec)  # prebuilt
    assert not wants_tree_check(load_spec("spark"))                           # a release
    with_fi = eff_for(upstream, flashinfer={"source": {"repo": upstream.url, "ref": "v0.1.0"}})
    assert not wants_tree_check(with_fi.spec)
    with pytest.raises(SpecError, match="'flashinfer.source' .* compiles FlashInfer"):
        eff_for(upstream, mode="precompiled",
                flashinfer={"source": {"repo": upstream.url, "ref": "v0.1.0"}})


def test_python_only_pr_becomes_precompiled(upstream, tmp_path):
    new, check, job = decided(eff_for(upstream), tmp_path)
    assert job.sources is not None and job.sources["vllm"].tree_dir.is_dir()  # kept for the mode
    assert new.mode == "precompiled" and new.spec.vllm_wheel == "0.1.0"
    assert new.mode_reason == ("Python-only change: reusing the compiled kernels of vllm 0.1.0; "
                               "--compile to compile")
    assert new.images.runtime == new.target.prebuilt.image   # a runtime base, not CUDA devel
    assert check.changed == ["vllm/__init__.py"]


def test_kernel_pr_stays_compile_and_precompiled_asked_for_fails(upstream, tmp_path):
    new, check, _ = decided(eff_for(upstream, vllm={"repo": upstream.url, "pr": 2}),
                            tmp_path / "a")
    assert new.mode == "compile" and check.blocking == ["csrc/kernels.cu"]
    assert new.mode_reason == "compiled sources changed since v0.1.0: csrc/kernels.cu"
    forced = eff_for(upstream, vllm={"repo": upstream.url, "pr": 2}, mode="precompiled")
    with pytest.raises(SpecError, match="compiled sources changed since v0.1.0: csrc/kernels.cu"):
        decided(forced, tmp_path / "b")


def _closure(version: str) -> Closure:
    pin = WheelPin(name="vllm", version=version, filename=f"vllm-{version}-cp38-abi3-x.whl",
                   sha256="a" * 64)
    return Closure(python_platform="x86_64-manylinux_2_34", python_version="3.12",
                   requirements=[f"vllm=={version}"], pins=[pin])


def test_the_wheel_must_be_the_release_below_the_tree():
    check = PythonOnlyCheck(release_tag="v0.33.0", release_commit="c" * 40,
                            changed=["vllm/x.py"])
    assert release_wheel(_closure("0.33.0"), check).version == "0.33.0"
    with pytest.raises(SpecError, match="is vllm 0.32.0, but the tree's Python-only diff is "
                                        "against v0.33.0"):
        release_wheel(_closure("0.32.0"), check)


def test_precompiled_stages_render(tmp_path):
    eff = resolve(load_spec("spark", overrides={"mode": "precompiled", "vllm_wheel": "0.33.0"}))
    text = render_dockerfile(eff, layout=read_build_layout(FAKE_VLLM),
                             precompiled={"release": "0.33.0", "wheel": "vllm-0.33.0-x.whl"})
    build = text.split("FROM closure AS build", 1)[1].split("#####", 1)[0]
    assert "VLLM_USE_PRECOMPILED=1" in build
    assert "VLLM_PRECOMPILED_WHEEL_LOCATION=/wheelhouse/vllm-0.33.0-x.whl" in build
    assert "-r /build-tools/requirements.txt" in build and "--require-hashes" in build
    assert "python use_existing_torch.py" in build and "cmake-deps" not in build
    # The tree's wheel over the closure (which holds no vLLM) in its own stage, no reinstall.
    vllm = text.split("FROM closure AS vllm-files", 1)[1].split("#####", 1)[0]
    assert "--mount=type=bind,from=wheels,target=/tmp/edgevllm-wheels" in vllm
    assert "--no-deps --link-mode=copy" in vllm and "/tmp/edgevllm-wheels/*.whl" in vllm
    assert "reinstall" not in text and "requirements-mode.txt" not in text
    assert "FROM vllm-files AS runtime" in text
    assert text.count("-r /wheelhouse/requirements.txt") == 1   # the closure, installed once
    prebuilt = render_dockerfile(resolve(load_spec("spark", overrides={"vllm_wheel": "0.33.0"})))
    # One install path for every mode: the closure stages, the mode's vLLM, the runtime.
    assert "FROM closure AS build" not in prebuilt and "FROM vllm-files AS runtime" in prebuilt
    assert prebuilt.count("-r /wheelhouse/requirements.txt") == 1
    assert prebuilt.count("-r /wheelhouse/requirements-mode.txt") == 1   # the release wheel
    assert "FROM scratch AS wheels" not in prebuilt and "from=wheels" not in prebuilt


def test_compile_flag_sets_mode_compile_and_conflicts_are_refused():
    from edgevllm.cli.flags import spec_overrides

    assert spec_overrides({"compile": True, "vllm_pr": "5"})["mode"] == "compile"
    assert "mode" not in spec_overrides({"compile": False, "vllm_pr": "5"})
    with pytest.raises(SpecError, match="--compile and --mode prebuilt: give one of them"):
        spec_overrides({"compile": True, "mode": "prebuilt"})


def test_a_release_pypi_lacks_fails_in_one_line_pointing_at_compile(tmp_path):
    """A Python-only PR on a fork's own release (v0.0.999): PyPI has no such vllm wheel to take
    kernels from; the real resolver says so before anything is downloaded or built."""
    from edgevllm.builder.modes import precompiled
    from edgevllm.sources.wheels import ClosureError
    from support.gitfixtures import git

    fork = make_upstream_repo(tmp_path / "fork", FAKE_VLLM)
    git(fork.path, "tag", "-d", "v0.1.0")
    git(fork.path, "update-ref", "refs/tags/v0.0.999", fork.shas["c1"])
    add_pr(fork, 1, {"vllm/__init__.py": "MARKER = 'pr-1'\n"}, base="v0.0.999")
    eff = eff_for(fork, platform="linux/amd64", torch={"version": "2.14.0", "index_url": None})
    new, _, job = decided(eff, tmp_path)
    assert new.mode == "precompiled"
    with pytest.raises(ClosureError) as failure:
        precompiled.prepare(job)
    message = str(failure.value)
    assert "unknown vLLM version: vllm==0.0.999" in message
    assert message.endswith("or --compile to compile the tree's kernels")
    assert not (tmp_path / "out" / "wheels").exists()
