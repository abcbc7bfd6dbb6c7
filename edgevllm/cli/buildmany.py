"""``inv build --engine``: which engine builds which target, and several targets at once.

``--engine ssh://me@spark`` (or a docker context name; the grammar of ``inv serve --nodes``,
owned by ``DockerEngine.named``) builds every target there; ``--engine thor=ssh://me@thor``
names one target's engine. ``--target thor,spark`` runs one ``edgevllm build`` per target, in
parallel: each is the single build it would be on its own (its own console, log and lock under
``<out>/<target>/``), and this module shows one progress line per target, then one summary. A
failure in one does not stop or hide the other; the exit code is non-zero if any failed.
"""

from __future__ import annotations

import math
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from edgevllm.cli.flags import BUILD_FLAGS, Flag
from edgevllm.common import console
from edgevllm.common.errors import BuildError, ConfigError, SpecError
from edgevllm.common.fsutil import atomic_write_json
from edgevllm.common.kv import split_csv, split_pair
from edgevllm.common.poll import poll
from edgevllm.containers.docker import DockerEngine

ENGINE_HELP = ("build on this Docker engine: ssh://[user@]host[:port], a docker context name, "
               "or TARGET=ENGINE for one target (repeatable); the image stays there")
# The task's own options that a per-target child build is given too (besides the flag table).
_TASK_FLAGS = (Flag("out", ""), Flag("verify", "", kind="bool", default=True))


def engines_for(raw: list[str] | str | None, targets: list[str]) -> dict[str | None, DockerEngine]:
    """``--engine`` values → {target: engine}; the key None is every target not named."""
    found: dict[str | None, DockerEngine] = {}
    for item in split_csv(raw if isinstance(raw, list) else [raw] if raw else []):
        name, spec = (split_pair(item, "--engine", SpecError, "TARGET=ENGINE")
                      if "=" in item.split("://")[0] else (None, item))
        if name is not None and name not in targets:
            listed = ", ".join(targets) or "none (give --target)"
            raise SpecError(f"--engine {item}: '{name}' is not a target of this build "
                            f"(--target: {listed})")
        if name in found:
            raise SpecError(f"--engine: two engines for {name or 'every target'}; give one")
        try:
            found[name] = DockerEngine.named(spec)
        except ConfigError as exc:
            raise SpecError(f"--engine {item}: {exc}") from None
    return found


def engine_of(engines: dict[str | None, DockerEngine], target: str | None) -> DockerEngine:
    return engines.get(target) or engines.get(None) or DockerEngine()


def child_argv(values: dict, target: str, engine: DockerEngine, json_path: Path) -> list[str]:
    """The ``edgevllm build`` command line of one target's build: every flag given, as given."""
    argv = ["build", "--target", target, "--json", str(json_path)]
    if engine.context or engine.host:
        argv += ["--engine", engine.describe()]
    for flag in BUILD_FLAGS + _TASK_FLAGS:
        raw = values.get(flag.name)
        if flag.name in ("target", "engine") or raw in (None, "", [], ()):
            continue
        if flag.kind == "bool":
            argv += [] if bool(raw) == bool(flag.default) else [
                flag.option if raw else "--no-" + flag.option[2:]]
        elif flag.repeatable:
            for item in raw:
                argv += [flag.option, str(item)]
        else:
            argv += [flag.option, str(raw)]
    return argv


