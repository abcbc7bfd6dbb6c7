#!/usr/bin/env python3
"""The real vLLM 0.33.0 slice (``_moe_C_stable_libtorch``: 28 CUDA units) for spark, built on the
cross road through ``inv build --compile --dist`` on a local two-worker sccache-dist pool, against
the local cross road's build of the same slice, in one run.

The tree and its stand-ins are the subset e2e's (tests/e2e/test_subset_real_tree_build_e2e.py:
PyPI's sdist as tag v0.33.0, support/cross_real's CMake stand-ins, the wheelhouse of the test
cache ``EDGEVLLM_CACHE``), and so is the spec. Both builds run the real CLI (``edgevllm build``):

1. local: no pool, ccache with ``--compile-cache`` (a copy of the redis data the subset e2e keeps,
   so its units may come from that cache: the figures say how many did);
2. dist:  ``--dist`` to a pool of a scheduler and two workers (builder/distpool, the pinned
   sccache 0.16.0) on Docker's bridge address (what a BuildKit step reaches), with a compile
   cache mount of its own (``--compile-cache-id``, new per run), so sccache's local cache is
   empty and every unit it compiles is a miss that the pool may take.

Prints from the dist build's summary (``compile_cache.dist``): the units sccache compiled on the
pool and here, per worker, dist errors, sccache's counters that say why a unit stayed here; that
verify and probe passed in both builds; and every cubin (``cuobjdump -xelf all`` of each library
of the wheel, by sha256) of the two wheels compared. Wall times are printed, not compared: the
pool's workers share this host's cores, so no speed-up is measured or claimed here.

sccache's counters, as the summary keeps them: per CUDA unit, its nvcc steps sccache compiles (the
``CUDA``, ``CUDA (Device code)``, ``PTX`` and ``CUBIN`` misses) may go to the pool; the parts of an
nvcc call it keeps on the builder count as non-cacheable compilations (one per unit); the link of
the library does not go through sccache. "remote" is the pool's share of sccache's compiles.

Needs the engine, root, bubblewrap, redis-server, qemu for linux/arm64 (the image's closure), about
8 GB free and the test cache; the dist compile of the slice took 28 minutes on this 2-core host
(docs/dist.md). With ``--work DIR --keep`` a later run in the same folder takes the tree and the
local build from there (and says so) and builds the dist side again. Not a test.

    sudo python bench/dist_real_slice.py [--work DIR] [--keep] [--port 10700]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

VLLM, FLASHINFER, TARGET = "0.33.0", "0.7.2.post1", "spark"
EXTENSION = "_moe_C_stable_libtorch"
IMAGE_REPO = "edgevllm-bench/dist-real-slice"
KEPT_REDIS = ("compile-cache", "cross-subset")   # the subset e2e's kept compile cache


def tree_and_standins(work: Path) -> tuple[str, list[str]]:
    """(the upstream's URL, the --cmake-dep arguments), as the subset e2e makes them; kept in
    ``work``/inputs.json, and taken from there when a run in the same folder made them."""
    kept = work / "inputs.json"
    if kept.exists():
        found = json.loads(kept.read_text())
        return found["url"], found["deps"]
    from edgevllm.sources.plan import plan_for_target
    from edgevllm.specs.targets import load_target
    from support.cross_real import cmake_dep_dirs
    from support.sdists import narrowed_release_upstream

    upstream, tree = narrowed_release_upstream(work / "vllm-upstream", VLLM, FLASHINFER)
    plan = plan_for_target(tree, load_target(TARGET), torch_version="2.14.0", check=False)
    root, _ = cmake_dep_dirs(plan.deps, work / "deps" / "pins", tree)
    deps = [arg for dep in sorted(plan.deps, key=lambda d: d.name)
            for arg in ("--cmake-dep", f"{dep.name}={root / dep.name}")]
    kept.write_text(json.dumps({"url": upstream.url, "deps": deps}))
    return upstream.url, deps


def spec_file(path: Path, engine, upstream_url: str) -> Path:
    from e2e.conftest import write_spec
    from support.images import cross_ccache_image, cross_runtime_image

    build_image, runtime_image = cross_ccache_image(engine), cross_runtime_image(engine)
    return write_spec(path, target=TARGET, platform="linux/arm64",
                      vllm={"repo": upstream_url, "ref": f"v{VLLM}"},
                      images={"build": build_image, "runtime": runtime_image},
                      bytecode_image=build_image, python="python3.13", apt_packages=[],
                      torch={"version": "2.14.0", "index_url": None},
                      packages={"nvidia-cutlass-dsl": None}, mods=[], max_jobs=2,
                      image_repo=IMAGE_REPO, probe_required=["torch"])


def build(spec: Path, deps: list[str], out: Path, *extra: str) -> tuple[dict, float]:
    """(the build's JSON summary, its wall seconds): the real CLI, its output in out/build.log."""
    from support.downloads import test_cache_dir

    argv = [sys.executable, "-c", "from edgevllm.cli import main; main()", "build",
            "--spec", str(spec), "--compile", "--extensions", EXTENSION, *deps, *extra,
            "--out", str(out), "--json", str(out / "result.json")]
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(REPO),
           "EDGEVLLM_CACHE": str(test_cache_dir("edgevllm-cache"))}
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(out / "build.log", "w") as sink:
        code = subprocess.run(argv, stdout=sink, stderr=subprocess.STDOUT, env=env,
                              cwd=REPO, timeout=5400).returncode
    seconds = time.monotonic() - started
    (out / "wall_s").write_text(f"{seconds:.1f}\n")
    if code != 0:
        tail = (out / "build.log").read_text(errors="replace")[-4000:]
        raise SystemExit(f"{out.name} build: exit {code}\n{tail}")
    return json.loads((out / "result.json").read_text()), seconds


def wheel_cubins(out: Path, work: Path) -> dict[str, str]:
    """library:cubin -> sha256, for every library of the one wheel under ``out``."""
    from support.cross_units import cubins

    (wheel,) = sorted((out / TARGET / "wheels").glob("*/vllm-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(work)
    return {f"{lib.name}:{k}": v for lib in sorted(work.rglob("*.so"))
            for k, v in cubins(lib).items()}


def local_build(engine, spec: Path, deps: list[str], work: Path) -> tuple[dict, float]:
    """The local cross road, its ccache remote storage a copy of the subset e2e's kept data."""
    from support.downloads import test_cache_dir
    from support.redis_server import kept_redis_server

    out = work / "local"
    if (out / "result.json").exists() and (out / "wall_s").exists():   # --work of a run
        print(f"local build: taken from {out} (an earlier run in this work folder)")
        return json.loads((out / "result.json").read_text()), float((out / "wall_s").read_text())
    kept = work / "redis"
    shutil.rmtree(kept, ignore_errors=True)
    shutil.copytree(test_cache_dir(*KEPT_REDIS), kept)   # the e2e's own data is left untouched
    with kept_redis_server(engine, kept) as url:
        return build(spec, deps, out, "--compile-cache", url)


def dist_build(spec: Path, deps: list[str], work: Path, port: int) -> tuple[dict, float]:
    from e2e.test_dist_build_e2e import bridge_address
    from edgevllm.builder.distpool import pool, tools

    folder = work / "pool"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(mode=0o700)
    bridge = bridge_address()
    try:
        status = pool.up(pool.PoolPlan(workers=2, bind=bridge, port=port), tools.ensure_tools(),
                         folder)
        print(f"pool: {status.describe()}", flush=True)
        return build(spec, deps, work / "dist", "--dist", f"sccache://{bridge}:{port}",
                     "--dist-token-file", str(pool.token_paths(folder)[0]),
                     "--compile-cache-id", f"edgevllm-bench-dist-{uuid.uuid4().hex[:12]}")
    finally:
        pool.down(folder)


def measure(work: Path, port: int) -> dict:
    from edgevllm.containers.docker import DockerEngine
    from support.platforms import require_runnable

    if os.geteuid() != 0 or not shutil.which("bwrap"):
        raise SystemExit("run as root with bubblewrap installed (sccache-dist workers)")
    require_runnable("arm64")
    engine = DockerEngine()
    url, deps = tree_and_standins(work)
    spec = spec_file(work / "spec.yaml", engine, url)
    found: dict = {}
    try:
        found["local"], found["local_s"] = local_build(engine, spec, deps, work)
        print(f"local build: {found['local_s']:.0f} s", flush=True)
        found["dist"], found["dist_s"] = dist_build(spec, deps, work, port)
        print(f"dist build: {found['dist_s']:.0f} s", flush=True)
        found["same"] = {"local": wheel_cubins(work / "local", work / "x-local"),
                         "dist": wheel_cubins(work / "dist", work / "x-dist")}
    finally:
        listed = engine.run_cli(["images", "--format", "{{.Repository}}:{{.Tag}}", IMAGE_REPO])
        for tag in listed.stdout.decode().split():
            engine.remove_image(tag)
    (work / "figures.json").write_text(json.dumps(found, indent=1, default=str))
    return found


def report(found: dict) -> None:
    local, dist = found["local"], found["dist"]
    cache = local.get("compile_cache") or {}
    print(f"local cross road: {found['local_s']:.0f} s; ccache {cache.get('hits', 0)} hit(s) "
          f"({cache.get('remote_hits', 0)} from the kept remote storage), "
          f"{cache.get('misses', 0)} compiled")
    pool = (dist.get("compile_cache") or {}).get("dist") or {}
    sent, here = pool.get("distributed", 0), pool.get("local", 0)
    total = sent + here
    print(f"dist build: {found['dist_s']:.0f} s; sccache compiled {total} unit(s) "
          f"(nvcc's steps as sccache counts them): {sent} on the pool, {here} here "
          f"= {sent / total if total else 0:.2f} remote (goal >= 0.90); "
          f"{pool.get('dist_errors', 0)} dist error(s)")
    print(f"per worker: {pool.get('workers')}")
    print(f"sccache's other counters (why a unit stayed here): {pool.get('stats')}")
    for name, result in (("local", local), ("dist", dist)):
        print(f"{name}: verify passed {result['verify']['passed']}, "
              f"probe passed {result['probe']['passed']}")
    a, b = found["same"]["local"], found["same"]["dist"]
    equal = sum(1 for k in a if b.get(k) == a[k])
    print(f"cubins identical: {equal}/{len(a)} (local) of {len(b)} (dist); "
          f"same names: {sorted(a) == sorted(b)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, help="the work folder (default: a new temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--port", type=int, default=10700,
                        help="the scheduler's port; workers take the next two (default 10700)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="dist-real-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        report(measure(work, args.port))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
