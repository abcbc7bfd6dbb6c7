"""A builder's check of a pool before it sends work there: the scheduler answers, it takes the
token, and it has workers. Each failure is one DistPoolError line saying what to do.

The scheduler's status needs no token; the token is tried on the job-allocation endpoint with a
body no scheduler accepts: a refused token is 401 before the body is read, an accepted one 400,
so no job is made and no source sent. Connections go to the scheduler the user named, never
redirected, without the environment's proxies (a pool is on the LAN).
"""

from __future__ import annotations

from dataclasses import dataclass

import requests

from edgevllm.common.errors import DistPoolError
from edgevllm.common.http import bearer, credential_session
from edgevllm.common.schema import json_object

STATUS_PATH = "/api/v1/scheduler/status"
ALLOC_PATH = "/api/v1/scheduler/alloc_job"
TIMEOUT_S = 5.0
BODY_LIMIT = 1 << 16


@dataclass(frozen=True)
class PoolStatus:
    scheduler: str
    workers: int
    cpus: int
    in_progress: int

    def describe(self) -> str:
        return (f"{self.scheduler}: {self.workers} worker(s), {self.cpus} core(s), "
                f"{self.in_progress} job(s) running")


def _session(url: str) -> requests.Session:
    """A session to the scheduler the user named. sccache-dist speaks plain http (its clients
    send the token so too), so the token goes over http to that address alone, as sccache's own
    client's would; no proxy of the environment, never redirected."""
    session = credential_session(url, clear_text=True)
    session.trust_env = False
    return session


def _unreachable(url: str, exc: Exception) -> DistPoolError:
    why = type(exc).__name__
    return DistPoolError(f"the sccache-dist scheduler at {url} cannot be reached ({why}); start "
                         f"it (inv dist-pool up), open its port, or build without --dist")


def scheduler_status(url: str, timeout: float = TIMEOUT_S) -> PoolStatus:
    try:
        with _session(url) as session:
            answer = session.get(url + STATUS_PATH, timeout=timeout, allow_redirects=False,
                                 headers={"Accept": "application/json"})
            body = answer.content[:BODY_LIMIT]
    except requests.RequestException as exc:
        raise _unreachable(url, exc) from None
    what = f"the answer of {url}{STATUS_PATH}"
    if answer.status_code != 200:
        raise DistPoolError(f"{what} is HTTP {answer.status_code}: is it an sccache-dist "
                            f"scheduler?")
    found = json_object(body, what, DistPoolError)
    numbers = [found.get(k) for k in ("num_servers", "num_cpus", "in_progress")]
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in numbers):
        raise DistPoolError(f"{what} has no worker counts: is it an sccache-dist scheduler?")
    return PoolStatus(url, *numbers)  # type: ignore[arg-type]


def check_token(url: str, token: str, timeout: float = TIMEOUT_S) -> None:
    try:
        with _session(url) as session:
            answer = session.post(url + ALLOC_PATH, data=b"", timeout=timeout,
                                  allow_redirects=False, headers={
                                      **bearer(token), "Content-Type": "application/octet-stream"})
    except requests.RequestException as exc:
        raise _unreachable(url, exc) from None
    if answer.status_code == 401:
        raise DistPoolError(f"the sccache-dist scheduler at {url} refuses the token: give the "
                            f"pool's client.token (inv dist-pool status says where it is)")
    if answer.status_code != 400:
        raise DistPoolError(f"the sccache-dist scheduler at {url} answers a job request with "
                            f"HTTP {answer.status_code}: is it sccache-dist 0.10 or later?")


def check_pool(url: str, token: str, timeout: float = TIMEOUT_S) -> PoolStatus:
    """The pool's status once it answers, takes ``token`` and has a worker."""
    status = scheduler_status(url, timeout)
    check_token(url, token, timeout)
    if status.workers == 0:
        raise DistPoolError(f"the sccache-dist scheduler at {url} has no worker: start some "
                            f"(inv dist-pool up --workers N, or sccache-dist server on others)")
    return status
