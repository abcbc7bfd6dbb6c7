#!/usr/bin/env python3
"""A build driven over ``--engine ssh://…`` against the same build on the engine's own machine,
in one run.

One node container runs sshd and its own Docker engine (tests/support/sshd_node.py, as in
tests/e2e/test_remote_build_e2e.py). The fixture build (fake-vllm, nvcc-compiled, the host's
platform, arch verify and probe level 1) runs on that one engine three ways, in turn, run after
run:
1. local:     through the engine's socket, as the device itself reaches it (the baseline);
2. ssh:       ``ssh://root@NODE``: one ssh connection for the whole build (sshforward.py);
3. ssh/call:  ``ssh://root@NODE`` with docker's own ssh for every docker call (before that).
Every build is a new one as far as the engine goes: its own output folder, its own empty compiler
cache, --rerun-steps (every build step runs again), its image removed after. Prints each wall
time and each run's ratio to the baseline run next to it, then the medians.
Target: ssh within 1.1x of local.

    python bench/remote_engine.py [--runs 3] [--no-per-call]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-per-call", action="store_true",
                        help="leave out the ssh-per-call build (before the shared connection)")
    args = parser.parse_args()

    from e2e.conftest import FIXTURE_TREE, hermetic_spec
    from edgevllm.containers.docker import DockerEngine
    from edgevllm.serve.distribute import copy_image
    from support.gitfixtures import make_upstream_repo
    from support.images import cuda_image
    from support.platforms import native_arch, native_platform
    from support.sshd_node import SshNodes

    engine = DockerEngine()
    base = cuda_image(engine, native_arch())
    with tempfile.TemporaryDirectory(prefix="edgevllm-bench-") as tmp_name:
        tmp = Path(tmp_name)
        with SshNodes(engine, "edgevllm-bench-remote", 1, tmp / "node",
                      socket_dir=tmp / "node" / "sockets", bridge=True) as nodes:
            os.environ["PATH"] = nodes.env()["PATH"]  # the node's key, as ~/.ssh/config would
            local = nodes.socket_engine(0)
            [copied] = copy_image(base, engine, [local])
            assert copied.status != "failed", copied
            spec = hermetic_spec("spark", base, make_upstream_repo(tmp, FIXTURE_TREE),
                                 platform=native_platform(), mods=[], rerun_steps=True,
                                 image_repo="edgevllm-bench/remote")
            ways = {"local": local, "ssh": DockerEngine(host=nodes.urls()[0])}
            if not args.no_per_call:
                ways["ssh/call"] = per_call_engine(nodes.urls()[0])
            rows = [{name: timed_build(way, spec, tmp / f"out-{n}-{name}")
                     for name, way in ways.items()} for n in range(args.runs)]
    return report(rows, list(ways))


def per_call_engine(url: str):
    """The engine as it was reached before the shared connection: docker's own ssh for every
    call (its dial is its own URL, so ``one_connection`` leaves it as it is)."""
    from edgevllm.containers.docker import DockerEngine

    engine = DockerEngine(host=url)
    engine.dial = url
    return engine


def timed_build(engine, spec: dict, out: Path) -> float:
    from edgevllm.builder.pipeline import build
    from edgevllm.specs.buildspec import spec_from_dict

    spec = {**spec, "compile_cache_id": f"ccache-bench-{uuid.uuid4().hex[:12]}"}  # empty
    started = time.perf_counter()
    result = build(spec_from_dict(spec), out, engine)
    seconds = time.perf_counter() - started
    engine.remove_image(result.image, force=True)
    return seconds


def report(rows: list[dict[str, float]], names: list[str]) -> int:
    from support.platforms import native_platform

    print(f"\nfixture build ({native_platform()}, compile + verify + probe level 1), one engine")
    print(f"{'run':>4} " + " ".join(f"{name + ' s':>10}" for name in names) + " " +
          " ".join(f"{name + '/local':>15}" for name in names[1:]))
    for n, row in enumerate(rows, 1):
        print(f"{n:>4} " + " ".join(f"{row[name]:10.1f}" for name in names) + " " +
              " ".join(f"{row[name] / row['local']:15.3f}" for name in names[1:]))
    medians = {name: statistics.median(row[name] / row["local"] for row in rows)
               for name in names[1:]}
    print("median ratio to local: " + ", ".join(f"{name} {value:.3f}x"
                                                for name, value in medians.items()))
    return 0 if medians["ssh"] <= 1.1 else 1


if __name__ == "__main__":
    sys.exit(main())
