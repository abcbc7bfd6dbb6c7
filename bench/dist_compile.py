#!/usr/bin/env python3
"""What sending a CUDA unit to an sccache-dist pool costs, against compiling it here, in one run.

A local pool (``builder/distpool``: a scheduler and two workers from the pinned sccache 0.16.0,
on 127.0.0.1) and generated CUDA units (a few kernels each) compiled by the real nvcc (CUDA 13.0,
``EDGEVLLM_NVCC``) for sm_121a, one at a time:

1. local:  plain nvcc, each unit timed;
2. upload: the first unit through a fresh sccache client (it packages and ships nvcc's
           toolchain once: cudafe++, cicc, ptxas, the host compiler);
3. pool:   the other units through the same client, each timed.

Prints the per-unit overhead (median pool / median local: the pool shares this host's cores, so
the same cores do the work both ways), the fraction of nvcc's steps that ran on workers, and the
projection of a whole spark compile of vLLM 0.33.0 (190 units, 254 core-minutes measured on the
cross road) for 1, 4 and 8 workers of 16 cores from those per-unit figures. On this machine the
speed-up is projected from measured overheads, never claimed: the workers share its 2 cores.

    sudo python bench/dist_compile.py [--units 6] [--kernels 12]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]
NVCC = os.environ.get("EDGEVLLM_NVCC", "/usr/local/cuda-13.0/bin/nvcc")
WHOLE_UNITS, WHOLE_CORE_MIN = 190, 254.0  # vLLM 0.33.0 for spark, cross road (issue 43)


def unit_source(k: int, kernels: int) -> str:
    body = [f"__global__ void k{k}_{j}(float* x, const float* y, float a, int n) {{\n"
            f"  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
            f"  if (i < n) {{ float v = y[i]; for (int r = 0; r < {j + 4}; ++r) v = v * a + {j}.f;"
            f" x[i] = v; }} }}\n" for j in range(kernels)]
    return "".join(body)


def timed(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> float:
    started = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, check=True)
    return time.perf_counter() - started


def client_env(tools, url: str, token: str, work: Path) -> dict[str, str]:
    from edgevllm.builder.distpool.config import client_toml, write_private

    conf = write_private(work / "client.toml", client_toml(url, token))
    return {"PATH": os.environ["PATH"], "HOME": str(work), "SCCACHE_CONF": str(conf),
            "SCCACHE_DIR": str(work / "cache"), "SCCACHE_SERVER_PORT": "4399",
            "SCCACHE_IDLE_TIMEOUT": "0"}


def measure(units: int, kernels: int, work: Path) -> dict:
    from edgevllm.builder.distpool import pool, tools

    binaries = tools.ensure_tools()
    folder = work / "pool"
    folder.mkdir(mode=0o700)
    url = pool.up(pool.PoolPlan(workers=2, port=10650), binaries, folder).scheduler
    try:
        for k in range(units):
            (work / f"u{k}.cu").write_text(unit_source(k, kernels))
        argv = [NVCC, "-c", "-arch=sm_121a", "-O2"]
        local = [timed([*argv, f"u{k}.cu", "-o", f"l{k}.o"], work) for k in range(units)]
        env = client_env(binaries, url, pool.token_paths(folder)[0].read_text().strip(), work)
        sccache = str(binaries.sccache)
        subprocess.run([sccache, "--start-server"], env=env, check=True, capture_output=True)
        try:
            remote = [timed([sccache, *argv, f"u{k}.cu", "-o", f"r{k}.o"], work, env)
                      for k in range(units)]
            stats = json.loads(subprocess.run(
                [sccache, "--show-stats", "--stats-format", "json"], env=env, check=True,
                capture_output=True, text=True).stdout)["stats"]
        finally:
            subprocess.run([sccache, "--stop-server"], env=env, capture_output=True)
    finally:
        pool.down(folder)
    return {"local": local, "upload": remote[0], "remote": remote[1:], "stats": stats}


def report(found: dict) -> None:
    local, remote = statistics.median(found["local"]), statistics.median(found["remote"])
    ratio = remote / local
    stats = found["stats"]
    misses = sum(stats["cache_misses"]["counts"].values())
    sent = sum(stats["dist_compiles"].values())
    print(f"local unit (median of {len(found['local'])}): {local:.2f} s")
    print(f"pool unit (median of {len(found['remote'])}): {remote:.2f} s   "
          f"overhead ratio pool/local: {ratio:.3f} (goal <= 1.15)")
    print(f"first unit with the toolchain upload: {found['upload']:.2f} s "
          f"(+{found['upload'] - remote:.2f} s once per client and toolchain)")
    print(f"nvcc steps on workers: {sent}/{misses} = {sent / max(misses, 1):.0%} "
          f"(dist errors {stats['dist_errors']}); per worker {stats['dist_compiles']}")
    per_unit_core_min = WHOLE_CORE_MIN / WHOLE_UNITS
    for workers in (1, 4, 8):
        minutes = WHOLE_UNITS * per_unit_core_min * ratio / (workers * 16) \
            + found["upload"] / 60
        print(f"projected whole spark compile ({WHOLE_UNITS} units, {WHOLE_CORE_MIN:.0f} "
              f"core-min) on {workers} x 16 cores: {minutes:.1f} min (goal on 4: <= 6)")
    print("projected from per-unit figures measured here, not measured on a pool of that size")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=6)
    parser.add_argument("--kernels", type=int, default=12)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dist-compile-"))
    try:
        report(measure(max(args.units, 3), args.kernels, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
