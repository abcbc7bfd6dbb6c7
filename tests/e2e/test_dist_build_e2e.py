"""``inv build --compile --dist sccache://HOST:PORT`` end to end: the cross road's compile step
for spark through the pinned sccache on a real two-worker sccache-dist pool (issue 43).

What it exercises, through the real CLI (``inv build --spec``) on the real engine:
- a pool from ``builder/distpool/pool.py`` (scheduler and two workers, token auth, bubblewrap,
  root) bound to Docker's bridge address, the one a BuildKit step reaches (not 127.0.0.1);
- preflight's probe of the pool (builder/distpool/probe.py: the token over sccache-dist's plain
  http to a LAN address), the ``--dist`` block of dockerfiles/compile.Dockerfile.j2 (sccache on
  PATH, its client config as a BuildKit secret), the summary's ``dist:`` line read from sccache's
  stats in the step (builder/distpool/inimage_stats.py);
- every nvcc step of the CUDA unit compiled on a worker, none here, no dist error; the wheel's
  cubins byte-identical (sha256 of each, cuobjdump -xelf) to a build without ``--dist``; verify
  and probe pass;
- the pool stopped mid-compile: the build finishes locally, one warning line with the fallback
  counted, and the same cubins;
- a worker killed (SIGKILL, its session) at its first job: the same;
- the pool restarted with new tokens mid-build: sccache fails the unit (exit 254, no fallback),
  and the build stops with the pool's one line ("refuses the token", the way out), no wheel;
- a worker whose sandbox flips a byte of the code of every object it returns: sccache takes it,
  the compile step's check (builder/distpool/objcheck.py) compiles the first unit again here,
  finds it different, and the build stops in one line, no wheel.

What stands in: the fixture tree (tests/e2e/conftest.py) for vLLM, with its setup.py taking
sccache from PATH as its launcher as vLLM's does (the fixture itself takes ccache only, so the
copy here is patched; other e2e trees are untouched), and a hold that waits, before nvcc, until
the pool's scheduler stops answering, so the pool is certainly gone mid-compile without a timed
race. The unit's source is salted per run, so sccache's cache (in the compile cache mount) never
answers instead of the pool. The pool's folder (workers' toolchain cache, about 300 MB) and the
images this module tags are removed at the end.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import uuid
import zipfile
from pathlib import Path

import pytest

from e2e.conftest import FIXTURE_TREE, KERNELS, hermetic_spec, write_spec
from support.timeouts import COLD_FIXTURE_TIMEOUT_S

# The first test may set up the cold cross images (support/timeouts.py says why and how long).
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(COLD_FIXTURE_TIMEOUT_S)]

REPO = "edgevllm-test/e2e-dist-spark"
MARKER = "fake-vllm: holding before nvcc"
CUDA_RUNTIME = "13.0.96"
HOLD = '''

def hold_before_compile() -> None:
    """The dist e2e's hold: with the hold file (HOST:PORT of a pool's scheduler) in the tree,
    print the marker and wait until the scheduler stops answering (at most 10 minutes)."""
    if not Path(HOLD_FILE).exists():
        return
    import socket
    host, port = Path(HOLD_FILE).read_text().strip().rsplit(":", 1)
    print(HOLD_MARKER, flush=True)
    for _ in range(1200):
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
        except OSError:
            return
        time.sleep(0.5)
'''


def sccache_tree(dest: Path) -> Path:
    """A copy of the fixture tree whose setup.py compiles through sccache when it is on PATH
    (vLLM's setup.py prefers sccache to ccache as its launcher) and holds as above. With or
    without sccache it compiles the unit and links it as two steps, as a launcher needs (the
    fixture's one-step nvcc builds its link stub for the unit's arch, a two-step link for
    nvcc's default), so the wheels of both builds are made alike."""
    tree = dest / "fake-vllm"
    shutil.copytree(FIXTURE_TREE, tree)
    setup = tree / "setup.py"
    text = setup.read_text()
    edits = {
        '        if shutil.which("ccache"):\n'
        '            compile_through_ccache(command, out, ext.sources)\n'
        '        else:\n'
        '            subprocess.run(command, check=True)':
        '        launcher = [n for n in ("sccache",) if shutil.which(n)]\n'
        '        compile_through_ccache(command, out, ext.sources, launcher)',
        "sources: list[str]) -> None:": "sources: list[str],\n"
        "                           launcher: list[str]) -> None:",
        'subprocess.run(["ccache", command[0]': "subprocess.run([*launcher, command[0]",
        "\n\ndef hold_before_compile() -> None:": HOLD + "\n\ndef _fixture_hold() -> None:",
    }
    for old, new in edits.items():
        assert text.count(old) == 1, f"the fixture's setup.py changed: {old!r}"
        text = text.replace(old, new)
    setup.write_text(text)
    return tree


def bridge_address() -> str:
    found = subprocess.run(["docker", "network", "inspect", "bridge", "-f",
                            "{{(index .IPAM.Config 0).Gateway}}"],
                           capture_output=True, text=True)
    assert found.returncode == 0 and found.stdout.strip(), (
        f"no address of Docker's bridge network (docker network inspect bridge): {found.stderr}")
    return found.stdout.strip()


def free_ports(host: str, count: int) -> int:
    """A first port with ``count`` free ones from it on ``host``."""
    for first in range(21600, 29000, 10):
        try:
            socks = [socket.create_server((host, first + k)) for k in range(count)]
        except OSError:
            continue
        for s in socks:
            s.close()
        return first
    raise AssertionError(f"no {count} free ports on {host}")


@pytest.fixture
def dist_pool(tmp_path_factory):
    """(scheduler URL as --dist takes it, client token file, pool folder): a pool of two
    workers on Docker's bridge address for one test (the fallback test stops its own),
    stopped and its folder removed at the end."""
    from edgevllm.builder.distpool import pool, tools

    assert os.geteuid() == 0, "sccache-dist workers run as root: run this test as root"
    assert shutil.which("bwrap"), "install bubblewrap (apt-get install bubblewrap)"
    folder = tmp_path_factory.mktemp("dist-pool")
    folder.chmod(0o700)
    bridge = bridge_address()
    port = free_ports(bridge, 3)
    try:
        status = pool.up(pool.PoolPlan(workers=2, bind=bridge, port=port), tools.ensure_tools(),
                         folder)
        assert status.workers == 2, status
        yield f"sccache://{bridge}:{port}", pool.token_paths(folder)[0], folder
    finally:
        pool.down(folder)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def dist_upstream(tmp_path_factory):
    """The patched tree's upstream: v0.1.0 salted for this run (branch ``salted``)."""
    from support.gitfixtures import commit, head, make_upstream_repo

    root = tmp_path_factory.mktemp("dist-upstream")
    upstream = make_upstream_repo(root, sccache_tree(root))
    salted = (FIXTURE_TREE / KERNELS).read_text() + f"\n// dist e2e {uuid.uuid4().hex}\n"
    commit(upstream, [head(upstream)], {KERNELS: salted}, "salted", ref="refs/heads/salted")
    return upstream


@pytest.fixture(scope="module")
def images(engine):
    from support.images import cross_cuda_image, cross_runtime_image
    from support.platforms import native_arch, require_runnable

    require_runnable("arm64")
    assert native_arch() == "amd64", "--dist needs the cross road: an x86_64 host"
    before = set(engine.images(REPO))
    yield cross_cuda_image(engine), cross_runtime_image(engine)
    for tag in set(engine.images(REPO)) - before:
        subprocess.run(["docker", "image", "rm", tag], capture_output=True)


def spec_file(path: Path, images, upstream, ref: str) -> Path:
    build, runtime = images
    spec = hermetic_spec(
        "spark", build, upstream, mode="compile", platform="linux/arm64",
        images={"build": build, "runtime": runtime}, bytecode_image=build,
        python="python3.13", mods=[], image_repo=REPO,
        packages={"flashinfer-python": None, "nvidia-cutlass-dsl": None,
                  "nvidia-cuda-runtime": CUDA_RUNTIME})
    spec["vllm"]["ref"] = ref
    return write_spec(path, **spec)


def build_argv(spec: Path, out: Path, pool: tuple | None) -> list[str]:
    argv = [sys.executable, "-c", "from edgevllm.cli import main; main()", "build",
            "--spec", str(spec), "--out", str(out), "--compile-cache-id", "edgevllm-test-dist"]
    if pool:
        argv += ["--dist", pool[0], "--dist-token-file", str(pool[1])]
    return argv


def run_build(argv: list[str], log: Path) -> tuple[int, str]:
    with open(log, "w") as sink:   # a file, not a pipe: nothing blocks on a full pipe
        code = subprocess.run(argv, stdout=sink, stderr=subprocess.STDOUT, timeout=600,
                              env={**os.environ, "NO_COLOR": "1"}).returncode
    return code, log.read_text(errors="replace")


def wheel_cubins(out: Path, work: Path) -> dict[str, str]:
    """sha256 of every cubin of every .so in the one wheel under ``out``."""
    from support.cross_units import cubins

    wheels = sorted((out / "spark" / "wheels").rglob("*.whl"))
    assert len(wheels) == 1, wheels
    with zipfile.ZipFile(wheels[0]) as zf:
        zf.extractall(work)
    found = {f"{lib.name}:{k}": v for lib in sorted(work.rglob("*.so"))
             for k, v in cubins(lib).items()}
    assert found, f"no cubin in {wheels[0].name}"
    return found


def logs(out: Path) -> str:
    return "".join(f.read_text(errors="replace") for f in (out / "spark" / "logs").glob("*.log"))


def dist_line(output: str) -> str:
    lines = [line for line in output.splitlines() if "dist: " in line and " here " in line]
    assert len(lines) == 1, output[-3000:]
    return lines[0]


def figure(line: str, before: str) -> int:
    found = re.search(rf"(\d+) {re.escape(before)}", line)
    assert found, f"no figure before {before!r} in {line!r}"
    return int(found[1])


@pytest.fixture(scope="module")
def local_cubins(dist_upstream, images, tmp_path_factory):
    """The cubins of the salted tree built without --dist (the local cross road)."""
    work = tmp_path_factory.mktemp("dist-local")
    spec = spec_file(work / "spec.yaml", images, dist_upstream, "salted")
    code, output = run_build(build_argv(spec, work / "out", None), work / "build.log")
    assert code == 0, output[-3000:]
    assert "dist: " not in output
    return wheel_cubins(work / "out", work / "x")


def test_the_compile_runs_on_the_pool_with_the_local_cubins(dist_pool, dist_upstream, images,
                                                            local_cubins, tmp_path):
    spec = spec_file(tmp_path / "spec.yaml", images, dist_upstream, "salted")
    code, output = run_build(build_argv(spec, tmp_path / "dist", dist_pool),
                             tmp_path / "dist.log")
    assert code == 0, output[-3000:]
    assert "==> dist: http://" in output and "2 worker(s)" in output   # preflight's probe
    line = dist_line(output)
    # One CUDA unit; how many of nvcc's steps sccache counts, and whether under load it keeps
    # one here, is its choice (docs/dist.md): some ran on a worker, none failed there.
    assert figure(line, "unit(s) compiled on the pool") >= 1, line
    assert "(0 dist error(s)" in line and "per worker: " in line
    assert "warning: dist" not in output
    assert "edgevllm-dist-check same " in logs(tmp_path / "dist")   # the first unit, compared
    assert wheel_cubins(tmp_path / "dist", tmp_path / "d") == local_cubins
    assert "_C: plan: 12.1a; binary: sm_121a" in output   # verify ran, and passed (exit 0)
    token = dist_pool[1].read_text().strip()
    assert token not in output and token not in "".join(
        p.read_text(errors="replace") for p in (tmp_path / "dist").rglob("*") if p.is_file()
        and p.suffix in (".json", ".log", ".txt"))


def test_the_pool_gone_mid_compile_leaves_a_local_compile_and_a_warning(
        dist_pool, dist_upstream, images, local_cubins, tmp_path):
    from edgevllm.builder.distpool import pool
    from support.gitfixtures import commit, head

    host_port = dist_pool[0].split("://", 1)[1]
    commit(dist_upstream, [head(dist_upstream, "salted")],
           {"edgevllm-test-hold": host_port}, "hold until the pool is gone", ref="refs/heads/hold")
    spec = spec_file(tmp_path / "spec.yaml", images, dist_upstream, "hold")
    out = tmp_path / "out"
    with open(tmp_path / "build.log", "w") as sink:
        proc = subprocess.Popen(build_argv(spec, out, dist_pool), stdout=sink,
                                stderr=subprocess.STDOUT, env={**os.environ, "NO_COLOR": "1"})
        try:
            wait_for_hold(proc, out)
            assert pool.down(dist_pool[2]) == 3
            code = proc.wait(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
    output = (tmp_path / "build.log").read_text(errors="replace")
    assert code == 0, output[-3000:]
    line = dist_line(output)
    assert line.startswith("warning: dist: 0 unit(s) compiled on the pool"), line
    assert figure(line, "here") >= 1 and figure(line, "dist error(s)") >= 1, line
    assert "_C: plan: 12.1a; binary: sm_121a" in output
    assert wheel_cubins(out, tmp_path / "x") == local_cubins


# ----- failures inside a build: a gate on Docker's bridge holds the compile before nvcc (the
# hold above waits until the gate stops answering); the test acts, then closes the gate.

EVIL_BWRAP = '''#!/usr/bin/env python3
"""A worker gone bad: sccache's sandbox runs through this, and every object a job writes (the
host compile's, which carries the fatbin, or a cubin) has one byte of its code flipped before
the worker sends it back."""
import os, struct, subprocess, sys, time
start = time.time()
code = subprocess.call([REAL, *sys.argv[1:]])
args = sys.argv[1:]
roots = [args[i + 1] for i, a in enumerate(args[:-2]) if a == "--bind" and args[i + 2] == "/"]
for root in roots:
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            try:
                if os.path.islink(path) or os.stat(path).st_mtime < start - 1:
                    continue
                data = bytearray(open(path, "rb").read())
            except OSError:
                continue
            if data[:4] != b"\\x7fELF" or data[4] != 2:
                continue
            shoff, = struct.unpack_from("<Q", data, 40)
            shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 58)
            sec = lambda k: struct.unpack_from("<IIQQQQ", data, shoff + k * shentsize)
            names_at = sec(shstrndx)[4]
            for k in range(shnum):
                name_at, _, _, _, offset, size = sec(k)
                label = data[names_at + name_at:data.index(0, names_at + name_at)]
                if label.startswith(b".text") and size:
                    data[offset] ^= 0x01
                    open(path, "wb").write(bytes(data))
                    open(NOTE, "a").write(path + "\\n")
                    break
sys.exit(code)
'''


def wait_for_hold(proc: subprocess.Popen, out: Path) -> None:
    """Until the build's log shows its compile held before nvcc (at most 600 s)."""
    deadline = time.monotonic() + 600
    while proc.poll() is None and time.monotonic() < deadline and not any(
            MARKER in f.read_text(errors="replace")
            for f in (out / "spark" / "logs").glob("*.log")):
        time.sleep(0.5)
    assert proc.poll() is None, "the build ended before its compile held"


class Gate:
    """A listener on Docker's bridge: the build's hold waits while it answers."""

    def __init__(self, host: str) -> None:
        self.sock = socket.create_server((host, free_ports(host, 1)))
        self.address = "%s:%d" % self.sock.getsockname()[:2]

    def close(self) -> None:
        self.sock.close()


def held_build(dist_upstream, images, pool, tmp_path: Path, act) -> tuple[int, str, Path]:
    """The salted tree built with ``--dist`` on ``pool``, held before nvcc while ``act()``
    runs; (exit status, output, out folder)."""
    from support.gitfixtures import commit, head

    gate = Gate(pool[0].split("://", 1)[1].rsplit(":", 1)[0])
    ref = f"refs/heads/gate-{uuid.uuid4().hex[:8]}"
    commit(dist_upstream, [head(dist_upstream, "salted")], {"edgevllm-test-hold": gate.address},
           "hold until the gate closes", ref=ref)
    spec = spec_file(tmp_path / "spec.yaml", images, dist_upstream, ref.rsplit("/", 1)[1])
    out = tmp_path / "out"
    try:
        with open(tmp_path / "build.log", "w") as sink:
            proc = subprocess.Popen(build_argv(spec, out, pool), stdout=sink,
                                    stderr=subprocess.STDOUT, env={**os.environ, "NO_COLOR": "1"})
            try:
                wait_for_hold(proc, out)
                act()
                gate.close()
                code = proc.wait(timeout=600)
            finally:
                if proc.poll() is None:
                    proc.kill()
    finally:
        gate.close()
    return code, (tmp_path / "build.log").read_text(errors="replace"), out


def worker_pids(folder: Path) -> list[int]:
    import json
    state = json.loads((folder / "pool.json").read_text())
    return [p["pid"] for p in state["processes"] if p["what"].startswith("sccache-dist worker")]


def parent_of(pid: str) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return int(handle.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def kill_at_first_job(workers: list[int], killed: list[int], stop) -> None:
    """SIGKILL a worker (its whole session: the job's sandbox too) once it has started a job."""
    while not stop.is_set():
        for pid in os.listdir("/proc"):
            if pid.isdigit() and parent_of(pid) in workers:
                worker = parent_of(pid)
                os.killpg(worker, 9)
                killed.append(worker)
                return
        time.sleep(0.005)


def assert_finished_here_or_stopped(code: int, output: str, out: Path, local_cubins,
                                    tmp_path: Path) -> str:
    """Either the build finished with the local road's cubins and a warning counting the
    fallback, or it stopped in one line; never a wrong wheel."""
    if code != 0:
        errors = [line for line in output.splitlines() if line.startswith("error")]
        assert len(errors) == 1, output[-3000:]
        assert not list((out / "spark" / "wheels").rglob("*.whl")), output[-3000:]
        return errors[0]
    line = dist_line(output)
    assert line.startswith("warning: dist: "), line
    assert figure(line, "dist error(s)") >= 1, line
    assert wheel_cubins(out, tmp_path / "x") == local_cubins
    return line


def test_a_worker_killed_mid_job_leaves_a_local_compile(dist_pool, dist_upstream, images,
                                                        local_cubins, tmp_path):
    import threading

    killed: list[int] = []
    stop = threading.Event()
    watcher = threading.Thread(target=kill_at_first_job,
                               args=(worker_pids(dist_pool[2]), killed, stop), daemon=True)
    try:
        code, output, out = held_build(dist_upstream, images, dist_pool, tmp_path,
                                       watcher.start)
    finally:
        stop.set()
    assert killed, "no worker started a job"
    line = assert_finished_here_or_stopped(code, output, out, local_cubins, tmp_path)
    assert code == 0, line   # sccache compiles the unit here


def test_a_token_refused_mid_build_leaves_a_local_compile(dist_pool, dist_upstream, images,
                                                          local_cubins, tmp_path):
    from edgevllm.builder.distpool import pool, tools

    url, _, folder = dist_pool
    host, port = url.split("://", 1)[1].rsplit(":", 1)

    def new_tokens() -> None:
        pool.down(folder)
        for path in pool.token_paths(folder):
            path.unlink()
        pool.up(pool.PoolPlan(workers=2, bind=host, port=int(port)), tools.ensure_tools(),
                folder)

    code, output, out = held_build(dist_upstream, images, dist_pool, tmp_path, new_tokens)
    # sccache 0.16 fails the unit (exit 254) on a refused token, where it compiles here for a
    # scheduler gone: the build stops with the pool's line and its way out (distpool/guard.py)
    line = assert_finished_here_or_stopped(code, output, out, local_cubins, tmp_path)
    assert code == 3 and "refuses the token" in line and "without --dist" in line, line


@pytest.fixture
def bad_pool(tmp_path_factory, monkeypatch):
    """A pool of one worker whose sandbox flips a byte of the code of every object a job
    writes."""
    from edgevllm.builder.distpool import pool, tools
    from edgevllm.common.sandbox import bwrap_path

    folder = tmp_path_factory.mktemp("bad-pool")
    folder.chmod(0o700)
    evil = folder / "bwrap"
    evil.write_text(EVIL_BWRAP.replace("REAL", repr(bwrap_path()))
                    .replace("NOTE", repr(str(folder / "flipped.txt"))))
    evil.chmod(0o755)
    monkeypatch.setattr(pool, "bwrap_path", lambda: str(evil))
    bridge = bridge_address()
    port = free_ports(bridge, 2)
    try:
        pool.up(pool.PoolPlan(workers=1, bind=bridge, port=port), tools.ensure_tools(), folder)
        yield f"sccache://{bridge}:{port}", pool.token_paths(folder)[0], folder
    finally:
        pool.down(folder)
        shutil.rmtree(folder, ignore_errors=True)


def test_a_worker_returning_a_corrupt_object_never_makes_a_wrong_wheel(
        bad_pool, dist_upstream, images, local_cubins, tmp_path):
    code, output, out = held_build(dist_upstream, images, bad_pool, tmp_path, lambda: None)
    flipped = bad_pool[2] / "flipped.txt"
    assert flipped.exists(), ("the bad worker corrupted no object", output[-3000:])
    # sccache takes the worker's object as it is (the unit compiled); the check
    # (distpool/objcheck.py) compiles the build's first CUDA unit again here, finds its code
    # different, and the build stops: no wheel
    assert "edgevllm-dist-check mismatch " in logs(out), output[-3000:]
    line = assert_finished_here_or_stopped(code, output, out, local_cubins, tmp_path)
    assert code == 3 and "differs from this machine's compile" in line, line
