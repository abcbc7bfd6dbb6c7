"""prebuilt: a released vLLM wheel and its locked closure; nothing is compiled.

In order (everything that can fail in seconds before anything is downloaded):
1. mods      staged first (their pip packages join the closure, so they install offline)
2. closure   resolved on the host for the target's platform + Python (``sources.wheels``), or
             taken from ``--lock``; the pinned packages (target's and spec's) are requirements;
             overrides (torch pin, target pins, forbidden packages, the user's ``--override`` /
             ``--package``) are resolver overrides, recorded in the lock
3. wheels    downloaded into the shared content-addressed wheelhouse (cached), checked by hash,
             assembled as the ``wheelhouse`` build context with requirements.txt (by hash)
4. lock      the closure, the base image, the mods; then the shared tail (``builder/tail.py``)
             builds the one ``runtime`` target: the closure installed offline with uv
             (--no-deps --require-hashes), checks, labels and tags

Its facts for the rest of the tool are its record, ``prebuilt.yaml`` beside this module; what
it shares with the other modes (the closure, the wheelhouse, the lock) is ``modes/closure.py``.
"""

from __future__ import annotations

from edgevllm.builder.modes.closure import (
    OVER_CLOSURE,
    base_lock,
    mode_labels,
    prepare_wheelhouse,
    print_preflight,
    release_closure,
)
from edgevllm.builder.prepared import Job, PreparedBuild, engine_of, named_contexts
from edgevllm.builder.render import render_dockerfile
from edgevllm.builder.steps import stage_mods
from edgevllm.common import console
from edgevllm.specs.buildspec import prebuilt_wheel
from edgevllm.specs.moderecord import mode_record

name = "prebuilt"


def prepare(job: Job) -> PreparedBuild:
    eff, stages = job.eff, mode_record(name).stages
    print_preflight(eff)
    staged = stage_mods(eff, job.ws, job.locked, job.fetch)
    dockerfile = render_dockerfile(eff, staged.env)
    if not job.fetch:
        folders = {"wheelhouse": f"<the locked closure of vllm {prebuilt_wheel(eff.spec)}, "
                                 "every wheel by sha256>"}
        return PreparedBuild(eff=eff, dockerfile=dockerfile, stages=stages, lock=None,
                             contexts=named_contexts(job, folders=folders))
    closure = release_closure(eff, job.locked, staged.pip_packages)
    vllm = closure.pin("vllm")
    console.info(f"  vllm {vllm.version if vllm else '?'}: {len(closure.pins)} wheels, "
                 f"{closure.total_bytes() / 1e9:.2f} GB")
    folder = prepare_wheelhouse(eff, closure, job.ws, over=OVER_CLOSURE)
    lock = base_lock(eff, closure, staged.versions, engine_of(job),
                     {"vllm_wheel": prebuilt_wheel(eff.spec)})
    return PreparedBuild(eff=eff, dockerfile=dockerfile, stages=stages, lock=lock,
                         contexts=named_contexts(job, folders={"wheelhouse": str(folder)}),
                         wheelhouse=folder, labels=mode_labels(lock),
                         runtime_what="runtime image (prebuilt closure)")
