"""The shared tail: everything after a mode's preparation, once, the same for every mode.

1. inputs    the Dockerfile and the meta context (the lock) written (the lock file once tagged)
2. wheels    the ``wheels`` target exported to ``wheels/<compile key>`` (modes that have one;
             skipped when that folder already holds wheels: no input of the compile changed)
3. runtime   the image, tagged ``<tag>-unverified``, with the wheels bind-mounted; its bytes per
             layer and bytes shadowed by a later layer printed, the target's size budget checked
4. mods      the in-image mods record (and --aot's record of the FlashInfer modules it built),
             read back and printed
5. checks    arch verify + probe level 1 (unless --no-verify, which is recorded); the kernel plan
             compared with the binaries verify scanned, from its verdict in memory. Verify reads
             only the layers the verify cache does not know (a rebuild that changed one mod:
             the mods layer); probe level 1 always runs (it imports the image's code)
6. labels    outcomes (and the mode's own) as labels; the final tags only when the checks passed
7. cache     with --publish-cache, the image's layers compressed for ``inv publish``
8. SBOM      beside the lock (and the signed provenance, with $EDGEVLLM_SIGNING_KEY)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edgevllm.builder.buildlog import compile_cache_summary, describe_compile_cache
from edgevllm.builder.distpool import guard as dist_guard
from edgevllm.builder.prepared import Job, PreparedBuild, runtime_contexts
from edgevllm.builder.runner import (
    BuildResult,
    BuildRunner,
    copy_lock_beside,
    export_wheels,
    relabel,
    timestamp,
    with_options,
    write_context,
)
from edgevllm.builder.steps import (
    LOCK_FILE_IN_IMAGE,
    checks_or_skip,
    outcome_labels,
    prime_publish_cache,
    print_mods,
    read_image_record,
    read_mods_record,
    static_labels,
    supply_chain,
)
from edgevllm.builder.subset.plan import check_wheels
from edgevllm.builder.wheelcache import share
from edgevllm.common import console
from edgevllm.common.errors import BuildError
from edgevllm.common.labels import AOT_RECORD, CCACHE_REMOTE_SECRET
from edgevllm.containers.docker import BuildOptions, DockerEngine
from edgevllm.specs.buildspec import EffectiveSpec
from edgevllm.specs.lock import Lock, image_tag, label_value, planned_arches_of, write_lock

if TYPE_CHECKING:
    from edgevllm.verify.judge import Verdict


def final_tags(eff: EffectiveSpec, tag: str) -> list[str]:
    """The image's tags: the lock's immutable tag first, then the user's (the one place)."""
    repo = eff.spec.image_repo
    return [f"{repo}:{tag}"] + [t if ":" in t else f"{repo}:{t}" for t in eff.spec.tags]


