"""Following ``docker buildx build --progress=plain`` output: which stage runs, and what failed.

BuildKit's plain progress numbers every vertex (``#7``) and prints its name once
(``#7 [build 1/1] RUN ...``), then its output lines (``#7 12.3 text``), then ``#7 DONE 4.5s``,
``#7 CACHED`` or ``#7 ERROR: ...``. This module keeps, per vertex, its stage and output, so that a
failure is reported as one message naming the failing stage, with the last lines of its log.
Where edgevllm's own in-image step said why it stopped (``edgevllm <step>: error: ...``), that
line leads the message, however much output came after it.
"""

from __future__ import annotations

import re
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from edgevllm.common.labels import CCACHE_STATS_MARKER, SCCACHE_STATS_MARKER
from edgevllm.common.secrets import redact

_STEP = re.compile(r"^#(\d+) \[(?:(?P<platform>linux/\S+) )?(?P<stage>[\w.-]+)(?: "
                   r"(?P<pos>\d+/\d+))?\] (?P<what>.*)$")
_OUTPUT = re.compile(r"^#(\d+) (?:\d+\.\d+ )?(?P<text>.*)\Z")
_ERROR = re.compile(r"^#(\d+) ERROR: (?P<why>.*)\Z")
_DONE = re.compile(r"^#(\d+) (DONE|CACHED)")
# The one line an edgevllm in-image step prints when it stops the step (inimage_stage, inimage_run,
# inimage_build): the reason the failure message leads with.
_SAID = re.compile(r"^edgevllm [\w-]+: error: ")


@dataclass
class Vertex:
    number: int
    stage: str
    what: str
    output: deque = field(default_factory=lambda: deque(maxlen=40))
    said: deque = field(default_factory=lambda: deque(maxlen=3))  # edgevllm's own error lines
    cached: bool = False
    done: bool = False
    error: str | None = None


class BuildFollower:
    """Feed it every output line; ask it for the current stage, elapsed time and any failure."""

    def __init__(self, log_file: IO[str] | None = None, on_stage=None):
        self.vertices: dict[int, Vertex] = {}
        self.current: Vertex | None = None
        self.started = time.monotonic()
        self.ended: float | None = None  # set by finish(): elapsed() stops counting there
        self.log_file = log_file
        self.on_stage = on_stage  # called with (vertex) when a new step starts
        self.tail: deque = deque(maxlen=40)
        self.ccache: dict[str, int] = {}  # the compile step's ccache counters, when it printed them
        self.sccache: dict[str, int] = {}  # --dist: sccache's (builder/distpool/inimage_stats.py)

    def feed(self, line: str) -> None:
        line = redact(line)  # the log and the failure tail are read by people, CI and issues
        if self.log_file is not None:
            self.log_file.write(line + "\n")
        self.tail.append(line)
        if match := _STEP.match(line):
            self._start(int(match[1]), match["stage"], match["what"])
        elif match := _ERROR.match(line):
            vertex = self.vertices.get(int(match[1]))
            if vertex is not None:
                vertex.error = match["why"]
        elif match := _DONE.match(line):
            vertex = self.vertices.get(int(match[1]))
            if vertex is not None:
                vertex.done = True
                vertex.cached = match[2] == "CACHED"
        elif match := _OUTPUT.match(line):
            vertex = self.vertices.get(int(match[1]))
            if vertex is not None:
                vertex.output.append(match["text"])
                if _SAID.match(match["text"]):
                    vertex.said.append(match["text"])
            self._ccache_counter(match["text"])

    def _ccache_counter(self, text: str) -> None:
        """``edgevllm-ccache-stats cache_miss<TAB>3``: one counter of ``ccache --print-stats``."""
        words = text.split()
        if len(words) == 3 and words[0] == CCACHE_STATS_MARKER and words[2].isdigit():
            self.ccache[words[1]] = int(words[2])
        elif len(words) == 3 and words[0] == SCCACHE_STATS_MARKER and words[2].isdigit():
            self.sccache[words[1]] = int(words[2])

    def _start(self, number: int, stage: str, what: str) -> None:
        vertex = self.vertices.get(number)
        if vertex is None:
            vertex = self.vertices[number] = Vertex(number, stage, what)
        self.current = vertex
        if self.on_stage is not None:
            self.on_stage(vertex)

    def finish(self) -> None:
        """The build ended: the checks run on its image afterwards are not its time."""
        if self.ended is None:
            self.ended = time.monotonic()

    def elapsed(self) -> float:
        return (self.ended or time.monotonic()) - self.started

    def failed_vertex(self) -> Vertex | None:
        failed = [v for v in self.vertices.values() if v.error]
        return failed[-1] if failed else None

    def ran(self, stage: str) -> list[Vertex]:
        """Steps of ``stage`` that really executed (not served from the cache)."""
        return [v for v in self.vertices.values()
                if v.stage == stage and v.done and not v.cached and v.what.startswith("RUN")]

    def failure_message(self, log_path: Path | None, lines: int = 15) -> str:
        vertex = self.failed_vertex()
        where = f"; full log: {log_path}" if log_path else ""
        if vertex is None:
            tail = " | ".join(list(self.tail)[-5:])
            return f"the image build failed before any stage ran: {tail}{where}"
        shown = list(vertex.output)[-lines:]
        body = "\n    ".join(shown) if shown else "(no output)"
        said = f"{vertex.said[-1]}\n  " if vertex.said else ""
        return (f"{said}stage '{vertex.stage}' failed at: {vertex.what[:160]}\n"
                f"    {body}\n  {vertex.error}{where}")


def compile_cache_summary(counters: dict[str, int], remote: bool) -> dict[str, int | bool]:
    """ccache's counters as the build summary shows them: hits (direct or preprocessed, local or
    remote), misses (compiled), and what the remote storage answered."""
    return {
        "hits": counters.get("direct_cache_hit", 0) + counters.get("preprocessed_cache_hit", 0),
        "misses": counters.get("cache_miss", 0),
        "remote": remote,
        "remote_hits": counters.get("remote_storage_hit", 0),
        "remote_misses": counters.get("remote_storage_miss", 0),
        "remote_errors": counters.get("remote_storage_error", 0)
        + counters.get("remote_storage_timeout", 0),
    }


def describe_compile_cache(summary: dict) -> str:
    text = f"compile cache: {summary['hits']} hits, {summary['misses']} misses"
    if summary["remote"]:
        text += (f" (shared: {summary['remote_hits']} hits, {summary['remote_misses']} misses, "
                 f"{summary['remote_errors']} errors)")
    return text


def format_elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"
