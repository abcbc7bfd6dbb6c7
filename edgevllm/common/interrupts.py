"""SIGTERM handled as Ctrl-C, so that ``finally`` blocks run when a process is told to stop
(``kill``, a parent's ``terminate()``): a container removed, an ssh connection closed."""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Inside the block, SIGTERM raises KeyboardInterrupt (main thread only: a signal handler
    can be set nowhere else); the previous handler is back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