@dataclass
class TargetBuild:
    """One target's child build: its progress line and its outcome."""

    target: str
    engine: str
    json_path: Path
    line: str = "starting"
    error: str = ""
    code: int | None = None
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None

    def follow(self, proc: subprocess.Popen, log: Path) -> None:
        """Read the child's messages into its log, keeping its latest step as the line."""
        assert proc.stderr is not None
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "w", buffering=1) as sink:
            for raw in proc.stderr:
                text = raw.decode(errors="replace").rstrip()
                sink.write(text + "\n")
                if text.startswith("error: "):
                    self.error = text[len("error: "):]
                elif text.startswith(("==> ", "  ")) and text.strip():
                    self.line = text.removeprefix("==> ").strip()[:100]
        self.code = proc.wait()
        self.ended = time.monotonic()

    def status(self) -> str:
        if self.code is None:
            return f"{self.target} on {self.engine}: {self.line} ({self.elapsed()})"
        verdict = "built" if self.code == 0 else f"FAILED (exit {self.code})"
        return f"{self.target} on {self.engine}: {verdict} in {self.elapsed()}"

    def elapsed(self) -> str:
        seconds = int((self.ended or time.monotonic()) - self.started)
        return f"{seconds // 60}m{seconds % 60:02d}s"


def build_many(values: dict, targets: list[str], engines: dict[str | None, DockerEngine]) -> None:
    """Build ``targets`` at once, each on its engine; one progress line each, one summary."""
    out = Path(values.get("out") or "out")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    staging = out / f".build-many-{stamp}"
    staging.mkdir(parents=True, exist_ok=True)
    runs, procs, threads = [], [], []
    try:
        for target in targets:
            engine = engine_of(engines, target)
            run = TargetBuild(target, engine.describe(), staging / f"{target}.json")
            proc = subprocess.Popen(
                [sys.executable, "-c", "from edgevllm.cli import main; main()",
                 *child_argv(values, target, engine, run.json_path)],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            log = out / target / "logs" / f"console-{stamp}.log"
            thread = threading.Thread(target=run.follow, args=(proc, log), daemon=True)
            thread.start()
            runs.append(run)
            procs.append(proc)
            threads.append(thread)
        _show_progress(runs, threads)
        results = {run.target: _result_of(run) for run in runs}
    finally:
        for proc in procs:  # interrupted: no child build goes on alone
            if proc.poll() is None:
                proc.terminate()
        for path in staging.glob("*.json"):
            path.unlink()
        staging.rmdir()
    _summary(runs, results, values.get("json"))


def _result_of(run: TargetBuild) -> dict:
    if run.code == 0 and run.json_path.is_file():
        import json

        return json.loads(run.json_path.read_text())
    return {"error": run.error or f"exit code {run.code}", "exit_code": run.code}


def _show_progress(runs: list[TargetBuild], threads: list[threading.Thread]) -> None:
    """A live line per target on a terminal; in a log, each target's line when it changes."""
    if console.is_tty():
        from rich.live import Live
        from rich.text import Text

        with Live(console=console.err_console(), refresh_per_second=2) as live:
            def refresh() -> bool | None:
                alive = any(t.is_alive() for t in threads)
                live.update(Text("\n".join(run.status() for run in runs)))
                return None if alive else True

            poll(refresh, math.inf, 0.5)
        return
    shown = {run.target: "" for run in runs}

    def log_changes() -> bool | None:
        alive = any(t.is_alive() for t in threads)
        for run in runs:
            line = run.status().rsplit(" (", 1)[0]
            if line != shown[run.target]:
                shown[run.target] = line
                console.info(run.status())
        return None if alive else True

    poll(log_changes, math.inf, 0.5)


def _summary(runs: list[TargetBuild], results: dict[str, dict], json_path: str | None) -> None:
    console.step("summary")
    for run in runs:
        result = results[run.target]
        what = result.get("image") if run.code == 0 else f"error: {result['error']}"
        console.info(f"  {run.target:<10} {run.engine:<28} {run.elapsed():>8}  {what}")
    if json_path:
        atomic_write_json(Path(json_path), results)
    for run in runs:
        if run.code == 0:
            print(results[run.target]["image"])
    failed = [run for run in runs if run.code != 0]
    if failed:
        raise BuildError(f"{len(failed)} of {len(runs)} builds failed: " + "; ".join(
            f"{run.target} on {run.engine} ({results[run.target]['error']})" for run in failed))
