#!/usr/bin/env python3
"""Bench: the tail of ``inv build`` (checks + labels) on a rebuild that changed one mod, with the
verify cache on and off, and a whole build end to end, in one process.

Four builds through the same ``build()`` as ``inv build``, one after the other, on the same
spec plus one mod of the bench's own (a file it installs, under EDGEVLLM_MODS_PATH):
1. ``cold``: the verify cache empty (every layer read); ``total s`` is the whole build from a
   warm wheelhouse (the closure's wheels already on the host) and whatever BuildKit has cached;
2. ``one mod``: the bench's mod file changed, the verify cache on: only the layers the change
   made are read, the closure's come from the cache;
3. ``again, no change``: the same spec built again, both caches on: every layer known but the
   lock's (a new lock, its time, is the image's top layer: so the probe runs again);
4. ``one mod, caches off``: the same image again with the verify and probe caches off, every
   layer read and the probe run: the tail before the caches, on the same image, same run.
Printed: each build's total and tail seconds, the tail's steps (verify, probe, the probe's wait
after verify, labels, SBOM, layer sizes), the layers verify read, the ratio of the tail with the
caches off to the tail with them on, the issue's goals, and the process's peak memory.

Default: a small image (the tests' Debian + Python image, the stand-in vLLM wheel carrying one
nvcc-built sm_121a library), for a CI-sized run. ``--real``: the real vLLM 0.33.0 prebuilt
spark image of tests/e2e/test_real_vllm_e2e.py (about 10 GB, this host's platform, the Debian
trixie base, the closure from the wheelhouse under $EDGEVLLM_TEST_CACHE/edgevllm-cache).

    python bench/build_tail.py [--real] [--keep]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

MOD = "bench-tail-mod"
NEVER = "sys_platform == 'edgevllm-never'"
CERTIFI = "certifi>=2026.10.18"  # the PyPI mirror here lags one pin (tests/e2e/test_real_vllm)
GOALS = {"one_mod_tail_s": 30, "whole_build_s": 300}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real", action="store_true", help="the real vLLM 0.33.0 image")
    parser.add_argument("--keep", action="store_true", help="keep the images built here")
    parser.add_argument("--arch", choices=["amd64", "arm64"], default=None,
                        help="the image's platform (default: this host's); arm64 on an x86_64 "
                             "host builds and probes under qemu (the small image only)")
    return parser.parse_args()


def write_mod(root: Path, text: str) -> None:
    from support.files_mod import write_files_mod

    write_files_mod(root, MOD, text, "/opt/edgevllm/bench-tail", "the build tail bench's mod")


def small_spec(engine, work: Path, arch: str | None = None) -> dict:
    from support.cuda_libs import nvcc_libs
    from support.images import python_image
    from support.platforms import native_arch, native_platform
    from support.standin_wheels import host_library, standin_vllm_wheel

    arch = arch or native_arch()
    compiler = "gcc" if arch == native_arch() else "aarch64-linux-gnu-gcc"
    wheel = standin_vllm_wheel(work, {"torch/lib/libtorch_cuda.so":
                                      nvcc_libs()["sm_121a"].read_bytes(),
                                      "vllm/libstandin_host.so": host_library(work, compiler)})
    base = python_image(engine, arch)
    platform = native_platform() if arch == native_arch() else f"linux/{arch}"
    return {"target": "spark", "platform": platform, "python": "python3.11",
            "images": {"build": base, "runtime": base},
            # the closure's byte-code compiles on this host's platform: the same Python's twin
            "bytecode_image": python_image(engine, native_arch()),
            "apt_packages": [], "mods": [MOD], "vllm_wheel": str(wheel),
            "torch": {"version": None, "index_url": None}, "overrides": [f"torch ; {NEVER}"],
            "packages": {"flashinfer-python": None, "nvidia-cutlass-dsl": None},
            "image_repo": "edgevllm-bench/tail-small", "probe_required": ["vllm"]}


def real_spec(engine) -> dict:
    from support.downloads import test_cache_dir
    from support.platforms import native_platform
    from support.real_vllm import PYTHON, trixie_python_image

    os.environ["EDGEVLLM_CACHE"] = str(test_cache_dir("edgevllm-cache"))  # the wheelhouse
    return {"target": "spark", "platform": native_platform(), "python": PYTHON,
            "base_image": trixie_python_image(engine), "apt_packages": [],
            "vllm_wheel": "0.33.0", "overrides": [CERTIFI], "add_mods": [MOD],
            "torch": {"version": "2.14.0", "index_url": None},
            "image_repo": "edgevllm-bench/tail-real"}


def one_build(case: str, spec: dict, work: Path, engine) -> dict:
    from edgevllm.builder.pipeline import build
    from edgevllm.specs.buildspec import spec_from_dict

    started = time.perf_counter()
    result = build(spec_from_dict(spec), work / "out", engine)
    total = time.perf_counter() - started
    tail = result.tail or {}
    layers = tail.get("verify_layers") or {}
    return {"case": case, "total_s": round(total, 1), "image_s": result.image_seconds,
            "tail": tail.get("seconds", {}), "read": layers.get("read", {}),
            "layers": len(set(layers.get("layers", []))), "tags": result.tags}


def main() -> int:
    args = parse_args()
    from edgevllm.containers.docker import DockerEngine

    engine = DockerEngine()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="edgevllm-tail-bench-") as tmp:
        work = Path(tmp)
        os.environ["EDGEVLLM_MODS_PATH"] = str(work / "mods")
        os.environ["EDGEVLLM_VERIFY_CACHE"] = str(work / "verify-cache")
        os.environ["EDGEVLLM_PROBE_CACHE"] = str(work / "probe-cache")
        write_mod(work / "mods", "first\n")
        spec = real_spec(engine) if args.real else small_spec(engine, work, args.arch)
        try:
            rows.append(one_build("cold", spec, work, engine))
            write_mod(work / "mods", "second\n")
            rows.append(one_build("one mod", spec, work, engine))
            rows.append(one_build("again, no change", spec, work, engine))
            os.environ.update({"EDGEVLLM_VERIFY_CACHE_MAX": "0", "EDGEVLLM_PROBE_CACHE_MAX": "0"})
            rows.append(one_build("one mod, caches off", spec, work, engine))
        finally:
            for setting in ("EDGEVLLM_VERIFY_CACHE_MAX", "EDGEVLLM_PROBE_CACHE_MAX"):
                os.environ.pop(setting, None)
            if not args.keep:
                for tag in dict.fromkeys(t for row in rows for t in row["tags"]):
                    subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)
    where = f"linux/{args.arch}, under qemu" if args.arch and spec["platform"].endswith(
        args.arch) and args.arch != native_arch() else "this host's platform"
    report(rows, "real vLLM 0.33.0" if args.real else "small (stand-in)", where)
    return 0


def native_arch() -> str:
    from support.platforms import native_arch as arch
    return arch()


def report(rows: list[dict], which: str, where: str = "this host's platform") -> None:
    steps = ("verify", "probe", "probe_after_verify", "labels", "sbom", "layers", "mods_record")
    print(f"image: {which}; peak memory of this process (builds in-process): "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MiB")
    print(f"{'case':<20} {'total s':>8} {'image s':>8} {'tail s':>7}  "
          + " ".join(f"{s:>9}" for s in ("verify", "probe", "waited", "labels", "sbom",
                                          "layers", "mods")) + "  layers read")
    for row in rows:
        tail = row["tail"]
        print(f"{row['case']:<20} {row['total_s']:>8.1f} {row['image_s'] or 0:>8.1f} "
              f"{tail.get('total', 0):>7.1f}  "
              + " ".join(f"{tail.get(step, 0):>9.1f}" for step in steps)
              + f"  {len(row['read'])} of {row['layers']}")
    on, off = rows[1]["tail"].get("total", 0), rows[3]["tail"].get("total", 0)
    print(f"one-mod rebuild's tail: {off:.1f} s with the caches off, {on:.1f} s with them on: "
          f"{off / on if on else 0:.1f}x; a rebuild that changed nothing: "
          f"{rows[2]['tail'].get('total', 0):.1f} s")
    print(f"goals (issue 34): one-mod tail <= {GOALS['one_mod_tail_s']} s: {on:.1f} s; whole "
          f"build <= {GOALS['whole_build_s']} s: {rows[0]['total_s']:.1f} s (cold verify cache,"
          f" {where})")


if __name__ == "__main__":
    sys.exit(main())
