"""A ``--dist`` compile step that failed, said in one line: the one owner of telling a worker's
wrong object (the check of builder/distpool/objcheck.py found it) and a pool that changed under
the build from a compile error of the tree.

- **A worker's wrong object.** sccache 0.16 takes whatever object a worker sends back; the
  in-image check compares a sample with a local compile and fails the unit on a difference,
  leaving an ``edgevllm-dist-check mismatch OBJECT`` line in the log: the build's line names it.
- **A pool that changed mid-build.** sccache 0.16 compiles a unit here when the scheduler cannot
  be reached or a worker dies mid-job (tests/e2e/test_dist_build_e2e.py), but a scheduler that
  now refuses the token (the pool restarted with new tokens) makes sccache fail the unit (exit
  254). So when a ``--dist`` compile step fails, the pool is probed again: if it now refuses the
  token, cannot be reached or has no worker, that is the build's one line, with its way out.
No wheel is kept in either case.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from edgevllm.builder.distpool import client, probe
from edgevllm.builder.distpool.objcheck import CHECK_MARKER
from edgevllm.common.errors import BuildError, DistPoolError
from edgevllm.specs.buildspec import EffectiveSpec

LOG_TAIL_BYTES = 1 << 20


def mismatch_in(log_path: Path) -> str | None:
    """The first object the check found different, from the end of the build's log."""
    try:
        with open(log_path, "rb") as handle:
            handle.seek(max(handle.seek(0, os.SEEK_END) - LOG_TAIL_BYTES, 0))
            text = handle.read().decode(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        at = line.find(f"{CHECK_MARKER} mismatch ")
        if at >= 0:
            return line[at + len(CHECK_MARKER) + 10:].split(" ", 1)[0][:300]
    return None


@contextlib.contextmanager
def explained(eff: EffectiveSpec, log_path: Path) -> Iterator[None]:
    """Around the compile step: its BuildError, or the pool's line when the pool is the cause.
    The pool is asked again with the token the build holds (read now, as the step's secret
    was): a token file replaced meanwhile is not the one sccache sent."""
    token = client.read_token(eff) if client.wanted(eff) else ""
    try:
        yield
    except BuildError:
        if not token:
            raise
        bad = mismatch_in(log_path)
        if bad:
            raise DistPoolError(
                f"--dist {eff.spec.dist}: the object a pool worker returned for {bad} differs "
                f"from this machine's compile of the same unit (a worker's toolchain or host "
                f"is not to be trusted); no wheel was kept: build without --dist, and check the "
                f"pool's workers (log: {log_path})") from None
        try:
            probe.check_pool(client.check_road(eff), token)
        except DistPoolError as now:
            raise DistPoolError(f"--dist {eff.spec.dist}: {now} (it changed during the "
                                f"compile, which failed; no wheel was kept: build again once "
                                f"it serves, or without --dist)") from None
        raise
