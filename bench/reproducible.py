#!/usr/bin/env python3
"""Two builds of one lock, the same image, and its checks once per content? The small
real-pipeline image (the fake-vllm fixture, this host's platform, one files-only mod of the
bench's own) built four times in one process, verify and probe level 1 on, with a verify cache
and a probe cache of the bench's own (empty at the start):

1. default:  from its spec, as every build runs (the lock it writes is the one rebuilt below);
2. repro:    from that lock with --reproducible (BuildKit's cache used: it must build nothing);
   again:    the same once more (the clamp's own cache: the image tagged again, nothing read);
3. rerun:    from that lock with --reproducible and every step rerun (BuildKit's cache unused);
4. one-mod:  the mod's version and file changed, from the spec with --reproducible (a new lock).

Prints each build's wall time, the clamp's seconds (the price of --reproducible), the steps
BuildKit took from its cache, verify's and the probe's seconds, the layers verify read (the
others known to its cache) and whether the probe's facts came from its cache; whether 2 and 3
are the same image (config digest and diff ids), the first file where 1 differs from 2 (the
build's own times), and which layers 4 changed against 2 with its tail's seconds.

Then what a rebuilt image costs to share, through the real command line (``inv publish``,
``inv load``, each in a process of its own, with a layer cache of the bench's own, empty at the
start; seconds are the command's whole run): 2 published right after its build, 3 right after
its build into another folder (the layers it compressed: 0 is the goal; whether the two sets'
parts are byte-identical), 4 published (the layers it compressed: the changed ones), then 4
removed from the engine (which still holds 2) and its set loaded back (the layers ``inv load``
did not send). The images it tagged or loaded and the folders it wrote are removed.

    python bench/reproducible.py
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]
IMAGE_REPO = "edgevllm-bench/reproducible"
MOD = "bench-repro-mod"
PROBE_HIT = "probe level 1: the facts of the probe cache"
# The command line's own lines (cli/publish.py, image/loadskip.py's Skip.describe)
PUBLISHED = re.compile(r"^(.+) in (\d+) part\(s\), [\d.]+s, layers: (\d+) from the cache, "
                       r"(\d+) compressed(, no docker save)?$", re.M)
NOT_SENT = re.compile(r"^\d+ of \d+ layers \([\d.]+ GB\) already in the engine: not sent$",
                      re.M)


def stderr_of(run, log: Path):
    """``run()`` with this process's stderr (the build's progress) written to ``log``, then
    copied to the real stderr; (its result, the text)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(log, "wb") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            result = run()
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
    text = log.read_text(errors="replace")
    sys.stderr.write(text)
    return result, text


def timed(label: str, run, log: Path):
    started = time.perf_counter()
    result, text = stderr_of(run, log)
    seconds = time.perf_counter() - started
    cached = sum(line.rstrip().endswith("CACHED")
                 for line in Path(result.log_path).read_text(errors="replace").splitlines())
    tail = result.tail or {}
    took = tail.get("seconds", {})
    reading = tail.get("verify_layers") or {}
    clamp = took.get("clamp")
    print(f"{label:15} {seconds:6.1f} s  {cached:2} steps from BuildKit's cache"
          + (f", clamp {clamp} s" if clamp is not None else "")
          + f"; tail {took.get('total')} s, verify {took.get('verify')} s + probe "
          f"{took.get('probe')} s: {len(reading.get('read', {}))} of "
          f"{len(reading.get('layers', []))} layers read, probe "
          + ("from its cache" if PROBE_HIT in text else "run"), flush=True)
    return result


