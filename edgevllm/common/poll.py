"""The one poll-until-deadline loop: health checks, cluster readiness, daemon start-up.

``poll(check, timeout_s, interval_s)`` calls ``check()`` until it returns something other than
None, and returns that; past the deadline it returns None and the caller says what timed out.
``check`` may raise to stop early (a container that exited, a stop signature in the log).
"""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def poll(check: Callable[[], T | None], timeout_s: float, interval_s: float = 1.0,
         sleep: Callable[[float], None] = time.sleep) -> T | None:
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result is not None:
            return result
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        sleep(min(interval_s, remaining))
