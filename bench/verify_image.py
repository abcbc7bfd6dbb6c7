#!/usr/bin/env python3
"""Bench: ``inv verify --image`` cold and warm against the export + cuobjdump baseline, in one run.

Two images sharing their lower layers (default: built here from real aarch64 wheels of the test
cache, unpacked into site-packages over the tests' Debian image: A = base + one layer per wheel +
a mods layer, B = the same with another mods layer, what a rebuild that changed one mod gives;
``--image A --second B`` names two of yours). Each figure is one child process (start-up
included), on a warm page cache (one ``docker save`` of each image first, not counted):

- baseline: what a user does without edgevllm: ``docker export`` of a container of the image
  (its filesystem, every layer applied), each library taken from the stream (``tar
  --to-command``: one library on disk at a time, so a 10 GB image fits), ``readelf -S`` on it to
  find the ones with a ``.nv_fatbin`` section, ``cuobjdump --list-elf`` and ``--list-ptx`` on
  each;
- stream: ``verify`` through one ``docker save`` stream, every layer read (the road before the
  verify cache; the build's checks paid it on every build); with ``--no-save``, ``full``
  instead: every layer's whole tar replayed from the layer store and hashed against its diff id,
  the verify cache off (``EDGEVLLM_VERIFY_HASH_LAYERS=1``: the store road before it read the
  libraries alone; docker save makes the engine's legacy store write a copy of the image on its
  disk first: 10 GB);
- cold: ``verify`` with an empty verify cache (every layer read: from the layer store when the
  engine is local, its headers and its libraries alone);
- warm: ``verify`` of B after A (only B's own layers read);
- again: ``verify`` of A once more (every layer known).
Printed: seconds, ratios to the baseline of the same image, peak resident memory (VmHWM), the
layers read, and whether every road gave the same verdict.

    python bench/verify_image.py [--wheel torch==2.14.0 --wheel vllm==0.33.0] [--target spark]
                                 [--image A --second B] [--keep] [--no-save]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

SITE = "/usr/local/lib/python3.11/dist-packages"
CHILD = """
import json, sys, time
started = time.perf_counter()
import edgevllm.verify.api as api
from edgevllm.verify.readers import scan_image_stream
if sys.argv[3] == "stream":
    api.scan_image = lambda engine, ref, inspect: scan_image_stream(engine, ref, inspect)
verdict = api.verify(sys.argv[1], image=sys.argv[2])
seconds = time.perf_counter() - started
status = open("/proc/self/status").read()
peak = int(status.split("VmHWM:")[1].split()[0]) // 1024
reading = verdict.reading.to_json() if verdict.reading else None
print(json.dumps({"seconds": seconds, "peak_mib": peak, "reading": reading,
                  "verdict": verdict.to_json()}))
