"""Bench: real vLLM units compiled natively for x86_64, cross for aarch64 and by the arm64 nvcc
under qemu, in one run.

    python bench/cross_compile.py [--target spark] [--unit csrc/activation_kernels.cu ...]
        [--out out/cross-compile]

For each unit (default: activation_kernels and layernorm_kernels of vLLM 0.33.0's ``_C``, from
PyPI's sdist with the target's source patches; ``--unit`` picks others of the plan) the three
compiles of tests/support/cross_units.py run one after the other, unit by unit, so that the three
figures of a unit are taken close together: nvcc 13.0.88 with x86_64 g++ 14 (native), with Debian
trixie's ``aarch64-linux-gnu-g++`` 14 and ``-target-dir sbsa-linux`` (cross), and the aarch64 nvcc
with aarch64 g++ 14 in a linux/arm64 container under qemu (qemu). Printed per unit: wall and CPU
(user + system) seconds of each compile, the ratios cross/native and qemu/cross (of CPU seconds:
steadier than wall seconds on a shared machine), and whether the three cubins have the same sha256;
then the whole compile extrapolated from the plan's unit count of the real tree:

    units x mean CPU seconds per unit / cores

for 2, 16 and 20 cores. The model assumes one nvcc per core kept busy (the plan's ``--threads=1``)
and units like the measured ones. It leaves out the configure, linking and packaging, memory
limits (a CUTLASS unit's nvcc takes several GB), and that the measured units are among the
smallest: CUTLASS units take 5-60x longer, so the figure is a lower bound for the whole compile.
The load average before and after is printed: other work on the machine slows the wall seconds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from edgevllm.containers.docker import DockerEngine  # noqa: E402
from support import cross_units as cu  # noqa: E402

DEFAULT_UNITS = ["csrc/activation_kernels.cu", "csrc/layernorm_kernels.cu"]
CORES = (2, 16, 20)


def measure(out: Path, target: str, units: list[str]) -> tuple[int, dict[str, dict]]:
    """The plan's unit count, and unit -> mode -> Compiled."""
    engine = DockerEngine()
    images = cu.images(engine)
    tree = cu.vllm_tree(target, out / "vllm")
    plan = cu.unit_plan(tree, target)
    results: dict[str, dict] = {}
    for unit in units:
        jobs = {unit: plan.nvcc_args(unit)}
        results[unit] = {}
        for mode in cu.MODES:
            folder = out / mode / cu.object_name(unit)
            [done] = cu.compile_units(engine, images[mode], mode, tree, jobs, folder,
                                      parallel=False).values()
            results[unit][mode] = done
            print(f"  {unit} {mode}: {done.wall_s:.1f} s wall, {done.cpu_s:.1f} s CPU",
                  flush=True)
    return cu.plan_units(plan), results


def report(target: str, plan_units: int, results: dict[str, dict]) -> None:
    print(f"\n| unit ({target}) | native wall / CPU s | cross wall / CPU s | qemu wall / CPU s "
          "| cross/native | qemu/cross | cubins (sha256) |")
    print("|---|---|---|---|---|---|---|")
    for unit, by_mode in results.items():
        n, c, q = (by_mode[m] for m in cu.MODES)
        same = n.cubins == c.cubins == q.cubins and bool(c.cubins)
        digest = ", ".join(f"{k.rsplit('.', 2)[-2]} {v[:12]}" for k, v in c.cubins.items())
        print(f"| {unit} | {n.wall_s:.1f} / {n.cpu_s:.1f} | {c.wall_s:.1f} / {c.cpu_s:.1f} "
              f"| {q.wall_s:.1f} / {q.cpu_s:.1f} | {c.cpu_s / n.cpu_s:.2f}x "
              f"| {q.cpu_s / c.cpu_s:.1f}x | {'identical' if same else 'DIFFER'}: {digest} |")
    print(f"\nwhole compile, {plan_units} units (the plan of the real tree) x mean CPU s per "
          "unit / cores (a lower bound: see the module doc):")
    print("| mode | mean CPU s per unit | " + " | ".join(f"{k} cores" for k in CORES) + " |")
    print("|---|---|" + "---|" * len(CORES))
    for mode in cu.MODES:
        mean = statistics.mean(by_mode[mode].cpu_s for by_mode in results.values())
        cells = " | ".join(_duration(plan_units * mean / cores) for cores in CORES)
        print(f"| {mode} | {mean:.1f} | {cells} |")


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="spark", choices=["spark", "thor"])
    parser.add_argument("--unit", action="append", default=None,
                        help="csrc/... unit of the plan to compile (repeatable)")
    parser.add_argument("--out", default="out/cross-compile")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    units = args.unit or DEFAULT_UNITS
    before = os.getloadavg()
    print(f"{os.cpu_count()} cores; load average before: {before[0]:.2f} {before[1]:.2f} "
          f"{before[2]:.2f}", flush=True)
    plan_units, results = measure(out, args.target, units)
    after = os.getloadavg()
    print(f"load average after: {after[0]:.2f} {after[1]:.2f} {after[2]:.2f}")
    report(args.target, plan_units, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
