"""The real vLLM configure next to the kernel plan, and a few real kernels compiled by it.

    python bench/compile_slice.py --target spark [--vllm-ref v0.33.0] [--out out/compile-slice]
        [--unit csrc/activation_kernels.cu --unit csrc/layernorm_kernels.cu]

On a machine that reaches GitHub, with CUDA 13 (nvcc), cmake >= 3.26, ninja and torch installed in
the running Python: prepares the vLLM tree as ``inv build`` does (patches the target selects),
evaluates the kernel plan, fetches every repository the tree's CMake clones into the git cache
and runs the tree's real ``cmake`` configure with the ``*_SRC_DIR`` overrides (so the configure
itself clones nothing), then builds the object files of ``--unit`` with ninja and scans them with
``edgevllm.verify``. It prints the plan's arches against the configure's own
"CUDA supported target architectures" line and each object's SASS, and the time of the plan
against the time of the configure (one run, same process).

Without GitHub it stops at once and says so (exit 2): the configure needs the ~10 dependency
sources, which only GitHub has. tests/e2e/test_compile_slice.py is the offline part of this.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

GITHUB_PROBE = "https://github.com/vllm-project/vllm.git"


def github_reachable() -> str | None:
    """None when ``git ls-remote`` reaches GitHub; else why not (one line)."""
    try:
        proc = subprocess.run(["git", "ls-remote", GITHUB_PROBE, "HEAD"], capture_output=True,
                              text=True, timeout=30, env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"git ls-remote {GITHUB_PROBE}: {exc}"
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or ["no output"]
        return f"git ls-remote {GITHUB_PROBE} failed: {lines[-1]}"
    return None


def missing_tools() -> list[str]:
    missing = [tool for tool in ("cmake", "ninja", "nvcc") if shutil.which(tool) is None]
    if subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode:
        missing.append(f"torch (in {sys.executable})")
    return missing


def prepare(target, ref: str, out: Path):
    from edgevllm.mods.patches import apply_patch, load_patches
    from edgevllm.sources.plan import patches_skipped
    from edgevllm.sources.prepare import SourceRequest, prepare_sources

    prepared = prepare_sources(SourceRequest.from_cli("vllm", None, ref), out / "vllm")
    skipped = patches_skipped(target)
    for patch in load_patches():
        if target.name in patch.manifest.targets and patch.name not in skipped:
            assert prepared.tree_dir is not None
            outcome = apply_patch(patch, prepared.tree_dir, prepared.version)
            print(f"patch {patch.name}: {outcome['outcome']}")
    return prepared


def configure(tree: Path, build: Path, target, deps_dir: Path, records) -> tuple[float, str]:
    env = dict(os.environ, TORCH_CUDA_ARCH_LIST=target.torch_cuda_arch_list)
    env.update({r.env_var: str(deps_dir / name) for name, r in records.items()})
    argv = ["cmake", "-S", str(tree), "-B", str(build), "-G", "Ninja",
            f"-DVLLM_PYTHON_EXECUTABLE={sys.executable}", "-DVLLM_TARGET_DEVICE=cuda",
            "-DCMAKE_BUILD_TYPE=RelWithDebInfo"]
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    (build.parent / "configure.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"configure failed ({tail}); see {build.parent / 'configure.log'}")
    return seconds, proc.stdout


def build_objects(build: Path, units: list[str]) -> dict[str, Path]:
    targets = subprocess.run(["ninja", "-C", str(build), "-t", "targets", "all"],
                             capture_output=True, text=True, check=True).stdout
    objects = {}
    for unit in units:
        match = re.search(rf"^(\S*{re.escape(unit)}\.o):", targets, re.M)
        if not match:
            print(f"{unit}: no object rule in the configured build (not compiled for this target)")
            continue
        subprocess.run(["ninja", "-C", str(build), match.group(1)], check=True)
        objects[unit] = build / match.group(1)
    return objects


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="spark")
    parser.add_argument("--vllm-ref", default="v0.33.0")
    parser.add_argument("--out", default="out/compile-slice")
    parser.add_argument("--unit", action="append",
                        default=None, help="csrc/... file to compile (repeatable)")
    args = parser.parse_args()
    why = github_reachable()
    if why:
        print(f"OFFLINE: cannot reach GitHub ({why}).\nThe real vLLM configure needs the "
              "repositories its CMake clones, which only GitHub has; nothing was configured or "
              "compiled. Run this on a machine with GitHub access; "
              "tests/e2e/test_compile_slice.py covers the offline part.")
        return 2
    missing = missing_tools()
    if missing:
        print(f"missing: {', '.join(missing)}; install them to run the real configure")
        return 2
    return run(args)


def run(args) -> int:
    from edgevllm.sources.cmakedeps import fetch_cmake_deps, summarize
    from edgevllm.sources.plan import plan_for_target
    from edgevllm.specs.targets import load_target
    from edgevllm.verify.api import scan_path

    target, out = load_target(args.target), Path(args.out).resolve()
    units = args.unit or ["csrc/activation_kernels.cu", "csrc/layernorm_kernels.cu"]
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    prepared = prepare(target, args.vllm_ref, out)
    start = time.perf_counter()
    plan = plan_for_target(prepared.tree_dir, target, check=False)
    plan_s = time.perf_counter() - start
    records = fetch_cmake_deps(plan.deps, out / "deps")
    print("\n".join(summarize(records)))
    configure_s, log = configure(prepared.tree_dir, out / "build", target, out / "deps", records)
    said = re.search(r"CUDA supported target architectures: (\S*)", log)
    print(f"plan: CUDA_ARCHS {';'.join(plan.cuda_archs)}; configure: "
          f"{said.group(1) if said else '(no such line)'}")
    for unit, obj in build_objects(out / "build", units).items():
        sass = scan_path(obj)[0].arches("sass")
        print(f"{unit}: plan {' '.join(plan.flags_for(unit))}; object SASS {', '.join(sass)}")
    print(f"plan {plan_s:.2f} s, configure {configure_s:.1f} s "
          f"(configure/plan = {configure_s / max(plan_s, 1e-6):.0f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
