"""The build driver: spec → prepared sources → Dockerfile → wheels → runtime image → checks → tags.

Order matters for the user's time: everything that can fail in seconds (engine, binfmt, disk,
sources and cherry-picks, mods) is checked before the hours-long compile starts.

Outputs for one build live under ``<out>/<target>/``:
  ``context/``          the rendered Dockerfile and the named build contexts (mods, meta)
  ``src/vllm``          the prepared vLLM tree (resolved, picks applied, source patches applied)
  ``wheels/<key>/``     exported wheels, keyed by every input of the compile: reused when unchanged
  ``<tag>.lock.json``   the lock;  ``logs/build-<time>.log``  the full build log
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from edgevllm import __version__
from edgevllm.builder.buildlog import BuildFollower, format_elapsed
from edgevllm.builder.dockerfile import stage_text
from edgevllm.builder.render import relabel_dockerfile
from edgevllm.common import console
from edgevllm.common.errors import BuildError, EdgeVllmError, EngineLostError
from edgevllm.common.fsutil import atomic_dir, atomic_write_json, atomic_write_text
from edgevllm.containers.docker import BuildOptions, DockerEngine
from edgevllm.containers.enginehost import check_build_disk, engine_platform
from edgevllm.containers.host import slow_emulation
from edgevllm.specs.buildspec import EffectiveSpec
from edgevllm.specs.lock import BaseImageLock
from edgevllm.specs.moderecord import mode_record


@dataclass
class BuildResult:
    image: str
    tags: list[str]
    image_id: str
    lock_path: Path
    log_path: Path
    wheels_dir: Path
    compiled: bool  # False when the wheels were reused: nothing was recompiled
    mods_record: dict | None = None
    verify: dict | None = None
    probe: dict | None = None
    publish_cache: dict | None = None  # set when the build primed the publish layer cache
    supply_chain: dict | None = None  # the SBOM (and signed provenance) beside the lock
    compile_cache: dict | None = None  # ccache's hits and misses of the compile (when it ran)
    layers: dict | None = None  # bytes per layer and shadowed bytes (inspect/layersizes.py)
    image_seconds: float | None = None  # the runtime image's build (BuildKit), in seconds
    aot: dict | None = None  # --aot: the FlashInfer AOT modules built in (builder/aot/plan.py)
    wheel_cache: dict | None = None  # what --wheel-cache got: pushed, unchanged, kept, failed
    tail: dict | None = None  # seconds of each step after the image (builder/tail.py ``Clock``)


@dataclass
class Workspace:
    root: Path
    context_dir: Path | None = None  # inv render writes the context straight into its folder

    @property
    def context(self) -> Path:
        return self.context_dir or self.root / "context"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def wheels(self, key: str) -> Path:
        return self.root / "wheels" / key


def preflight(eff: EffectiveSpec, engine: DockerEngine, out: Path, compiles: bool = True) -> None:
    """The engine's own facts: reachable, buildx, native or emulated, free disk; an engine on
    another machine answers for that machine (``containers/enginehost.py``). ``compiles`` False:
    a compile that may find its compiled wheels (``wheelcache.may_reuse``)."""
    engine.check_daemon()
    engine.check_buildx()
    need_gb = disk_gb(eff, compiles)
    how = engine_platform(engine, eff.platform)
    if not engine.runs_here:
        console.info(how.line())
        console.info(check_build_disk(engine, out, need_gb))
        return
    slow = slow_emulation(eff.platform) if how.how == "emulated" else None
    if slow:
        console.warn(slow)
    check_build_disk(engine, out, need_gb)


def disk_gb(eff: EffectiveSpec, compiles: bool = True) -> float:
    """The free disk a build asks for, as its mode's record says: the target's compile figure
    (the devel image, the build stage, the compile cache) where a wheel is built, the closure's
    (``prebuilt.min_disk_gb``) for a closure mode and for a compile that reuses its compiled
    wheels (``compiles`` False: nothing compiles)."""
    record = mode_record(eff.mode)
    if record.disk == "closure" or (record.compiles and not compiles):
        return eff.target.prebuilt.min_disk_gb
    return eff.target.min_disk_gb


_CACHE_MOUNT_ID = re.compile(r"(--mount=type=cache,\S*?),id=[A-Za-z0-9_.-]+")
_FROM_DIGEST = re.compile(r"(?m)^(FROM[ \t]+(?:--platform=\S+[ \t]+)?[^\s@]+)@sha256:[0-9a-f]{64}")


def compile_key(dockerfile: str, sources: dict[str, str], build_args: dict[str, str],
                bases: Mapping[str, BaseImageLock] | None = None) -> str:
    """Everything the wheels depend on: the stages the ``wheels`` target needs, the trees, the
    build args and the base images' digests where known (``bases``: the lock's). A cache mount's
    id (--compile-cache-id) is not: it names a builder's own cache, not what is compiled
    (BuildKit's own step cache ignores it too), so builders that name their caches differently
    share a key (and the wheel cache's artifact). A base's digest counts once, whether the text
    names it (a lock rebuild renders ``ref@digest``) or not (the first build renders ``ref``):
    both give one key, so a lock rebuild finds the wheels its first build compiled."""
    stages = _CACHE_MOUNT_ID.sub(r"\1", stage_text(dockerfile, "wheels"))
    stages = _FROM_DIGEST.sub(r"\1", stages)
    digests = {f"base:{stage}": base.digest for stage, base in (bases or {}).items()
               if base.digest}
    blob = json.dumps({"dockerfile": stages, "sources": {**sources, **digests},
                       "args": build_args}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


class BuildRunner:
    """Runs buildx with live progress, a full log file, and one failure message naming the stage."""

    def __init__(self, engine: DockerEngine, log_path: Path, env: dict[str, str] | None = None):
        self.engine = engine
        self.log_path = log_path
        self.env = env or {}  # for buildx itself: the values of ``--secret id=…,env=…``
        self.ccache: dict[str, int] = {}  # ccache's counters of the last step that printed them
        self.sccache: dict[str, int] = {}  # --dist: sccache's, likewise

    def run(self, options: BuildOptions, what: str) -> BuildFollower:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        # Line-buffered: the log can be followed (tail -f) while the build runs.
        with open(self.log_path, "a", buffering=1) as log, _status(what) as update:
            log.write(f"\n### {what}: docker {' '.join(options.argv())}\n")
            follower = BuildFollower(log_file=log)
            follower.on_stage = lambda v: update(f"{what}: [{v.stage}] {v.what[:90]}", follower)
            code = self.engine.build(options, follower.feed, env=self.env)
        follower.finish()
        self.ccache = follower.ccache or self.ccache
        self.sccache = follower.sccache or self.sccache
        if code != 0 and engine_gone(self.engine):
            raise EngineLostError(
                f"engine {self.engine.describe()} went away during {what} (after "
                f"{format_elapsed(follower.elapsed())}): nothing was kept under a final name; "
                f"build again once it answers (log: {self.log_path})")
        if code != 0:
            raise BuildError(f"{what} failed after {format_elapsed(follower.elapsed())}: "
                             + follower.failure_message(self.log_path))
        console.info(f"{what}: done in {format_elapsed(follower.elapsed())}")
        return follower


def engine_gone(engine: DockerEngine) -> bool:
    """After a failed build: does an engine on another machine still answer?"""
    if engine.runs_here:
        return False
    try:
        engine.check_daemon()
    except EdgeVllmError:
        return True
    return False


@contextlib.contextmanager
def _status(what: str):
    """A live one-line status (stage, elapsed) on a terminal; plain stage lines otherwise."""
    if console.is_tty():
        with console.err_console().status(what) as status:
            yield lambda text, f: status.update(f"{text}  ({format_elapsed(f.elapsed())})")
    else:
        last: dict[str, str | None] = {"stage": None}

        def update(text: str, follower: BuildFollower) -> None:
            stage = follower.current.stage if follower.current else None
            if stage != last["stage"]:
                last["stage"] = stage
                console.info(f"  {text}  (+{format_elapsed(follower.elapsed())})")

        yield update


def own_wheels(folder: Path, root: Path) -> bool:
    """Whether the compiled wheels in ``folder`` may stand for a compile: they and every folder
    from the output's ``root`` down are the user's and not writable by group or others
    (``common/trust``; else one warning line, and the build compiles)."""
    from edgevllm.common.trust import trusted_path

    return all(trusted_path(wheel, root, "compiled wheels in")
               for wheel in [folder, *sorted(folder.glob("*.whl"))])


def export_wheels(runner: BuildRunner, base: BuildOptions, dest: Path) -> bool:
    """Build the wheels stage into ``dest`` (``<out>/<target>/wheels/<key>``) unless it is
    already there and the user's (``own_wheels``); True if it compiled."""
    if dest.is_dir() and any(dest.glob("*.whl")) and own_wheels(dest, dest.parents[1]):
        console.info(f"wheels: reusing {dest} (no input of the compile changed)")
        return False
    with atomic_dir(dest) as tmp:
        options = with_options(base, target="wheels", output=f"type=local,dest={tmp}", tags=())
        runner.run(options, "compile (wheels stage)")
        if not any(tmp.glob("*.whl")):
            raise BuildError(f"the wheels stage produced no wheel in {tmp}; see {runner.log_path}")
    return True


def with_options(options: BuildOptions, **changes) -> BuildOptions:
    data = dict(options.__dict__)
    data.update(changes)
    return BuildOptions(**data)


def relabel(runner: BuildRunner, engine: DockerEngine, image: str, labels: dict[str, str],
            tags: list[str], platform: str, workdir: Path, epoch: int | None = None) -> str:
    """Add post-build labels (config only) and apply the final tags; returns the image id.
    ``epoch`` (--reproducible): BuildKit's epoch argument (clamp.EPOCH_ARG), so the config's
    date and the label step's history entry are that moment, not now."""
    from edgevllm.image.clamp import EPOCH_ARG

    iid = workdir / "relabel.iid"
    args = {"IMAGE": image, **({EPOCH_ARG: str(epoch)} if epoch is not None else {})}
    options = BuildOptions(context=workdir, dockerfile=relabel_dockerfile(), platform=platform,
                           tags=tags, labels=labels, build_args=args, iidfile=iid)
    runner.run(options, "labels")
    return iid.read_text().strip()


def timestamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


def write_context(ws: Workspace, dockerfile: str, meta: dict[str, str]) -> None:
    """The render output: Dockerfile plus the small named contexts (meta); atomically."""
    ws.context.mkdir(parents=True, exist_ok=True)
    atomic_write_text(ws.context / "Dockerfile", dockerfile)
    meta_dir = ws.context / "edgevllm-meta"
    with atomic_dir(meta_dir) as tmp:
        for name, text in meta.items():
            (tmp / name).write_text(text)


def copy_lock_beside(lock_file: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(lock_file, dest)


def summary_json(result: BuildResult) -> dict:
    return {
        "image": result.image, "tags": result.tags, "image_id": result.image_id,
        "lock": str(result.lock_path), "log": str(result.log_path),
        "compiled": result.compiled, "mods": result.mods_record, "verify": result.verify,
        "probe": result.probe, "publish_cache": result.publish_cache,
        "supply_chain": result.supply_chain, "compile_cache": result.compile_cache,
        "layers": result.layers, "image_seconds": result.image_seconds,
        "aot": result.aot, "wheel_cache": result.wheel_cache, "tail": result.tail,
        "tool_version": __version__,
    }


def write_summary(result: BuildResult, path: Path) -> None:
    atomic_write_json(path, summary_json(result))
