#!/usr/bin/env python3
"""Real vLLM images, prebuilt mode: build time cold and warm, size, verify, publish.

For each target (default: spark and thor, linux/arm64 — under qemu on an x86_64 host), through
the same ``build()`` as ``inv build --vllm-wheel``:
1. cold:  the closure resolved and its wheels fetched into a wheelhouse of its own (an empty
          EDGEVLLM_CACHE), the image built from an empty BuildKit cache for its steps (a salted
          base image tag would not help: the install step is keyed by the wheelhouse content,
          so cold means "this wheelhouse/base pair never built here");
2. warm:  the same build again (closure from the lock, wheels from the cache, layers cached);
3. the image size, the verify summary, and ``inv publish`` (time and bytes) from an empty layer
   cache (cold), then again (warm: every layer cached, no ``docker save``; what a publish after
   ``inv build --publish-cache`` costs).
Prints one table; the ratio warm/cold is the figure that matters for a re-run.

The base image must be local (no registry here): ``--base-image REF`` per run, else the tests'
Debian trixie + Python 3.13 image for the platform (debootstrap, cached).

    python bench/real_image.py [--target spark --target thor] [--platform linux/arm64]
                               [--base-image REF] [--vllm-wheel 0.33.0] [--keep]
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
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]
# The PyPI mirror here lags one pin: vllm 0.33.0 asks certifi>=2026.10.19 (see the e2e test).
CERTIFI = "certifi>=2026.10.18"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", action="append", default=[])
    parser.add_argument("--platform", default="linux/arm64")
    parser.add_argument("--base-image", default=None)
    parser.add_argument("--vllm-wheel", default="0.33.0")
    parser.add_argument("--override", action="append", default=[CERTIFI])
    parser.add_argument("--keep", action="store_true", help="keep the images and tarballs")
    return parser.parse_args()


def base_image(args, engine) -> tuple[str, str]:
    """(image, its python) for the run."""
    if args.base_image:
        return args.base_image, "python3.12"
    from support.real_vllm import PYTHON, trixie_python_image

    return trixie_python_image(engine, args.platform.split("/")[1]), PYTHON


def spec_for(target: str, args, base: str, python: str):
    from edgevllm.specs.buildspec import spec_from_dict

    # PyPI's torch 2.14.0 is the cu130 build; the target's torch index is unreachable here.
    return spec_from_dict({
        "target": target, "platform": args.platform, "vllm_wheel": args.vllm_wheel,
        "base_image": base, "python": python, "apt_packages": [], "overrides": args.override,
        "torch": {"version": "2.14.0", "index_url": None},
        "image_repo": f"edgevllm-bench/real-{target}"})


def timed(fn):
    started = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - started


def publish(image: str, out: Path) -> tuple[float, int]:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "from edgevllm.cli import main; main()", "publish",
                    "--image", image, "--out", str(out)], check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - started
    return seconds, sum(p.stat().st_size for p in out.iterdir() if p.is_file())


def _wheel_count(lock_path: Path) -> int:
    closure = (json.loads(lock_path.read_text()).get("closure") or {}).get("wheels") or []
    return len(closure)


def _emulator(platform: str) -> str:
    from edgevllm.containers.host import emulator_version, host_arch, platform_arch

    if platform_arch(platform) == host_arch():
        return "native"
    version = emulator_version(platform)
    return f"qemu {version[0]}.{version[1]}" if version else "qemu (version unknown)"


def one_target(target: str, args, engine, base: str, python: str, work: Path) -> dict:
    from edgevllm.builder.pipeline import build

    spec = spec_for(target, args, base, python)
    cold, cold_s = timed(lambda: build(spec, work / "out", engine))
    warm, warm_s = timed(lambda: build(spec, work / "out", engine, lock_path=cold.lock_path))
    size = int(engine.image_inspect(cold.image)["Size"])
    os.environ["EDGEVLLM_LAYER_CACHE"] = str(work / "layers")  # cold: no layer compressed yet
    publish_s, publish_bytes = publish(cold.image, work / f"pub-{target}")
    shutil.rmtree(work / f"pub-{target}")
    republish_s, _ = publish(cold.image, work / f"pub-{target}")
    row = {"target": target, "platform": args.platform, "cold_s": round(cold_s, 1),
           "warm_s": round(warm_s, 1), "warm_over_cold": round(warm_s / cold_s, 3),
           "image_bytes": size, "verify": (cold.verify or {}).get("summary"),
           "probe": (cold.probe or {}).get("summary"), "publish_s": round(publish_s, 1),
           "publish_bytes": publish_bytes, "republish_s": round(republish_s, 1),
           "wheels": _wheel_count(cold.lock_path), "emulator": _emulator(args.platform),
           "image": cold.image}
    if not args.keep:
        for tag in set(cold.tags + warm.tags):
            subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)
    return row


def main() -> int:
    args = parse_args()
    from edgevllm.containers.docker import DockerEngine

    engine = DockerEngine()
    base, python = base_image(args, engine)
    rows = []
    for target in args.target or ["spark", "thor"]:
        with tempfile.TemporaryDirectory(prefix=f"edgevllm-real-{target}-") as tmp:
            os.environ["EDGEVLLM_CACHE"] = str(Path(tmp) / "cache")   # cold: a new wheelhouse
            rows.append(one_target(target, args, engine, base, python, Path(tmp)))
        print(json.dumps(rows[-1]), flush=True)
    print(f"{'target':8} {'platform':12} {'cold s':>8} {'warm s':>8} {'warm/cold':>9} "
          f"{'image GB':>9} {'publish s':>9} {'again s':>8} {'tar GB':>7}  verify")
    for r in rows:
        print(f"{r['target']:8} {r['platform']:12} {r['cold_s']:8.1f} {r['warm_s']:8.1f} "
              f"{r['warm_over_cold']:9.3f} {r['image_bytes'] / 1e9:9.2f} {r['publish_s']:9.1f} "
              f"{r['republish_s']:8.1f} "
              f"{r['publish_bytes'] / 1e9:7.2f}  {r['emulator']}; {r['verify']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
