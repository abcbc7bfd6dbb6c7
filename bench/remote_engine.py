#!/usr/bin/env python3
"""A build driven over ``--engine ssh://…`` against the same build on the engine's own machine,
in one run.

One node container runs sshd and its own Docker engine (tests/support/sshd_node.py, as in
tests/e2e/test_remote_build_e2e.py), reached three ways:
1. local:     through the engine's socket, as the device itself reaches it (the baseline);
2. ssh:       ``ssh://root@NODE``: one ssh connection for the whole build (sshforward.py);
3. ssh/call:  ``ssh://root@NODE`` with docker's own ssh for every docker call (before that).

- One docker call (``docker image inspect``), the three ways in turn, ``--calls`` rounds: what
  each call costs (seconds of machine noise weigh little on it).
- The fixture build (fake-vllm, nvcc-compiled, the host's platform, arch verify and probe level
  1), the three ways in turn, ``--runs`` rounds after one uncounted local build. Every build is
  a new one as far as the engine goes: its own output folder, its own empty compiler cache,
  --rerun-steps (every build step runs again), its image removed after. Counts the ssh
  processes each build and that removal started (an ``ssh`` on PATH notes each start).
Prints each figure, each run's ratio to the baseline run next to it, then the medians.
Target: ssh within 1.1x of local.

    python bench/remote_engine.py [--runs 3] [--calls 20] [--no-per-call]
"""

from __future__ import annotations

import argparse
import os
import stat
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]


def bounded(low: int, high: int):
    """An argparse type: a whole number from ``low`` to ``high``, else argparse's one line."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is outside {low}..{high}")
        return value
    return parse


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=bounded(1, 20), default=3)
    parser.add_argument("--calls", type=bounded(1, 1000), default=20)
    parser.add_argument("--no-per-call", action="store_true",
                        help="leave out ssh per call (how an ssh:// engine was reached before)")
    args = parser.parse_args()

    from e2e.conftest import FIXTURE_TREE, hermetic_spec
    from edgevllm.containers.docker import DockerEngine
    from edgevllm.containers.sshforward import one_connection
    from edgevllm.serve.cache.distribute import copy_image
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
            starts = counting_ssh(tmp, nodes.env()["PATH"])  # the node's key, as ~/.ssh/config
            local = nodes.socket_engine(0)
            [copied] = copy_image(base, engine, [local])
            assert copied.status != "failed", copied
            ways = {"local": local, "ssh": DockerEngine(host=nodes.urls()[0])}
            if not args.no_per_call:
                ways["ssh/call"] = per_call_engine(nodes.urls()[0])
            with one_connection(ways["ssh"]):
                calls = [{name: timed_call(way, base) for name, way in ways.items()}
                         for _ in range(args.calls)]
            spec = hermetic_spec("spark", base, make_upstream_repo(tmp, FIXTURE_TREE),
                                 platform=native_platform(), mods=[], rerun_steps=True,
                                 image_repo="edgevllm-bench/remote")
            timed_build(local, spec, tmp / "out-warm-up", starts)  # the engine's first build
            builds = [{name: timed_build(way, spec, tmp / f"out-{n}-{index}", starts)
                       for index, (name, way) in enumerate(ways.items())}
                      for n in range(args.runs)]
    report_calls(calls, list(ways))
    return report_builds(builds, list(ways), native_platform())


def counting_ssh(tmp: Path, path: str) -> Path:
    """PATH's ``ssh`` notes each start in a file (then runs the node's ssh); returns the file."""
    log = tmp / "ssh-starts.log"
    wrapper = tmp / "bin" / "ssh"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\necho x >>{log}\nPATH="{path}" exec ssh "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    os.environ["PATH"] = f"{wrapper.parent}:{path}"
    return log


def per_call_engine(url: str):
    """The engine as it was reached before the shared connection: docker's own ssh for every
    call (its dial is its own URL, so ``one_connection`` leaves it as it is)."""
    from edgevllm.containers.docker import DockerEngine

    engine = DockerEngine(host=url)
    engine.dial = url
    return engine


def timed_call(engine, image: str) -> float:
    """One ``docker image inspect``."""
    started = time.perf_counter()
    assert engine.image_exists(image)
    return time.perf_counter() - started


def timed_build(engine, spec: dict, out: Path, starts: Path) -> dict[str, float]:
    from edgevllm.builder.pipeline import build
    from edgevllm.specs.buildspec import spec_from_dict

    spec = {**spec, "compile_cache_id": f"ccache-bench-{uuid.uuid4().hex[:12]}"}  # empty
    before = len(starts.read_text().splitlines()) if starts.is_file() else 0
    started = time.perf_counter()
    result = build(spec_from_dict(spec), out, engine)
    seconds = time.perf_counter() - started
    engine.remove_image(result.image, force=True)
    return {"s": seconds, "ssh": len(starts.read_text().splitlines()) - before}


def report_calls(calls: list[dict[str, float]], names: list[str]) -> None:
    print(f"\none docker call (image inspect), {len(calls)} rounds: median ms, ratio to local")
    local = statistics.median(row["local"] for row in calls)
    for name in names:
        median = statistics.median(row[name] for row in calls)
        print(f"  {name:10} {median * 1000:8.1f} ms {median / local:8.2f}x")


def report_builds(rows: list[dict[str, dict]], names: list[str], platform: str) -> int:
    print(f"\nfixture build ({platform}, compile + verify + probe level 1), one engine, "
          f"{len(rows)} rounds after one uncounted local build")
    print(f"{'run':>4} " + " ".join(f"{name + ' s':>11}" for name in names) + " " +
          " ".join(f"{name + '/local':>15}" for name in names[1:]))
    for n, row in enumerate(rows, 1):
        print(f"{n:>4} " + " ".join(f"{row[name]['s']:11.1f}" for name in names) + " " +
              " ".join(f"{row[name]['s'] / row['local']['s']:15.3f}" for name in names[1:]))
    medians = {name: statistics.median(row[name]["s"] / row["local"]["s"] for row in rows)
               for name in names[1:]}
    print("median ratio to local: " + ", ".join(f"{name} {value:.3f}x"
                                                for name, value in medians.items()))
    print("ssh processes started per build, its image's removal after it included: " + ", ".join(
        f"{name} {statistics.median(row[name]['ssh'] for row in rows):.0f}" for name in names))
    return 0 if medians["ssh"] <= 1.1 else 1


if __name__ == "__main__":
    sys.exit(main())
