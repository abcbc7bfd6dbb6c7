"""The whole compile of a real vLLM release for a target, on this builder, through the real CLI:
``edgevllm build --target spark --compile`` of PyPI's vLLM 0.33.0 sdist (as a git upstream,
tag v0.33.0), every extension the tree's own CMake builds except what the target leaves out.

It prints and writes (``--out``/figures.json): the compile step's wall time, the CUDA units and
other ninja steps that finished (BuildKit's plain log: ninja's ``[k/N]`` lines), the mean
core-minutes per CUDA unit (wall × jobs / units: a fair figure only while nothing else runs; the
load average is sampled alongside), and the compiler cache's counters.

Resumable: ``--compile-cache redis://...`` (ccache's remote storage, e.g. a redis-server kept
between sessions) and the local ccache mount keep every finished unit, so a run stopped half way
compiles only what it had not finished when it is run again; each run appends its own figures.

What stands in: this machine cannot reach GitHub, so the CMake dependencies vLLM pins come from
``--deps DIR`` (one folder per dependency name, each with an ``EDGEVLLM-STANDIN`` note saying what
it is instead of the pin) or, for those not there, empty stand-ins (tests/support/cross_real).
A networked builder drops ``--deps`` and the build fetches the pins by commit itself.
``requirements/cuda.txt`` is narrowed to torch and FlashInfer, as in the subset end-to-end test:
the runtime closure is then installed in minutes under qemu instead of half an hour; the compile
(the tree's CMakeLists and setup.py) is the release's own.

    python bench/whole_compile.py --out /var/tmp/whole --deps DIR \
        --compile-cache redis://PASSWORD@HOST:PORT --leave-out _deep_gemm_C="why"
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import yaml  # noqa: E402

VLLM = "0.33.0"
FLASHINFER = "0.7.2.post1"
# ninja's status line in BuildKit's plain log: "#12 345.6   [k/N] Building CUDA object X"
STEP = re.compile(r"^#\d+ (\d+(?:\.\d+)?)\s+\[(\d+)/(\d+)\] (Building|Linking) (\w+) "
                  r"(?:object|shared module|shared library) (\S+)")


def make_tree(out: Path) -> tuple[str, Path]:
    """(the upstream URL holding the sdist as tag v0.33.0, the tree) under ``out``."""
    from support.sdists import narrowed_release_upstream

    root = out / "upstream"
    if not (root / "upstream.git").exists():
        narrowed_release_upstream(root, VLLM, FLASHINFER)
    return (root / "upstream.git").as_uri(), root / "src" / f"vllm-{VLLM}"


def dep_folders(target: str, tree: Path, given: Path | None, out: Path) -> dict[str, Path]:
    """NAME -> folder for every CMake dependency: ``given/NAME`` where it exists, else a
    stand-in (empty files at the paths the tree's CMake names; CUTLASS's headers from PyPI)."""
    from edgevllm.sources.plan import plan_for_target
    from edgevllm.specs.targets import load_target
    from support.cross_real import cmake_dep_dirs

    plan = plan_for_target(tree, load_target(target), torch_version="2.14.0", check=False)
    folders = {dep.name: given / dep.name for dep in plan.deps
               if given is not None and (given / dep.name).is_dir()}
    missing = [dep for dep in plan.deps if dep.name not in folders]
    if missing:
        pins = out / "deps" / "pins"
        if not pins.with_name("pins-standins").exists():
            cmake_dep_dirs(missing, pins, tree)
        folders |= {dep.name: pins.with_name("pins-standins") / dep.name for dep in missing}
    return folders


def targets_overlay(target: str, leave_out: dict[str, str], out: Path) -> dict[str, str]:
    """An ``EDGEVLLM_TARGETS_PATH`` folder whose copy of the target leaves out more CMake
    targets (a user's own target file: the mechanism targets.md describes)."""
    if not leave_out:
        return {}
    from edgevllm.specs.targets import target_files

    data = yaml.safe_load(target_files()[target].read_text())
    data["leave_out"] = {**data.get("leave_out", {}), **leave_out}
    folder = out / "targets"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{target}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return {"EDGEVLLM_TARGETS_PATH": str(folder)}


class LoadSampler(threading.Thread):
    """The 1-minute load average every 30 s while the build runs."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.samples: list[float] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(30):
            self.samples.append(os.getloadavg()[0])


def steps_of(log: str) -> list[dict]:
    found = []
    for line in log.splitlines():
        match = STEP.match(line)
        if match:
            at, done, total, verb, kind, path = match.groups()
            found.append({"at": float(at), "done": int(done), "total": int(total),
                          "what": f"{verb} {kind}", "path": path})
    return found


def figures(log: str, wall: float, jobs: int, loads: list[float]) -> dict:
    steps = steps_of(log)
    cuda = [s for s in steps if s["what"] == "Building CUDA"]
    span = (steps[-1]["at"] - steps[0]["at"]) if len(steps) > 1 else 0.0
    stats = [m.group(1) for m in re.finditer(r"edgevllm-ccache-stats (.*)", log)
             if "sed " not in m.group(1)]
    # A resumed run takes the finished units from ccache in well under a second each: the
    # core-minutes go to the units compiled (ccache's misses), where the counters are printed.
    misses = [int(m.group(1)) for m in re.finditer(r"edgevllm-ccache-stats cache_miss\s+(\d+)",
                                                   log)]
    compiled = misses[-1] if misses else len(cuda)
    return {
        "wall_s": round(wall, 1), "jobs": jobs, "ninja_steps_total": steps[-1]["total"] if steps
        else None, "ninja_steps_done": len(steps), "cuda_units_done": len(cuda),
        "units_compiled": compiled, "ninja_span_s": round(span, 1),
        "core_min_per_compiled_unit": round(span * jobs / 60 / compiled, 2) if compiled else None,
        "load_avg_mean": round(sum(loads) / len(loads), 2) if loads else None,
        "load_avg_max": max(loads) if loads else None, "ccache": stats[-40:],
    }


def leave_out_arg(text: str) -> tuple[str, str]:
    """``TARGET=WHY`` (the target file's schema checks both when the build loads it)."""
    name, sep, why = text.partition("=")
    if not sep or not name.strip() or not why.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: expected TARGET=WHY")
    return name.strip(), why.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="spark")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--deps", type=Path, help="folder of dependency folders by CMake name")
    parser.add_argument("--compile-cache", help="ccache remote storage (redis://...)")
    parser.add_argument("--leave-out", action="append", default=[], metavar="TARGET=WHY",
                        type=leave_out_arg)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()

    from edgevllm.containers.docker import DockerEngine
    from support.images import cross_ccache_image, cross_runtime_image

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    engine = DockerEngine()
    url, tree = make_tree(out)
    deps = dep_folders(args.target, tree, args.deps, out)
    spec = out / "spec.yaml"
    spec.write_text(yaml.safe_dump({
        "target": args.target, "platform": "linux/arm64", "vllm": {"repo": url, "ref": f"v{VLLM}"},
        "images": {"build": cross_ccache_image(engine), "runtime": cross_runtime_image(engine)},
        "bytecode_image": cross_ccache_image(engine), "python": "python3.13", "apt_packages": [],
        "torch": {"version": "2.14.0", "index_url": None}, "packages": {"nvidia-cutlass-dsl": None},
        "mods": [], "max_jobs": args.jobs, "image_repo": "edgevllm-bench/whole-compile",
        "probe_required": ["torch"]}, sort_keys=False))
    leave = dict(args.leave_out)
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(ROOT),
           **targets_overlay(args.target, leave, out)}
    command = [sys.executable, "-c", "from edgevllm.cli import main; main()", "build",
               "--spec", str(spec), "--compile", "--out", str(out / "build"),
               "--json", str(out / "result.json"),
               *[arg for name, folder in sorted(deps.items())
                 for arg in ("--cmake-dep", f"{name}={folder}")],
               *(["--compile-cache", args.compile_cache] if args.compile_cache else [])]
    run = len(list(out.glob("run-*.log"))) + 1
    log_path = out / f"run-{run}.log"
    sampler = LoadSampler()
    sampler.start()
    started, began = time.monotonic(), time.time()
    with log_path.open("w") as log:
        code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                              cwd=ROOT).returncode
    sampler.stopped.set()
    text = log_path.read_text(errors="replace")
    for build_log in sorted((out / "build").rglob("*.log")):   # the CLI's build log(s)
        if build_log.stat().st_mtime >= began:   # written by this run
            text += build_log.read_text(errors="replace")
    result = {"run": run, "exit": code, **figures(text, time.monotonic() - started, args.jobs,
                                                    sampler.samples)}
    (out / f"figures-{run}.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "ccache"}, indent=1))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