def run(job: Job, build: PreparedBuild) -> BuildResult:
    """Build, check, label and tag what ``build`` describes; returns where everything went."""
    engine, lock = job.engine, build.lock
    if engine is None or lock is None:
        raise BuildError("nothing was fetched for this build: it can be rendered, not run")
    if job.locked is not None and job.locked.created_at:
        # A rebuild is the same lock (its hash leaves the time out): the lock's time stays, in
        # the image's lock file and labels alike; the rebuild's own time is the log's (issue 45)
        lock.created_at = job.locked.created_at
    tag = image_tag(lock)
    tags = final_tags(build.eff, tag)
    console.step(f"image {tags[0]}")
    write_context(job.ws, build.dockerfile, {LOCK_FILE_IN_IMAGE: label_value(lock) + "\n"})
    secrets, secret_env = compile_cache_secret(build.eff)
    secrets, secret_env = with_dist_secret(build, secrets, secret_env)
    runner = BuildRunner(engine, job.ws.logs / f"build-{timestamp()}.log", env=secret_env)
    options = BuildOptions(context=job.ws.context, dockerfile=job.ws.context / "Dockerfile",
                           platform=build.eff.platform, build_args=build.build_args,
                           build_contexts=build.contexts, secrets=secrets,
                           no_cache=build.eff.spec.rerun_steps)
    wheels = job.ws.wheels(build.compile_key or "none")
    with dist_guard.explained(build.eff, runner.log_path):  # --dist: the pool's own line
        exported = "wheels" in build.stages and export_wheels(runner, options, wheels)
    check_wheels(lock.settings, wheels)  # a partial kernel build holds what it asked for
    if exported and build.eff.spec.reproducible:  # the compile's own time out of its wheels
        clamp_wheels(wheels)
    cache = compile_cache_report(runner, build.eff) if exported else None
    candidate = f"{tags[0]}-unverified"
    image_build = runner.run(with_options(options, target="runtime", tags=[candidate],
                                          build_contexts=runtime_contexts(build, str(wheels)),
                                          labels=static_labels(build.eff, lock, tag)),
                             build.runtime_what)
    clock = Clock()
    if build.eff.spec.reproducible:
        with clock("clamp"):
            clamp_candidate(engine, candidate, lock_epoch(lock), build.eff.images.runtime,
                            job.ws.root, hash_first=build.eff.spec.rerun_steps)
    with clock("layers"):
        layers = layer_report(engine, candidate, build.eff)
    aot = read_aot(runner, build.eff, candidate)
    record, verify, probe, image_id = check_and_tag(job, build, lock, runner, candidate, tags,
                                                    aot, clock)
    # Written once the image is tagged: a build that stopped (an engine gone) leaves no lock.
    lock_file = write_lock(lock, job.ws.root / f"{tag}.lock.json")
    copy_lock_beside(lock_file, job.ws.root / "latest.lock.json")
    with clock("wheel_cache"):
        shared = share(job, build, wheels)
    result = BuildResult(image=tags[0], tags=tags, image_id=image_id, lock_path=lock_file,
                         log_path=runner.log_path, wheels_dir=build.wheelhouse or wheels,
                         compiled=exported and build.compiles, mods_record=record,
                         verify=verify, probe=probe, compile_cache=cache, layers=layers,
                         image_seconds=round(image_build.elapsed(), 1), aot=aot,
                         wheel_cache=shared)
    if build.eff.spec.publish_cache:
        with clock("publish_cache"):
            result.publish_cache = prime_publish_cache(engine, result.image)
    with clock("sbom"):
        result.supply_chain = supply_chain(engine, result.image, lock_file)
    result.tail = clock.report()
    return result


class Clock:
    """Seconds of each step of the tail (the build summary's ``tail``, printed in one line):
    where the time after BuildKit's image goes (issue 34: the checks at the speed of the
    build). ``checks`` adds verify's and the probe's own (``steps.run_checks``)."""

    def __init__(self):
        import time

        self.now = time.perf_counter
        self.started = self.now()
        self.seconds: dict[str, float] = {}
        self.verify_layers: dict | None = None  # which layers verify read, which it knew

    def __call__(self, step: str):
        import contextlib

        @contextlib.contextmanager
        def timed():
            began = self.now()
            try:
                yield
            finally:
                self.seconds[step] = round(self.seconds.get(step, 0.0) + self.now() - began, 1)
        return timed()

    def report(self) -> dict:
        total = round(self.now() - self.started, 1)
        parts = ", ".join(f"{step} {seconds}" for step, seconds in self.seconds.items()
                          if seconds >= 0.1)
        console.info(f"tail: {total} s after the image ({parts})")
        return {"seconds": {"total": total, **self.seconds}, "verify_layers": self.verify_layers}


