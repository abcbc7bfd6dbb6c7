"""Fixture images for the probe tests, built on python_image(engine, <this host's arch>).

``level1_image(engine, variant)``: Debian + Python with a stand-in ``vllm`` package whose
extensions are real shared objects compiled with gcc (some built to fail to load the way vLLM's
do off-device), a stand-in ``torch`` that reports a CUDA version and arch list (a real CUDA torch
cannot run without a GPU and is gigabytes), a mods record and a lock.
``fake_vllm_image(engine)``: a ``vllm`` executable that serves /health, /v1/models and
/v1/chat/completions, standing in for vLLM on a GPU (there is none here).
Images are tagged ``edgevllm-test-probe-*`` and removed by the tests' fixtures.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from edgevllm.containers.docker import BuildOptions, DockerEngine

from .images import python_image
from .platforms import native_arch

FIXTURE = Path(__file__).with_name("probe_fixture")

TORCH_INIT = '__version__ = "2.14.0+standin"\nfrom . import _C, cuda, version  # noqa\n'
TORCH_CUDA = "def get_arch_list():\n    return []\n\n\ndef is_available():\n    return False\n"

# Each variant: what goes into the image. exts: "<name under vllm/> [gcc flags]".
VARIANTS: dict[str, dict] = {
    "good": {
        "torch_cuda": "13.0",
        "torch_arch_flags": "sm_80 sm_90 sm_120 sm_121a",
        "exts": ["_C_stable_libtorch", "_moe_C_stable_libtorch",
                 "vllm_flash_attn/_vllm_fa2_C",
                 "cumem_allocator -DNEED_LIBCUDA /fixture/libcuda.so.1"],
        "mods": {"mods": [{"name": "fused-moe-config", "outcome": "applied"},
                          {"name": "cutlass-dsl-arch", "outcome": "already-applied"},
                          {"name": "flashinfer-sm121", "outcome": "not-applicable"}]},
        "lock": {"vllm": {"ref": "v0.33.0", "commit": "0" * 40}},
        "mods_selected": "fused-moe-config,cutlass-dsl-arch,flashinfer-sm121",
    },
    "bad": {
        "torch_cuda": None,
        "torch_arch_flags": "",
        "exts": ["_C", "_crash_C -DCRASH", "_moe_C -DNEED_DRIVER_SYMBOL"],
        "mods": [{"name": "fused-moe-config", "outcome": "applied"},
                 {"name": "cutlass-dsl-arch", "outcome": "failed"}],
        "lock": None,
        "mods_selected": "fused-moe-config,cutlass-dsl-arch,fastsafetensors",
    },
}


def _digest(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:10]


def _files_digest(paths: list[Path]) -> str:
    return _digest([(p.name, p.read_bytes()) for p in paths])


def _build(engine: DockerEngine, context: Path, dockerfile: Path, tag: str, base: str,
           **build_args: str) -> str:
    lines: list[str] = []
    code = engine.build(BuildOptions(context=context, dockerfile=dockerfile, tags=[tag],
                                     build_args={"BASE": base, **build_args}), lines.append)
    if code != 0:
        raise RuntimeError(f"building {tag} failed:\n" + "\n".join(lines[-30:]))
    return tag


def _stage_level1(ctx: Path, spec: dict) -> None:
    for name in ("ext.c", "libcuda_stub.c", "build.sh"):
        shutil.copy(FIXTURE / name, ctx / name)
    site = ctx / "site"
    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text('__version__ = "0.33.0+standin"\n')
    torch = site / "torch"
    torch.mkdir()
    (torch / "__init__.py").write_text(TORCH_INIT)
    (torch / "version.py").write_text(f"cuda = {spec['torch_cuda']!r}\n")
    (torch / "_C.py").write_text(
        f"def _cuda_getArchFlags():\n    return {spec['torch_arch_flags']!r}\n")
    (torch / "cuda.py").write_text(TORCH_CUDA)
    (ctx / "exts.txt").write_text("\n".join(spec["exts"]) + "\n")
    for key in ("mods", "lock"):
        if spec[key] is not None:
            (ctx / f"{key}.json").write_text(json.dumps(spec[key]))


def level1_image(engine: DockerEngine, variant: str) -> str:
    base = python_image(engine, native_arch())
    spec = VARIANTS[variant]
    sources = [FIXTURE / n for n in ("ext.c", "libcuda_stub.c", "build.sh", "Dockerfile")]
    tag = f"edgevllm-test-probe-l1:{variant}-{_digest(base, spec, _files_digest(sources))}"
    if engine.image_exists(tag):
        return tag
    with tempfile.TemporaryDirectory(prefix="edgevllm-test-probe-") as tmp:
        ctx = Path(tmp)
        _stage_level1(ctx, spec)
        return _build(engine, ctx, FIXTURE / "Dockerfile", tag, base,
                      MODS_SELECTED=spec["mods_selected"])


def fake_vllm_image(engine: DockerEngine) -> str:
    base = python_image(engine, native_arch())
    sources = [FIXTURE / "fake_vllm_serve.py", FIXTURE / "fake-vllm.Dockerfile"]
    tag = f"edgevllm-test-probe-fakevllm:{_digest(base, _files_digest(sources))}"
    if engine.image_exists(tag):
        return tag
    with tempfile.TemporaryDirectory(prefix="edgevllm-test-probe-") as tmp:
        shutil.copy(FIXTURE / "fake_vllm_serve.py", Path(tmp) / "fake_vllm_serve.py")
        return _build(engine, Path(tmp), FIXTURE / "fake-vllm.Dockerfile", tag, base)


# Only the probe task module: the CLI tests do not depend on the other task modules importing.
CLI_BOOT = ("from invoke import Collection, Program; import edgevllm.cli.probe as m; "
            "Program(namespace=Collection.from_module(m), name='edgevllm', "
            "binary='edgevllm').run()")


def probe_cli(*args: str) -> subprocess.Popen:
    """``edgevllm probe ARGS`` in a subprocess (text pipes), for exit codes and signals."""
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(repo)}
    return subprocess.Popen([sys.executable, "-c", CLI_BOOT, "probe", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
