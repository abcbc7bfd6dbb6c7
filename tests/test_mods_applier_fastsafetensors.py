"""The fastsafetensors mod against real wheels: fastsafetensors 0.5.0 and nvidia-cuda-runtime.

The CUDA runtime wheel ships only ``libcudart.so.13``; fastsafetensors dlopens ``libcudart.so``.
The test shows (with the dynamic loader's own trace, LD_DEBUG) that after the mod fastsafetensors'
loader resolves the unversioned name to the link the mod made. Not verifiable without a GPU:
that fastsafetensors then finds a device (``is_cuda_found()`` needs one) and the unified-memory
copy itself. The torch entry used to show the pip constraint is a stand-in (metadata only) for an
installed CUDA torch, which pip must never replace.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.modenv import outcome, site_with, stage_and_apply, wheel, working_copy


@pytest.fixture(scope="module")
def runtime_site() -> Path:
    return site_with("cuda-runtime-13.0.96", [
        wheel("nvidia-cuda-runtime==13.0.96", glibc="2_17")])


def fake_torch(site: Path, version: str = "2.13.0") -> None:
    info = site / f"torch-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    (info / "RECORD").write_text("")


def loader_trace(site: Path, libdir: Path) -> str:
    code = (f"import site; site.addsitedir({str(site)!r})\n"
            "from fastsafetensors import cpp\ncpp.load_library_functions('')\n")
    env = dict(os.environ, LD_DEBUG="libs", LD_LIBRARY_PATH=str(libdir))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    return proc.stderr


def test_installs_links_cudart_and_rerun_changes_nothing(runtime_site, tmp_path):
    site = working_copy(runtime_site, tmp_path / "site")
    fake_torch(site)
    libdir = site / "nvidia" / "cu13" / "lib"
    assert (libdir / "libcudart.so.13").is_file() and not (libdir / "libcudart.so").exists()
    links = ["--pip-find-links", str(wheel("fastsafetensors==0.5.0").parent)]
    rc, record, _, stderr = stage_and_apply(["fastsafetensors"], "thor", site, tmp_path, links)
    assert record is not None
    mod = outcome(record, "fastsafetensors")
    assert rc == 0 and mod["outcome"] == "applied", (mod, stderr)
    install, link, env, verify = mod["steps"]
    assert "installed fastsafetensors==0.5.0" in install["detail"]
    assert "constraints: torch==2.13.0" in install["detail"]
    assert f"{libdir}/libcudart.so -> libcudart.so.13" in link["detail"]
    assert os.readlink(libdir / "libcudart.so") == "libcudart.so.13"
    assert verify["detail"] == "fastsafetensors 0.5.0 loads; libcudart.so resolves"
    assert "FASTSAFETENSORS_UNIFIED_MEM=1" in (tmp_path / "out" / "mods.env").read_text()
    assert (site / "torch-2.13.0.dist-info").is_dir()  # the constrained torch was left alone

    trace = loader_trace(site, libdir)
    assert f"calling init: {libdir}/libcudart.so" in trace

    rc, record, _, _ = stage_and_apply(["fastsafetensors"], "thor", site, tmp_path, links)
    assert record is not None and outcome(record, "fastsafetensors")["outcome"] == "already-applied"


def test_without_any_cudart_it_fails(tmp_path):
    """No versioned libcudart anywhere it looks: failed, naming where it looked."""
    from edgevllm.mods.inimage_applier import Context, Env, StepFailed, step_library_link

    ctx = Context(Env([str(tmp_path)], sys.executable, [], False, None), tmp_path,
                  {"name": "fastsafetensors", "applies_to": {}})
    step = {"name": "libcudart.so", "pattern": "libcudart.so.[0-9]*",
            "dirs": [str(tmp_path / "nowhere")], "packages": ["nvidia-cuda-runtime"]}
    with pytest.raises(StepFailed, match=r"mod fastsafetensors: no "
                                         r"libcudart.so.\[0-9\]\* found in .*nowhere"):
        step_library_link(ctx, step)
