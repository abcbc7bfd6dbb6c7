#!/usr/bin/env python3
"""A second builder's build against the first's, in one run: the shared compile cache and the
wheel cache.

Three builders of the same spec (the fake-vllm fixture tree, salted so no cache has seen it,
compiled with nvcc through ccache for the target's arch list), each a new machine as far as the
engine goes: its own empty local compiler cache (its own cache id), its own output folder, and
none of the others' BuildKit layers (--rerun-steps: every build step runs again).
1. first:   cold; --compile-cache (a real redis-server, empty) and --wheel-cache (a real registry,
            empty): it compiles every unit, fills the shared cache, publishes its wheels;
2. second:  --compile-cache only: it compiles, every unit a hit from redis;
3. third:   --wheel-cache only: its compile key's wheels come from the registry, every sha256
            checked: no compile stage at all.
Prints each wall time, its ratio to the first's, and ccache's hits and misses (a hit still shows
the nvcc command line in the log, so ccache's counters, not the log, say what was compiled).
Target: the second builder misses nothing; the third compiles nothing, with the same image tag.

    python bench/second_builder.py [--arch amd64|arm64]
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
    args = parser.parse_args()

    from e2e.conftest import FIXTURE_TREE, KERNELS, hermetic_spec
    from edgevllm.containers.docker import DockerEngine
    from support.gitfixtures import commit_to_branch, make_upstream_repo
    from support.images import ccache_image
    from support.redis_server import redis_server
    from support.registry import local_registry

    engine = DockerEngine()
    base = ccache_image(engine, args.arch)
    target = "thor" if args.arch == "arm64" else "spark"
    with tempfile.TemporaryDirectory(prefix="edgevllm-bench-") as tmp_name, \
            redis_server(engine, uuid.uuid4().hex) as redis, local_registry() as registry:
        tmp = Path(tmp_name)
        upstream = make_upstream_repo(tmp, FIXTURE_TREE)
        salt = (FIXTURE_TREE / KERNELS).read_text() + f"\n// bench salt {uuid.uuid4()}\n"
        commit_to_branch(upstream, "main", {KERNELS: salt}, "bench: a tree no cache has seen")
        spec = hermetic_spec(target, base, upstream, platform=f"linux/{args.arch}",
                             mods=[], verify=False, image_repo="edgevllm-bench/second-builder",
                             rerun_steps=True)
        spec["vllm"]["ref"] = "main"
        wheels = f"{registry}/edgevllm/wheels"
        builders = {"first (cold)": {"compile_cache": redis, "wheel_cache": wheels},
                    "second (compile cache)": {"compile_cache": redis},
                    "third (wheel cache)": {"wheel_cache": wheels}}
        rows = [timed_build(engine, {**spec, **extra}, tmp / f"out{n}")
                for n, extra in enumerate(builders.values())]
    return report(args.arch, list(builders), rows)


def timed_build(engine, spec: dict, out: Path) -> dict:
    from edgevllm.builder.pipeline import build
    from edgevllm.specs.buildspec import spec_from_dict

    spec = {**spec, "compile_cache_id": f"ccache-bench-{uuid.uuid4().hex[:12]}"}  # empty
    started = time.perf_counter()
    result = build(spec_from_dict(spec), out, engine)
    seconds = time.perf_counter() - started
    engine.remove_image(result.image, force=True)
    cache = result.compile_cache or {}
    return {"s": seconds, "tag": result.tags[0], "compiled": result.compiled,
            "misses": cache.get("misses", "-"), "hits": cache.get("hits", "-")}


def report(arch: str, names: list[str], rows: list[dict]) -> int:
    first = rows[0]["s"]
    print(f"platform linux/{arch}; each builder: an empty local compiler cache, --rerun-steps")
    print(f"{'builder':24} {'wall s':>8} {'/first':>7} {'compile stage':>14} "
          f"{'ccache hits':>12} {'misses':>7}")
    for name, row in zip(names, rows, strict=True):
        print(f"{name:24} {row['s']:8.1f} {row['s'] / first:7.3f} "
              f"{'ran' if row['compiled'] else 'none':>14} {row['hits']!s:>12} "
              f"{row['misses']!s:>7}")
    same_tag = len({row["tag"] for row in rows}) == 1
    print(f"same image tag for all three: {'yes' if same_tag else 'no'}")
    ok = rows[1]["misses"] == 0 and not rows[2]["compiled"] and same_tag
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