def layer_report(engine: DockerEngine, image: str, eff: EffectiveSpec) -> dict:
    """Bytes per layer and bytes shadowed by a later layer, printed; the target's size budget
    checked (leaving only the unverified tag when it is over, as a failed check does)."""
    from edgevllm.inspect.layersizes import check_budget, describe, image_layers, measure, summary

    sizes = measure(image_layers(engine, image))
    report = summary(sizes)
    console.info(f"layers: {report['total_bytes'] / 1e9:.2f} GB in {len(sizes)}, "
                 f"{report['shadowed_bytes'] / 1e9:.3f} GB shadowed by a later layer")
    for line in describe(sizes):
        console.info(f"  {line}")
    check_budget(sizes, eff.target.size_budget_gb, eff.target.name)
    return report


# buildx reads the secret's value from its own environment: the URL is in no argument, no
# Dockerfile, no layer and no log line (the log records only "--secret id=…,env=…").
CCACHE_REMOTE_ENV = "EDGEVLLM_CCACHE_REMOTE_STORAGE"


def compile_cache_secret(eff: EffectiveSpec) -> tuple[list[str], dict[str, str]]:
    """The build secret carrying --compile-cache to the compile step, and buildx's env for it."""
    url = eff.spec.compile_cache
    if not url:
        return [], {}
    return [f"id={CCACHE_REMOTE_SECRET},env={CCACHE_REMOTE_ENV}"], {CCACHE_REMOTE_ENV: url}


def with_dist_secret(build: PreparedBuild, secrets: list[str], env: dict[str, str]
                     ) -> tuple[list[str], dict[str, str]]:
    """--dist: sccache's client config (the pool and its token) as one more build secret, the
    pool probed once more right before BuildKit runs (builder/distpool/client.py)."""
    from edgevllm.builder.distpool import client as dist_client

    found = dist_client.check(build.eff) if build.compiles else None
    if found is None:
        return secrets, env
    more, more_env = found.secret()
    return [*secrets, *more], {**env, **more_env}


def compile_cache_report(runner: BuildRunner, eff: EffectiveSpec) -> dict | None:
    """ccache's hits and misses of the compile that just ran, printed (and --dist's units on the
    pool and here); None without either."""
    dist = None
    if runner.sccache:
        from edgevllm.builder.distpool import client as dist_client

        dist = dist_client.summary(runner.sccache)
        dist_client.report(dist)
    if not runner.ccache and not dist:
        return None
    summary: dict = compile_cache_summary(runner.ccache, remote=bool(eff.spec.compile_cache))
    if runner.ccache:
        console.info(describe_compile_cache(summary))
    return {**summary, "dist": dist} if dist else summary


def read_aot(runner: BuildRunner, eff: EffectiveSpec, candidate: str) -> dict | None:
    """The AOT step's record (--aot), printed; None without one."""
    if not eff.spec.aot:
        return None
    from edgevllm.builder.aot.plan import aot_summary, describe_aot

    summary = aot_summary(read_image_record(runner.engine, candidate, AOT_RECORD))
    if summary is None:
        raise BuildError(f"{candidate}: the FlashInfer AOT step left no record at {AOT_RECORD}")
    for line in describe_aot(summary):
        console.info(f"  {line}")
    return summary


def check_and_tag(job: Job, build: PreparedBuild, lock: Lock, runner: BuildRunner,
                  candidate: str, tags: list[str], aot: dict | None = None,
                  clock: Clock | None = None) -> tuple[dict | None, dict, dict, str]:
    """Mods record, checks, outcome labels (and the AOT record's) and the final tags on the
    candidate image → (mods record, verify summary, probe summary, image id)."""
    engine, eff = runner.engine, build.eff
    clock = clock or Clock()
    with clock("mods_record"):
        record = read_mods_record(engine, candidate)
    print_mods(record)
    with clock("checks"):
        verify, probe, verdict = checks_or_skip(eff, engine, candidate, job.ws, clock.seconds,
                                                planned_arches(lock))
    if verdict is not None and lock.kernel_plan:
        verify["plan"] = plan_against_binaries(lock, verdict)
    if verdict is not None and verdict.reading is not None:
        clock.verify_layers = verdict.reading.to_json()
    with clock("labels"):
        image_id = relabel(runner, engine, candidate,
                           outcome_labels(record, verify, probe, aot) | build.labels, tags,
                           eff.platform, job.ws.context,
                           lock_epoch(lock) if eff.spec.reproducible else None)
        engine.remove_image(candidate)
    return record, verify, probe, image_id


