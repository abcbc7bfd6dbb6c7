"""One build, top to bottom. ``build()`` is the entry point.

1. preflight  engine, buildx, emulation, disk (seconds)
2. mode       decided once (``modes.start``: the spec, or the prepared tree's change)
3. prepare    the mode's own work (``modes/<mode>.py``): mods, tree or closure, Dockerfile,
              named contexts, the lock; everything that can fail in seconds fails here
4. tail       the same for every mode (``tail.py``): wheels, runtime, mods record, checks,
              labels, final tags, publish cache
"""

from __future__ import annotations

from pathlib import Path

from edgevllm.builder import modes, tail
from edgevllm.builder.runner import BuildResult, Workspace, preflight
from edgevllm.common import console
from edgevllm.common.errors import BuildError
from edgevllm.containers.docker import DockerEngine
from edgevllm.specs.buildspec import BuildSpec, resolve
from edgevllm.specs.lock import Lock, read_lock


def build(
    spec: BuildSpec, out: Path, engine: DockerEngine | None = None, lock_path: Path | None = None
) -> BuildResult:
    """Build (or rebuild from a lock) one image; returns where everything went."""
    engine = engine or DockerEngine()
    eff = resolve(spec)
    ws = Workspace(out / eff.target.name)
    preflight(eff, engine, out)
    locked = lock_for(lock_path, eff.target.name)
    job = modes.start(spec, ws, engine, locked)
    console.step(f"mode: {job.eff.mode} ({job.eff.mode_reason})")
    return tail.run(job, modes.prepare(job))


def lock_for(lock_path: Path | None, target: str) -> Lock | None:
    """The lock to rebuild from, which must be the target's."""
    locked = read_lock(lock_path) if lock_path else None
    if locked and locked.target and locked.target != target:
        raise BuildError(
            f"{lock_path}: the lock is for target '{locked.target}', not "
            f"'{target}'; drop --target or use the matching lock"
        )
    return locked
