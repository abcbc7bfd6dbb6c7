#!/usr/bin/env python3
"""Rebuild cost after a runtime-only change, against a cold build in the same process.

1. cold:    a build whose source tree is new (a salted copy of the fake-vllm fixture) and whose
            compiler cache is new and empty (its own cache id), so the compile stage really
            runs nvcc with nothing to reuse;
2. rebuild: the same spec with one runtime-stage input changed (an env value, or --mod-change to
            add a mod), which must reuse the exported wheels: nothing recompiled.
Prints both wall times, the ratio, and the nvcc invocations each build's log shows.
Target: nothing recompiled, rebuild under 10% of the cold build.

    python bench/rebuild.py [--arch amd64|arm64] [--mod-change]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", choices=["amd64", "arm64"], default="amd64")
    parser.add_argument("--mod-change", action="store_true",
                        help="change the mod list instead of an env value")
    args = parser.parse_args()

    from e2e.conftest import FIXTURE_TREE, KERNELS, hermetic_spec
    from edgevllm.builder.pipeline import build
    from edgevllm.containers.docker import DockerEngine
    from edgevllm.containers.host import host_arch
    from edgevllm.specs.buildspec import spec_from_dict
    from support.gitfixtures import commit_to_branch, make_upstream_repo
    from support.images import cuda_image

    engine = DockerEngine()
    base = cuda_image(engine, args.arch)
    target = "thor" if args.arch == "arm64" else "spark"
    with tempfile.TemporaryDirectory(prefix="edgevllm-bench-") as tmp_name:
        tmp = Path(tmp_name)
        upstream = make_upstream_repo(tmp, FIXTURE_TREE)
        salt = (FIXTURE_TREE / KERNELS).read_text() + f"\n// bench salt {uuid.uuid4()}\n"
        commit_to_branch(upstream, "main", {KERNELS: salt}, "bench: a tree the cache has not seen")
        spec = hermetic_spec(target, base, upstream, platform=f"linux/{args.arch}",
                             mods=[], verify=False, image_repo="edgevllm-bench/rebuild",
                             # the closure's byte-code compiles on this builder: the base's twin
                             bytecode_image=cuda_image(engine, host_arch()))
        spec["vllm"]["ref"] = "main"
        spec["compile_cache_id"] = f"ccache-bench-{uuid.uuid4().hex[:12]}"  # empty: truly cold

        started = time.perf_counter()
        cold = build(spec_from_dict(spec), tmp / "out", engine)
        cold_s = time.perf_counter() - started

        changed = dict(spec, mods=["fused-moe-configs"]) if args.mod_change \
            else dict(spec, env={"EDGEVLLM_BENCH": str(uuid.uuid4())})
        started = time.perf_counter()
        warm = build(spec_from_dict(changed), tmp / "out", engine)
        warm_s = time.perf_counter() - started
        runs = {"cold": nvcc_runs(cold.log_path), "warm": nvcc_runs(warm.log_path)}
        for result in (cold, warm):
            engine.remove_image(result.image, force=True)

    what = "mod list" if args.mod_change else "env value"
    ratio = warm_s / cold_s
    print(f"platform            linux/{args.arch}")
    print(f"compiler cache      {spec['compile_cache']} (new, empty before the cold build)")
    print(f"cold build          {cold_s:8.1f} s   (nvcc runs: {runs['cold']})")
    print(f"rebuild ({what:9}) {warm_s:8.1f} s   (nvcc runs: {runs['warm']})")
    print(f"ratio rebuild/cold  {ratio:8.3f}   (target < 0.10)")
    print(f"CUDA extension recompiled on rebuild: {'yes' if warm.compiled else 'no'}")
    return 0 if (not warm.compiled and ratio < 0.10) else 1


def nvcc_runs(log: Path) -> int:
    """How many times the fixture compile invoked nvcc, read from one build's log."""
    return sum(1 for line in log.read_text(errors="replace").splitlines() if " nvcc: " in line)


if __name__ == "__main__":
    sys.exit(main())