"""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", action="append", default=[])
    parser.add_argument("--target", default="spark")
    parser.add_argument("--image", help="the first image (default: built here)")
    parser.add_argument("--second", help="a second image sharing layers with --image")
    parser.add_argument("--keep", action="store_true", help="keep the images built here")
    parser.add_argument("--no-save", action="store_true",
                        help="no docker save (the engine's legacy store assembles a copy of the "
                             "image on its disk first): the full scans read the layer store with "
                             "the verify cache off instead of the old stream road")
    return parser.parse_args()


def build_images(engine, wheels: list[str], work: Path) -> tuple[str, str]:
    """A and B: the tests' Debian image, one COPY layer per unpacked wheel, one mods layer."""
    from edgevllm.containers.docker import BuildOptions
    from support.cuda_libs import real_wheel
    from support.images import python_image
    from support.platforms import native_arch

    contexts = {}
    for index, spec in enumerate(wheels):
        folder = work / f"wheel{index}"
        with zipfile.ZipFile(real_wheel(spec)) as archive:
            archive.extractall(folder)
        contexts[f"wheel{index}"] = str(folder)
    copies = "".join(f"COPY --from=wheel{i} / {SITE}/\n" for i in range(len(wheels)))
    run = uuid.uuid4().hex[:8]
    tags = []
    for which in ("a", "b"):
        context = work / f"context-{which}"
        context.mkdir()
        (context / "mod.py").write_text(f"# the mod of image {which}\nMOD = {which!r}\n")
        (context / "Dockerfile").write_text(f"FROM {python_image(engine, native_arch())}\n"
                                            f"{copies}COPY mod.py {SITE}/vllm/edgevllm_mod.py\n")
        tag = f"edgevllm-bench/verify-image:{which}-{run}"
        lines: list[str] = []
        options = BuildOptions(context=context, dockerfile=context / "Dockerfile", tags=[tag],
                               build_contexts=contexts)
        started = time.perf_counter()
        if engine.build(options, lines.append) != 0:
            raise SystemExit("building the bench image failed:\n" + "\n".join(lines[-20:]))
        print(f"built {tag} in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        tags.append(tag)
    return tags[0], tags[1]


def measured(argv: list[str], env: dict | None = None) -> tuple[float, str]:
    """(seconds, stdout) of one child process."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "NO_COLOR": "1", **(env or {})})
    out, err = proc.communicate()
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:3])}... failed:\n{err[-3000:]}")
    return seconds, out


BASELINE = r"""
set -euo pipefail
work=$(mktemp -d "${TMPDIR:-/tmp}/verify-baseline.XXXXXX")
container=""
trap 'rm -rf "$work"; [ -z "$container" ] || docker rm -f "$container" >/dev/null' EXIT
container=$(docker create "$1" true)
# The container's filesystem (every layer applied, deletions and overwrites counted) streamed
# once; each library lands in one temporary file, is checked and removed: the disk never holds
# the image (the engine's docker save assembles a whole copy on its own disk first).
export CUOBJDUMP="$2" WORK="$work"
docker export "$container" | tar -x --wildcards '*.so' '*.so.*' --to-command='
  lib="$WORK/lib"; cat > "$lib"
  if readelf -S -W "$lib" 2>/dev/null | grep -q "\.nv_fatbin"; then
    "$CUOBJDUMP" --list-elf "$lib" >/dev/null 2>&1 || true
    "$CUOBJDUMP" --list-ptx "$lib" >/dev/null 2>&1 || true
    echo found >> "$WORK/count"
  fi
  rm -f "$lib"'
wc -l < "$work/count" 2>/dev/null || echo 0
"""


def baseline(image: str, cuobjdump: Path) -> tuple[float, int]:
    """(seconds, libraries with device code) of the export + readelf + cuobjdump loop."""
    seconds, out = measured(["bash", "-c", BASELINE, "baseline", image, str(cuobjdump)])
    return seconds, int(out.split()[-1])


def verify_child(target: str, image: str, road: str, cache: Path) -> dict:
    env = {"EDGEVLLM_VERIFY_CACHE": str(cache), "PYTHONPATH": str(ROOT),
           **({"EDGEVLLM_VERIFY_CACHE_MAX": "0", "EDGEVLLM_VERIFY_HASH_LAYERS": "1"}
              if road == "full" else {})}
    _, out = measured([sys.executable, "-c", CHILD, target, image, road], env)
    return json.loads(out.splitlines()[-1])


def main() -> int:
    args = parse_args()
    from edgevllm.containers.docker import DockerEngine
    from support.cuda_libs import TORCH_214, VLLM_033, cuobjdump_binary

    engine = DockerEngine()
    work = Path(tempfile.mkdtemp(prefix="verify-image-bench-"))
    built = not args.image
    try:
        if built:
            first, second = build_images(engine, args.wheel or [TORCH_214, VLLM_033], work)
        else:
            first, second = args.image, args.second or args.image
        report(args.target, first, second, engine, cuobjdump_binary(), work, not args.no_save)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if built and not args.keep:
            for tag in (first, second):
                engine.remove_image(tag, force=True)
    return 0


def _layers_read(reading: dict | None) -> str:
    if not reading:
        return "all (one docker save stream)"
    roads = ", ".join(sorted(set(reading["read"].values()))) or "none read"
    return f"{len(reading['read'])} of {len(reading['layers'])} ({roads})"


def report(target: str, first: str, second: str, engine, cuobjdump: Path, work: Path,
           save: bool = True) -> None:
    full = "stream" if save else "full"  # the full scan every other road is compared with
    for image in dict.fromkeys((first, second)) if save else ():  # the page cache warm
        subprocess.run(f"docker save {image} > /dev/null", shell=True, check=True)
    cache = work / "verify-cache"
    load = os.getloadavg()[0]  # other jobs on the host inflate every time, the baseline most
    rows = {}
    rows["baseline A"] = baseline(first, cuobjdump)
    runs = {f"{full} A": (first, full), "cold A": (first, "layered"),
            "warm B": (second, "layered"), "again A": (first, "layered"),
            f"{full} B": (second, full)}
    results = {name: verify_child(target, image, road, cache)
               for name, (image, road) in runs.items()}
    rows["baseline B"] = baseline(second, cuobjdump)
    size = engine.image_inspect(first).get("Size", 0)
    print(f"image A {first}: {size / 1e9:.2f} GB, {len(results['cold A']['reading']['layers'])}"
          f" layers; B {second}; {rows['baseline A'][1]} libraries with .nv_fatbin; "
          f"target {target}")
    print(f"{'run':<12} {'seconds':>8} {'x baseline':>11} {'peak MiB':>9}  layers read")
    for name in ("baseline A", "baseline B"):
        print(f"{name:<12} {rows[name][0]:>8.1f} {1.0:>11.1f} {'-':>9}  (export + cuobjdump)")
    for name, result in results.items():
        base = rows["baseline A" if name.endswith("A") else "baseline B"][0]
        print(f"{name:<12} {result['seconds']:>8.1f} {base / result['seconds']:>11.1f} "
              f"{result['peak_mib']:>9}  {_layers_read(result['reading'])}")
    same_a = results[f"{full} A"]["verdict"] == results["cold A"]["verdict"] == \
        results["again A"]["verdict"]
    same_b = results[f"{full} B"]["verdict"] == results["warm B"]["verdict"]
    print(f"verdicts identical to the full scan ({full}): A {same_a}, B {same_b}")
    print(f"load average (1 min) at the start {load:.1f}, at the end {os.getloadavg()[0]:.1f}; "
          f"{os.cpu_count()} cores")
    print(f"goals (issue 34): warm >= 20x baseline: "
          f"{rows['baseline B'][0] / results['warm B']['seconds']:.1f}x; cold >= 2x: "
          f"{rows['baseline A'][0] / results['cold A']['seconds']:.1f}x")


if __name__ == "__main__":
    sys.exit(main())
