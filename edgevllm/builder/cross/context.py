"""The compile mode's cross road, on the host: the ``edgevllm-cross`` build context (the
rendered CMake toolchain file and the in-image ``inimage_stage.py``) and the build tools for the
builder's own platform.

On a cross road (``EffectiveSpec.toolchain == "cross"``, the road in ``eff.cross``) the build
stages run on the builder's platform (dockerfiles/compile.Dockerfile.j2): its Python runs the
tree's ``setup.py`` and CMake, so the tree's build requirements resolve for that platform, with
the closure's torch at its version where the build imports torch. The target's side (its torch,
its CUDA libraries) is the locked closure itself, mounted into every compiling step: nothing
for the target is fetched twice and no stage reaches an index.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

from packaging.utils import canonicalize_name

from edgevllm.common import console
from edgevllm.common.errors import SpecError
from edgevllm.common.fsutil import atomic_write_bytes
from edgevllm.sources.buildreqs import BuildLayout
from edgevllm.sources.wheels import Closure, python_platform, python_version_of, resolve_closure
from edgevllm.specs.buildspec import EffectiveSpec
from edgevllm.specs.cross import CrossRoad

CROSS_CONTEXT = "edgevllm-cross"
SCRIPT = "inimage_stage.py"
RUN_SCRIPT = "inimage_run.py"  # the toolchain's emulator: runs build programs, refuses target ones
TOOLCHAIN = "toolchain.cmake"
# The target's CUDA runtime: what the cross link needs of the closure (nvcc links cudart).
TARGET_CUDA_RUNTIME = "nvidia-cuda-runtime"
# --aot on the cross road (builder/aot/plan.py cross_aot): the build Python's FlashInfer, by hash.
AOT_TOOLS = "aot-tools"
FLASHINFER = "flashinfer-python"


def stage_cross(toolchain: str, dest: Path) -> str:
    """Write the toolchain file (its text as builder/render.py renders it for the road) and the
    in-image scripts into ``dest`` (a build context); the sha256 of all, which the compile key
    counts."""
    dest.mkdir(parents=True, exist_ok=True)
    files = {TOOLCHAIN: toolchain.encode(),
             SCRIPT: Path(__file__).with_name(SCRIPT).read_bytes(),
             RUN_SCRIPT: Path(__file__).with_name(RUN_SCRIPT).read_bytes()}
    digest = hashlib.sha256()
    for name, body in sorted(files.items()):
        atomic_write_bytes(dest / name, body)
        digest.update(name.encode() + b"\0" + hashlib.sha256(body).digest())
    return digest.hexdigest()


def check_target_side(eff: EffectiveSpec, closure: Closure, layout: BuildLayout) -> None:
    """The cross link needs the target's CUDA runtime from the closure, and a tree that builds
    against torch its target torch: one line each, before anything is downloaded."""
    road = eff.cross
    assert road is not None
    if closure.pin(TARGET_CUDA_RUNTIME) is None:
        raise SpecError(f"toolchain cross: the closure holds no {TARGET_CUDA_RUNTIME} for "
                        f"{road.target_platform}, which the cross link needs (torch's CUDA "
                        f"wheels bring it): add --package {TARGET_CUDA_RUNTIME}==VERSION, or "
                        "--toolchain emulated")
    if layout.builds_against_torch and closure.pin("torch") is None:
        raise SpecError(f"toolchain cross: the tree builds against torch and the closure holds "
                        f"no {road.target_platform} torch for find_package(Torch): the tree's "
                        "runtime requirements must name torch")


def cross_build_tools(eff: EffectiveSpec, requires: list[str], closure: Closure,
                      layout: BuildLayout) -> Closure:
    """The tree's build requirements for the builder's platform at the closure's versions, and
    the closure's torch where the build imports it (the build Python runs setup.py)."""
    road, platform, version = build_side(eff)
    torch = closure.pin("torch")
    own: set[str] = set()
    wanted = list(requires)
    if torch is not None and layout.builds_against_torch:
        wanted.append(f"torch=={torch.version}")
        own = torch_set(f"torch=={torch.version}", platform, version, closure)
    console.step(f"build tools for {road.build_platform} (cross road to "
                 f"{road.target_platform}): {', '.join(wanted)}")
    overrides = [f"{p.name}=={p.version}" for p in closure.pins if p.name not in own]
    return resolve_closure(wanted, platform=platform, python_version=version,
                           overrides=overrides, indexes=list(closure.indexes))


def build_side(eff: EffectiveSpec) -> tuple[CrossRoad, str, str]:
    """The cross road, the builder's Python platform and the Python version its build tools
    resolve for (one line where the spec names no version)."""
    road = eff.cross
    assert road is not None
    version = python_version_of(eff.python)
    if not version:
        raise SpecError(f"field 'python' is '{eff.python}': a cross build resolves its build "
                        "tools for one Python version; name it (python3.12)")
    return road, python_platform(road.build_platform), version


def torch_set(torch: str, platform: str, version: str, closure: Closure) -> set[str]:
    """What ``torch`` brings on the build platform (its CUDA set, which it pins exactly). The
    closure's pins override the rest of the build tools, never these: an override replaces a
    requirement whole, so ``cuda-toolkit==V`` would drop the extras torch asks it with
    (``cuda-toolkit[cudart,cublas,...]``), and the build Python's torch would not import
    (libcudart.so.13 missing) when setup.py imports it."""
    alone = resolve_closure([torch], platform=platform, python_version=version,
                            indexes=list(closure.indexes))
    return {p.name for p in alone.pins} - {"torch"}


def cross_aot_tools(eff: EffectiveSpec, closure: Closure, tools: Closure) -> Closure:
    """``--aot`` on the cross road: the closure's FlashInfer for the builder's platform with
    what ``import flashinfer`` needs there, at the build tools' versions, else the closure's
    (torch at its own, as the build tools have it); what the build tools hold left out: build-env
    has it installed, and the stage installs with --no-deps (torch's setuptools stays theirs)."""
    road, platform, version = build_side(eff)
    flashinfer = closure.pin(FLASHINFER)
    if flashinfer is None:
        raise SpecError(f"--aot on the cross road: the closure holds no {FLASHINFER}, whose "
                        f"modules it would build for {road.target_platform}: add --package "
                        f"{FLASHINFER}==VERSION, or drop --aot")
    wanted = [f"{FLASHINFER}=={flashinfer.version}"]
    own: set[str] = set()
    torch = closure.pin("torch")
    if torch is not None:
        wanted.append(f"torch=={torch.version}")
        own = torch_set(wanted[-1], platform, version, closure)
    console.step(f"flashinfer aot: its build Python's tools for {road.build_platform}: "
                 f"{', '.join(wanted)}")
    # the build tools' versions over the closure's: what build-env installed stays as it is
    pinned = {canonicalize_name(p.name): p.version for p in closure.pins if p.name not in own}
    pinned |= {canonicalize_name(p.name): p.version for p in tools.pins if p.name not in own}
    found = resolve_closure(wanted, platform=platform, python_version=version,
                            overrides=[f"{n}=={v}" for n, v in sorted(pinned.items())],
                            indexes=list(closure.indexes))
    have = {canonicalize_name(p.name) for p in tools.pins}
    return dataclasses.replace(found, pins=[p for p in found.pins
                                            if canonicalize_name(p.name) not in have])
