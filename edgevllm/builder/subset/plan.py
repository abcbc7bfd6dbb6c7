"""A partial kernel build (``inv build --compile --extensions A,B``): only some of the tree's
CMake extensions compiled, the one owner of what that means.

- the names: the tree's own CMake extension targets as the kernel plan reads them
  (``KernelPlan.extensions``); an unknown one is one line naming the known ones;
- the plan: restricted to the chosen extensions, so the lock's plan, the unit count preflight
  estimates from and the plan-against-binaries lines speak of what the wheel holds;
- the mechanism: the tree's setup.py and CMakeLists are not edited; the compile step puts
  ``inimage_cmake.py`` first on PATH as ``cmake`` (the ``edgevllm-extensions`` context), which
  keeps the chosen ``--target`` names of setup.py's one ``cmake --build`` and skips the installs
  of the others. The names are in the Dockerfile and the script's digest in the compile key, so
  a partial wheel never shares a key with a whole one;
- what the image is: labelled and locked as partial, named in preflight as a warning (it cannot
  serve: vLLM's own ops are in the extensions left out); verify fails a wheel that lacks an
  extension asked for, and passes one that lacks the others.

A target's ``leave_out`` (CMake targets every compile for it leaves out, each with why: Spark's
and Thor's FlashAttention 3, sm_90a only) goes the same road in a whole build too: the wrapper
drops those targets from the ``cmake --build`` and skips their installs, saying why; the names
and reasons (``leave-out.json`` in the context) are in the Dockerfile and the compile key, the
lock's ``settings.left_out`` and the label; preflight says one line. The wheel is whole without
them: nothing checks for a library left out.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import zipfile
from pathlib import Path, PurePosixPath

from edgevllm.common import labels
from edgevllm.common.errors import ArchGateFailed, SpecError
from edgevllm.common.fsutil import atomic_write_bytes
from edgevllm.sources.kernelplan import KernelPlan

CONTEXT = "edgevllm-extensions"
SCRIPT = "inimage_cmake.py"
WRAPPER = "bin/cmake"   # in the context: the script under the name setup.py runs
SETTING = "EDGEVLLM_EXTENSIONS"   # the chosen names, as the script reads them
LEAVE_OUT = "EDGEVLLM_LEAVE_OUT"  # the path of the target's leave-out (name -> why), in the context
LEAVE_OUT_FILE = "leave-out.json"
LOCK_KEY = "extensions"           # lock.settings: the chosen names (a lock rebuild builds them)
LEFT_OUT_KEY = "left_out"         # lock.settings: the target's leave-out, name -> why


def known_names(plan: KernelPlan) -> list[str]:
    return [e.name for e in plan.extensions]


def check_names(chosen: list[str], plan: KernelPlan) -> None:
    """Every chosen name is an extension the tree's CMake defines for this target."""
    known = known_names(plan)
    unknown = [n for n in chosen if n not in known]
    if unknown:
        raise SpecError(f"field 'extensions' (--extensions): {', '.join(unknown)} is not a CMake "
                        f"extension of this vLLM tree for {plan.device_arch or 'the target'}; "
                        f"its extensions: {', '.join(known) or 'none'} (inv plan lists them)")


def restrict(plan: KernelPlan, chosen: list[str]) -> KernelPlan:
    """The plan of the chosen extensions only (groups and dependencies as the tree has them)."""
    check_names(chosen, plan)
    return dataclasses.replace(plan, extensions=[e for e in plan.extensions if e.name in chosen])


def partial_note(chosen: list[str], whole: KernelPlan) -> str:
    """What preflight warns before a partial kernel build."""
    known = known_names(whole)
    units = sum(e.cuda_sources for e in whole.extensions if e.name in chosen)
    left = [n for n in known if n not in chosen]
    return (f"a partial kernel build: {len(chosen)} of {len(known)} extensions of the tree "
            f"({', '.join(chosen)}; {units} CUDA units); left out: {', '.join(left) or '-'} "
            "and what the tree's CMake fetches and builds (FlashAttention, DeepGEMM...). The "
            "image cannot serve a model: it is for checking the road and these extensions")


