"""``inv dist-pool up|down|status``: an sccache-dist scheduler and N workers on this host, the one
owner of starting and stopping them.

Each worker is pinned to its share of this host's cores (``sched_setaffinity`` before it starts),
and sccache-dist reads its capacity from the cores it may use, so two workers on 8 cores offer 4
jobs each. Workers run as root: sccache's overlay builder mounts an overlay per job and runs the
compiler in its bubblewrap sandbox. The processes run detached (their own session, logs in the
pool folder); ``pool.json`` records each one's pid and config, and ``down`` signals a pid only
while its command line still names that config (a pid the system gave to another program since
is left alone). The tokens stay across ``down``/``up``, so builders keep theirs.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from edgevllm.builder.distpool.config import (
    DEFAULT_BIND,
    DEFAULT_PORT,
    new_token,
    read_token,
    scheduler_toml,
    server_toml,
    url_host,
    write_private,
)
from edgevllm.builder.distpool.probe import PoolStatus, scheduler_status
from edgevllm.builder.distpool.tools import Tools
from edgevllm.common.dataload import JSON_MAX_BYTES, load_json, load_text
from edgevllm.common.errors import ConfigError, DistPoolError
from edgevllm.common.fsutil import atomic_write_json
from edgevllm.common.paths import cache_dir
from edgevllm.common.poll import poll
from edgevllm.common.sandbox import bwrap_path
from edgevllm.common.secrets import clean_environ

STATE = "pool.json"
START_S = 20.0  # the scheduler answering
REGISTER_S = 60.0  # every worker registered
STOP_S = 10.0  # SIGTERM, then SIGKILL
LOG_TAIL_BYTES = 64 << 10  # of a process's log, read for its last line
TOOLCHAIN_CACHE = 4 << 30  # bytes of packaged toolchains a worker keeps (sccache's default: 10 GiB)
_ENV = re.compile(r"\A(PATH|HOME|LANG|LC_ALL|TMPDIR)\Z")


@dataclass(frozen=True)
class PoolPlan:
    workers: int = 2
    bind: str = DEFAULT_BIND
    port: int = DEFAULT_PORT


def pool_dir(create: bool = True) -> Path:
    return cache_dir("dist-pool", create=create)


def token_paths(folder: Path) -> tuple[Path, Path]:
    """(client.token, server.token): a builder's and a worker's."""
    return folder / "client.token", folder / "server.token"


def _token(path: Path) -> str:
    if not path.exists():
        write_private(path, new_token() + "\n")
    return read_token(path, "the pool's token")


def core_shares(workers: int, cores: list[int]) -> list[list[int]]:
    if workers < 1 or workers > len(cores):
        raise ConfigError(f"--workers {workers}: between 1 and this host's {len(cores)} "
                          f"core(s) (a worker takes at least one)")
    return [cores[k::workers] for k in range(workers)]


def _preflight() -> str:
    if os.geteuid() != 0:
        raise DistPoolError("sccache-dist workers run as root (sccache's overlay builder mounts "
                            "an overlay per job, then bubblewrap): run inv dist-pool up as root")
    bwrap = bwrap_path()
    if bwrap is None:
        raise DistPoolError("sccache-dist workers sandbox each job with bubblewrap, which is not "
                            "on PATH: install it (apt-get install bubblewrap)")
    return bwrap


def _start(argv: list[str], log: Path, cores: list[int] | None = None) -> subprocess.Popen:
    env = {**clean_environ(os.environ, _ENV), "SCCACHE_NO_DAEMON": "1", "SCCACHE_LOG": "info"}
    pin: Callable[[], None] | None = (lambda: os.sched_setaffinity(0, cores)) if cores else None
    with open(log, "ab") as out:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                preexec_fn=pin)


def _log_tail(log: Path) -> str:
    with open(log, "rb") as handle:  # the end only: a worker's log grows for as long as it runs
        handle.seek(max(handle.seek(0, os.SEEK_END) - LOG_TAIL_BYTES, 0))
        text = handle.read().decode(errors="replace")
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1][-300:] if lines else "no output"


def _died(proc: subprocess.Popen, what: str, log: Path) -> None:
    if proc.poll() is not None:
        raise DistPoolError(f"{what} stopped at once (exit {proc.returncode}): {_log_tail(log)}; "
                            f"its log is {log}")


def check_plan(plan: PoolPlan) -> tuple[str, list[list[int]]]:
    """What ``up`` needs of this host, before anything is downloaded or written: bubblewrap,
    root, and a core for each worker."""
    shares = core_shares(plan.workers, sorted(os.sched_getaffinity(0)))
    return _preflight(), shares


def up(plan: PoolPlan, tools: Tools, folder: Path | None = None) -> PoolStatus:
    """Start the scheduler and ``plan.workers`` workers; their status once all registered."""
    bwrap, shares = check_plan(plan)
    where = folder or pool_dir()
    if running(where):
        raise DistPoolError(f"a pool is already up here ({where / STATE}): inv dist-pool down "
                            f"first, or inv dist-pool status")
    client, server = (_token(p) for p in token_paths(where))
    url = f"http://{url_host(plan.bind)}:{plan.port}"
    started: list[dict] = []
    try:
        config = write_private(where / "scheduler.toml",
                               scheduler_toml(plan.bind, plan.port, client, server))
        _launch(started, [str(tools.sccache_dist), "scheduler", "--config", str(config)],
                where / "scheduler.log", "the sccache-dist scheduler", None)
        _wait_scheduler(started[0], url)
        for k, cores in enumerate(shares, start=1):
            work = where / f"worker-{k}"
            work.mkdir(mode=0o700, exist_ok=True)
            config = write_private(where / f"worker-{k}.toml", server_toml(
                url, plan.bind, plan.port + k, work, bwrap, server, TOOLCHAIN_CACHE))
            _launch(started, [str(tools.sccache_dist), "server", "--config", str(config)],
                    where / f"worker-{k}.log", f"sccache-dist worker {k}", cores)
        status = _wait_workers(started, url, plan.workers)
    except BaseException:
        _stop_all(started)
        raise
    atomic_write_json(where / STATE, {"scheduler": url, "bind": plan.bind, "processes": [
        {k: v for k, v in entry.items() if k != "proc"} for entry in started]})
    return status


def _launch(started: list[dict], argv: list[str], log: Path, what: str,
            cores: list[int] | None) -> None:
    proc = _start(argv, log, cores)
    started.append({"proc": proc, "pid": proc.pid, "config": argv[-1], "what": what,
                    "log": str(log), "cores": cores})


def _wait_scheduler(entry: dict, url: str) -> PoolStatus:
    def answers() -> PoolStatus | None:
        _died(entry["proc"], entry["what"], Path(entry["log"]))
        try:
            return scheduler_status(url, 1.0)
        except DistPoolError:
            return None
    status = poll(answers, START_S, 0.2)
    if status is None:
        raise DistPoolError(f"the sccache-dist scheduler did not answer at {url} within "
                            f"{START_S:.0f} s; its log is {entry['log']}")
    return status


def _wait_workers(started: list[dict], url: str, workers: int) -> PoolStatus:
    def registered() -> PoolStatus | None:
        for entry in started:
            _died(entry["proc"], entry["what"], Path(entry["log"]))
        status = scheduler_status(url, 2.0)
        return status if status.workers >= workers else None
    status = poll(registered, REGISTER_S, 0.5)
    if status is None:
        raise DistPoolError(f"not every worker registered with {url} within {REGISTER_S:.0f} s; "
                            f"their logs are in {Path(started[0]['log']).parent}")
    return status


def _ours(pid: int, config: str) -> bool:
    """``pid`` is still the sccache-dist started with ``config`` (not a zombie, not reused)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = handle.read().split(b"\0")
    except OSError:
        return False
    return config.encode() in argv and any(a.endswith(b"sccache-dist") for a in argv)