def lock_epoch(lock: Lock) -> int:
    """--reproducible's moment: the lock's created_at (a rebuild keeps it: ``run``)."""
    from edgevllm.image.clamp import epoch_of
    from edgevllm.specs.lock import now_utc

    return epoch_of(lock.created_at or now_utc())


def clamp_candidate(engine: DockerEngine, candidate: str, epoch: int, base: str,
                    scratch, hash_first: bool = False) -> None:
    """The candidate's times after its base's creation set to that creation in its layers and
    to ``epoch`` (the lock's) in its config (image/clamp.py), under its tag; the image BuildKit
    exported is dropped (its layers stay in its cache). A layer's bytes thus follow from what
    it holds, not from its lock's time: a one-mod rebuild changes the mods layer and the lock's."""
    from edgevllm.common.errors import ImageNotFoundError
    from edgevllm.image.clamp import Moment, epoch_of
    from edgevllm.image.clampimage import clamp_image
    from edgevllm.image.clampmemo import ClampMemo

    keep: frozenset[str] = frozenset()
    base_bytes = 0
    try:
        found = engine.image_inspect(base)
        floor = epoch_of(str(found.get("Created") or ""))
        keep = frozenset((found.get("RootFS") or {}).get("Layers") or [])
        base_bytes = int(found.get("Size") or 0)
    except (ImageNotFoundError, ValueError):
        floor = epoch  # a base BuildKit pulled for itself: a plain clamp
        console.warn(f"  reproducible: base {base} is not on the engine: only times after the "
                     "lock's are set (a layer BuildKit's cache kept keeps its own)")
    exported = engine.image_inspect(candidate).get("Id", "")
    floor = min(floor, epoch)
    moment, config_moment = Moment(floor, floor), Moment(epoch, floor)
    done = clamp_image(engine, candidate, moment, scratch, keep, config_moment,
                       ClampMemo.for_moments(moment, config_moment), base_bytes, hash_first)
    clamped = done.image_id
    console.info(f"  reproducible: the files' times after the base's set to {floor} (its "
                 f"creation), the config's to {epoch} (the lock's created_at): {clamped[:19]}; "
                 + done.describe(len(engine.image_inspect(clamped)["RootFS"]["Layers"])))
    if exported and exported != clamped:
        engine.remove_image(exported)


def clamp_wheels(folder) -> None:
    """--reproducible: the wheels the compile step just wrote, their zip entries' dates (the
    compile's time) set to the zip format's first moment (image/clamp.py ``clamp_wheel``), before
    the runtime image installs them."""
    from edgevllm.image.clamp import clamp_wheel

    done = [wheel.name for wheel in sorted(folder.glob("*.whl")) if clamp_wheel(wheel)]
    if done:
        console.info(f"  reproducible: {len(done)} wheel(s)' entry dates set to 1980-01-01")


def planned_arches(lock: Lock) -> dict[str, list[str]]:
    """The kernel plan's arches by CUDA extension (a compile's lock; empty for the others)."""
    return planned_arches_of(lock.kernel_plan) or {}


def plan_against_binaries(lock: Lock, verdict: Verdict) -> list[str]:
    """ "plan: 12.1a; binary: sm_121a ✔" for each planned extension that verify scanned."""
    from edgevllm.sources.plan import compare_with_binaries

    planned = planned_arches(lock)
    found = {lib.report.path: lib.report.arches("sass") + lib.report.arches("ptx")
             for lib in verdict.libraries}
    lines = []
    for ext, text, agrees in compare_with_binaries(planned, found):
        lines.append(f"{ext}: {text} {'✔' if agrees else '✘ differs from the plan'}")
        console.info(f"  {lines[-1]}")
    return lines
