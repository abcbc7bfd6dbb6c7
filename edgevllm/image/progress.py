"""Bytes done and rate on stderr while an image is published, loaded or verified."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from edgevllm.common import console

if TYPE_CHECKING:  # rich is imported only when a terminal shows the bar
    from rich.progress import Progress, TaskID


def human(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return f"{size} B"


class ByteProgress:
    """Bytes done and rate on stderr (rich), redrawn a few times a second at most.

    Off a terminal it prints one line every ``line_every`` seconds instead, so CI logs stay short.
    """

    def __init__(self, description: str, total: int | None, line_every: float = 30.0):
        self.description, self.total, self.done = description, total, 0
        self._line_every, self._start = line_every, time.monotonic()
        self._last_line = self._start
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> "ByteProgress":
        if console.is_tty():
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TransferSpeedColumn,
            )

            progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                DownloadColumn(binary_units=True),
                TransferSpeedColumn(),
                TimeElapsedColumn(),
                console=console.err_console(),
                refresh_per_second=4,
                transient=False,
            )
            progress.start()
            self._progress = progress
            self._task = progress.add_task(self.description, total=self.total)
        return self

    def __call__(self, count: int) -> None:
        self.done += count
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=self.done)
        elif time.monotonic() - self._last_line >= self._line_every:
            self._last_line = time.monotonic()
            console.info(f"{self.description}: {human(self.done)} at {human(self.rate)}/s")

    @property
    def elapsed(self) -> float:
        return max(time.monotonic() - self._start, 1e-9)

    @property
    def rate(self) -> float:
        return self.done / self.elapsed

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()