def left_out_note(left_out: dict[str, str]) -> str:
    """Preflight's one line of what a compile for the target leaves out ('' when nothing)."""
    if not left_out:
        return ""
    return "left out: " + "; ".join(f"{name} ({why})" for name, why in left_out.items())


def lock_settings(chosen: list[str] | None, left_out: dict[str, str] | None = None) -> dict:
    """What the lock records of a partial build and of the target's leave-out (nothing for a
    whole build that leaves nothing out)."""
    return ({LOCK_KEY: list(chosen)} if chosen else {}) | (
        {LEFT_OUT_KEY: dict(left_out)} if left_out else {})


def label(settings: dict) -> dict[str, str]:
    """The image's label of a partial build or one that left targets out (none otherwise)."""
    chosen = settings.get(LOCK_KEY)
    left_out = settings.get(LEFT_OUT_KEY)
    if not chosen and not left_out:
        return {}
    value: dict = ({"partial": True, "extensions": chosen} if chosen else {"partial": False})
    if left_out:
        value["left_out"] = sorted(left_out)
    value["serves"] = not chosen
    return {labels.EXTENSIONS: json.dumps(value, separators=(",", ":"))}


def stage(dest: Path, left_out: dict[str, str] | None = None) -> str:
    """The ``edgevllm-extensions`` context: the wrapper as ``bin/cmake`` and the target's
    leave-out as ``leave-out.json``; the sha256 of both (the compile key's input)."""
    body = Path(__file__).with_name(SCRIPT).read_bytes()
    atomic_write_bytes(dest / WRAPPER, body)
    (dest / WRAPPER).chmod(0o755)
    digest = hashlib.sha256(body)
    if left_out:
        listed = json.dumps(left_out, sort_keys=True, indent=1).encode()
        atomic_write_bytes(dest / LEAVE_OUT_FILE, listed)
        digest.update(b"\0" + listed)
    return digest.hexdigest()


def template_values(chosen: list[str] | None, left_out: dict[str, str] | None = None
                    ) -> dict | None:
    """What the compile template reads (None: a whole build that leaves nothing out, its text
    unchanged)."""
    if not chosen and not left_out:
        return None
    return {"context": CONTEXT, "setting": SETTING, "names": ",".join(chosen or []),
            "leave_out_setting": LEAVE_OUT, "leave_out_file": LEAVE_OUT_FILE,
            "left_out": ", ".join(sorted(left_out or {}))}


def missing_from(chosen: list[str], library_paths: list[str]) -> list[str]:
    """The chosen extensions no library stands for (``vllm/.../<name>.*.so``)."""
    names = {PurePosixPath(p).name.split(".")[0] for p in library_paths
             if p.startswith("vllm/") and ".so" in PurePosixPath(p).name}
    return [n for n in chosen if n not in names]


def wheel_libraries(folder: Path) -> list[str]:
    """The shared objects in the vLLM wheels of ``folder`` (paths inside the wheel)."""
    found: list[str] = []
    for wheel in sorted(folder.glob("vllm-*.whl")):
        with zipfile.ZipFile(wheel) as archive:
            found += [n for n in archive.namelist() if ".so" in PurePosixPath(n).name]
    return found


def check_wheels(settings: dict, folder: Path) -> None:
    """The other half of the agreement, on the compiled wheel before any image is built: every
    extension asked for is in it (the plan holds only those; verify and probe level 1 then pass
    a wheel without the others, and load what is there)."""
    chosen = settings.get(LOCK_KEY) or []
    if not chosen or not any(folder.glob("vllm-*.whl")):
        return
    missing = missing_from(chosen, wheel_libraries(folder))
    if missing:
        raise ArchGateFailed(f"{folder}: the partial kernel build asked for "
                             f"{', '.join(missing)}, and the vLLM wheel holds no such library "
                             "(the tree's setup.py did not build it: the build log's 'edgevllm "
                             "extensions:' line says which targets it asked cmake for)")