def _gone(pid: int, config: str) -> bool | None:
    """True once ``pid`` has exited with all its threads (reaped first when it is this process's
    child), or the pid is another program's. Not while only its main thread has ended: its
    command line then reads empty while the other threads still hold its ports."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        threads = len(os.listdir(f"/proc/{pid}/task"))
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            named = bool(handle.read())
    except OSError:
        return True
    if named:
        return None if _ours(pid, config) else True
    return True if threads <= 1 and _zombie(pid) else None


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[-1].split()[0] == b"Z"
    except (OSError, IndexError):
        return True


def _stop(pid: int, config: str) -> bool:
    if not _ours(pid, config):
        return False
    os.kill(pid, signal.SIGTERM)
    if poll(lambda: _gone(pid, config), STOP_S, 0.1):
        return True
    os.kill(pid, signal.SIGKILL)
    poll(lambda: _gone(pid, config), STOP_S, 0.1)
    return True


def _stop_all(entries: list[dict]) -> int:
    return sum(_stop(e["pid"], e["config"]) for e in reversed(entries))


def _state(folder: Path) -> dict | None:
    path = folder / STATE
    if not path.is_file():
        return None
    found = load_json(load_text(path, DistPoolError, JSON_MAX_BYTES), str(path), DistPoolError)
    return found if isinstance(found, dict) else None


def running(folder: Path) -> list[dict]:
    """The recorded processes still alive."""
    state = _state(folder) or {}
    return [e for e in state.get("processes", []) if isinstance(e, dict)
            and isinstance(e.get("pid"), int) and _ours(e["pid"], str(e.get("config")))]


def down(folder: Path | None = None) -> int:
    """Stop the pool's processes; how many were stopped. The tokens stay."""
    where = folder or pool_dir(create=False)
    stopped = _stop_all(running(where))
    (where / STATE).unlink(missing_ok=True)
    return stopped


def status(folder: Path | None = None) -> dict:
    """The pool as recorded here and as its scheduler sees it."""
    where = folder or pool_dir(create=False)
    state = _state(where)
    if state is None:
        raise DistPoolError(f"no pool is up here ({where / STATE} is absent): inv dist-pool up")
    alive = running(where)
    seen = scheduler_status(str(state["scheduler"])) if alive else None
    return {"scheduler": state["scheduler"], "processes": len(state.get("processes", [])),
            "alive": len(alive), "workers": seen.workers if seen else 0,
            "cpus": seen.cpus if seen else 0, "in_progress": seen.in_progress if seen else 0,
            "client_token": str(token_paths(where)[0])}