def cli(args: list[str]) -> tuple[float, str, list[str]]:
    """``inv ARGS`` as users run it, in a process of its own (its stderr copied to ours):
    (seconds, its stderr, its stdout's lines); a failure ends the bench with its last line."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", "from edgevllm.cli import main; main()", *args],
                          cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    sys.stderr.write(done.stderr)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"inv {' '.join(args)} exited {done.returncode}: {last}")
    return seconds, done.stderr, [line for line in done.stdout.splitlines() if line]


def publish(label: str, ref: str, out: Path) -> tuple[Path, list[str]]:
    """``inv publish`` of ``ref`` into ``out``, one line; (its manifest, its parts' sha256)."""
    seconds, text, written = cli(["publish", "--image", ref, "--out", str(out)])
    manifest = Path(next(line for line in written if line.endswith(".manifest.json")))
    parts = [hashlib.sha256(Path(line).read_bytes()).hexdigest() for line in written
             if not line.endswith(".manifest.json")]
    found = PUBLISHED.search(text)
    figures = (f"{found[4]} of {int(found[3]) + int(found[4])} layers compressed, {found[3]} "
               f"from the layer cache{found[5] or ''}; {found[1]} in {found[2]} part(s)"
               if found else "no layer figures in its output")
    print(f"{label:15} {seconds:6.1f} s  {figures}", flush=True)
    return manifest, parts


def same_sets(first: tuple[Path, list[str]], second: tuple[Path, list[str]]) -> str:
    """Whether two published sets hold the same bytes: each part's sha256, and the manifests
    but for the time they were written."""
    def record(path: Path) -> dict:
        return {k: v for k, v in json.loads(path.read_text()).items() if k != "created"}

    parts = ("its parts byte-identical to repro's" if first[1] == second[1]
             else "its parts DIFFER from repro's")
    return (f"{parts} ({len(second[1])} part(s), sha256 "
            f"{', '.join(d[:12] for d in second[1])}); manifests "
            + ("the same but for 'created'" if record(first[0]) == record(second[0])
               else "DIFFERENT beyond 'created'"))


def load_back(engine, made: list[str], one_mod, manifest: Path) -> None:
    """The one-mod image removed (its tags are the bench's), then ``inv load`` of its set into
    the engine that holds repro's layers: the layers it left out, one line."""
    for ref in [*one_mod.tags, one_mod.image_id]:
        engine.remove_image(ref)
    if engine.image_exists(one_mod.image_id):
        print(f"{'load one-mod':15} not measured: {one_mod.image_id} could not be removed")
        return
    seconds, text, loaded = cli(["load", str(manifest)])
    made[:0] = loaded  # the set's tags: the one-mod build's own
    found = NOT_SENT.search(text)
    back = engine.image_exists(one_mod.image_id)
    print(f"{'load one-mod':15} {seconds:6.1f} s  "
          + (found[0] if found else "every layer sent (none held by the engine)")
          + ("; the one-mod image back" if back else "; the one-mod image NOT back"), flush=True)


def write_mod(root: Path, version: str, text: str) -> None:
    from support.files_mod import write_files_mod

    manifest = write_files_mod(root, MOD, text, "/opt/edgevllm/bench", "the bench's mod")
    manifest = manifest / "manifest.yaml"
    manifest.write_text(manifest.read_text().replace('version: "1"', f'version: "{version}"'))


def changed_layers(engine, before: str, after: str) -> str:
    old = engine.image_inspect(before)["RootFS"]["Layers"]
    new = engine.image_inspect(after)["RootFS"]["Layers"]
    changed = [i for i in range(max(len(old), len(new)))
               if i >= len(old) or i >= len(new) or old[i] != new[i]]
    return f"{len(changed)} of {len(new)} layers changed: " + \
        ", ".join(f"layer {i}" for i in changed)


def builds(tmp: Path, engine, made: list[str]) -> bool:
    from e2e.conftest import FIXTURE_TREE, hermetic_spec
    from edgevllm.builder.pipeline import build
    from edgevllm.cli.build import spec_from_flags
    from edgevllm.containers.host import host_arch
    from edgevllm.image.rebuildcheck import compare_images
    from edgevllm.specs.buildspec import spec_from_dict
    from support.gitfixtures import make_upstream_repo
    from support.images import cuda_image

    write_mod(tmp / "mods", "1", "first\n")
    spec = hermetic_spec("spark", cuda_image(engine, host_arch()),
                         make_upstream_repo(tmp, FIXTURE_TREE), platform=f"linux/{host_arch()}",
                         mods=[MOD], image_repo=IMAGE_REPO)
    out, log = tmp / "out", tmp / "stderr.log"
    first = timed("default", lambda: build(spec_from_dict(spec), out, engine), log)
    made.append(first.image_id)

    def again(rerun: bool):
        values = {"lock": str(first.lock_path), "image_repo": IMAGE_REPO}
        rebuilt = spec_from_flags(values).model_copy(update={
            "reproducible": True, "rerun_steps": rerun,
            "probe_required": spec["probe_required"]})  # as --check-reproducible keeps it
        return build(rebuilt, out, engine, lock_path=first.lock_path)

    repro = timed("repro", lambda: again(False), log)
    made.append(repro.image_id)
    sets = tmp / "sets"  # inv publish right after each build, as a user shares what was built
    repro_set = publish("publish repro", repro.tags[0], sets / "repro")
    twice = timed("again", lambda: again(False), log)  # the clamp's memo: tagged, nothing read
    made.append(twice.image_id)
    rerun = timed("rerun", lambda: again(True), log)
    made[:0] = rerun.tags  # the tags first: an image is removed once it has none
    made.append(rerun.image_id)
    rerun_set = publish("publish rerun", rerun.tags[0], sets / "rerun")
    print(f"{'rerun vs repro':15} {same_sets(repro_set, rerun_set)}", flush=True)
    write_mod(tmp / "mods", "2", "second\n")
    one_mod = timed("one-mod", lambda: build(spec_from_dict(dict(spec, reproducible=True)),
                                             out, engine), log)
    made[:0] = one_mod.tags
    made.append(one_mod.image_id)
    one_mod_set = publish("publish one-mod", one_mod.tags[0], sets / "one-mod")
    verdict = compare_images(engine, repro.image_id, rerun.image_id)
    print(f"repro vs rerun:   {'the same image' if verdict.same else 'DIFFERENT'}: "
          f"{verdict.line}")
    print(f"repro vs again:   {compare_images(engine, repro.image_id, twice.image_id).line}")
    print(f"default vs repro: {compare_images(engine, first.image_id, repro.image_id).line}")
    print(f"one-mod vs repro: {changed_layers(engine, repro.image_id, one_mod.image_id)}")
    load_back(engine, made, one_mod, one_mod_set[0])
    shutil.rmtree(sets)
    return verdict.same


def main() -> int:
    from edgevllm.containers.docker import DockerEngine

    engine = DockerEngine()
    made: list[str] = []
    with tempfile.TemporaryDirectory(prefix="edgevllm-bench-") as tmp_name:
        tmp = Path(tmp_name)
        for setting, folder in (("EDGEVLLM_VERIFY_CACHE", "verify"),
                                ("EDGEVLLM_PROBE_CACHE", "probe"), ("EDGEVLLM_MODS_PATH", "mods"),
                                ("EDGEVLLM_CLAMP_CACHE", "clamp"),
                                ("EDGEVLLM_LAYER_CACHE", "layers")):
            os.environ[setting] = str(tmp / folder)
        try:
            same = builds(tmp, engine, made)
        finally:
            for ref in made:
                engine.remove_image(ref)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
