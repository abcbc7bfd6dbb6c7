#!/usr/bin/env python3
"""Real vLLM images, prebuilt mode: a cold build, the image part of it, a second target after it.

Through the same ``build()`` as ``inv build --vllm-wheel 0.33.0``, for linux/arm64 (under qemu on
an x86_64 host; the emulator is recorded):
1. the first target (spark), **cold**: the closure resolved and its wheels fetched into an empty
   wheelhouse (a new EDGEVLLM_CACHE), the image built on a base no build of this machine has
   used (the test base re-committed with a label of this run: a new image id, so no BuildKit
   step is cached). ``total s`` is all of it (resolve, download, image, verify, probe);
   ``image s`` the BuildKit build of the image alone: what a build from a warm wheelhouse costs,
   as the wheels are all on the host before BuildKit starts;
2. every further target (thor) **after** the first, on the same base and wheelhouse: the same
   closure shares its install layers, so ``image s`` is the target's own steps;
3. each image's bytes per layer and bytes shadowed by a later layer (the build summary's), and
   with ``--publish`` ``inv publish`` from an empty layer cache.
The goals of issue 22 are printed beside: the first image at most 300 s from a warm wheelhouse,
a second target at most 60 s more, a cold build at most 600 s.

The base image must be local (no registry here): the tests' Debian images, one per platform
(``--base bookworm``: Python 3.11, the images the e2e tests build; ``trixie``: Python 3.13), the
build platform's one being where the closure's byte-code is compiled.

    python bench/real_image.py [--target spark --target thor] [--platform linux/arm64]
                               [--base bookworm|trixie] [--vllm-wheel 0.33.0] [--no-verify]
                               [--publish] [--keep]
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
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]
# The PyPI mirror here lags one pin: vllm 0.33.0 asks certifi>=2026.10.19 (see the e2e test).
CERTIFI = "certifi>=2026.10.18"
GOALS = {"first_image_s": 300, "after_image_s": 60, "cold_total_s": 600}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", action="append", default=[])
    parser.add_argument("--platform", default="linux/arm64")
    parser.add_argument("--base", choices=("bookworm", "trixie"), default="bookworm")
    parser.add_argument("--vllm-wheel", default="0.33.0")
    parser.add_argument("--override", action="append", default=[CERTIFI])
    parser.add_argument("--no-verify", action="store_true", help="skip verify and the probe")
    parser.add_argument("--publish", action="store_true", help="time inv publish too")
    parser.add_argument("--keep", action="store_true", help="keep the images")
    return parser.parse_args()


def base_images(args, engine) -> tuple[str, str, str]:
    """(the target platform's base, the build platform's twin, their python)."""
    from edgevllm.containers.host import host_arch

    arch, build_arch = args.platform.split("/")[1], host_arch()
    if args.base == "trixie":
        from support.real_vllm import PYTHON, trixie_python_image

        return trixie_python_image(engine, arch), trixie_python_image(engine, build_arch), PYTHON
    from support.images import python_image

    return python_image(engine, arch), python_image(engine, build_arch), "python3.11"


def salted(engine, ref: str, run: str, which: str) -> str:
    """``ref`` re-committed with this run's label: the same files, a new image id."""
    name = f"edgevllm-bench-salt-{which}-{run}"
    tag = f"edgevllm-bench/base-{which}:{run}"
    engine.run_cli(["create", "--name", name, ref, "true"], timeout=120)
    try:
        proc = engine.run_cli(["commit", "--change", f"LABEL io.edgevllm.bench-run={run}",
                               name, tag], timeout=300)
        if proc.returncode != 0:
            raise SystemExit(f"docker commit {ref}: {proc.stderr.decode(errors='replace')}")
    finally:
        engine.run_cli(["rm", "-f", name], timeout=120)
    return tag


def spec_for(target: str, args, base: str, twin: str, python: str):
    from edgevllm.specs.buildspec import spec_from_dict

    # PyPI's torch 2.14.0 is the cu130 build; the target's torch index is unreachable here.
    return spec_from_dict({
        "target": target, "platform": args.platform, "vllm_wheel": args.vllm_wheel,
        "base_image": base, "bytecode_image": twin, "python": python, "apt_packages": [],
        "overrides": args.override, "torch": {"version": "2.14.0", "index_url": None},
        "verify": not args.no_verify, "image_repo": f"edgevllm-bench/real-{target}"})


def publish(image: str, out: Path) -> tuple[float, int]:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "from edgevllm.cli import main; main()", "publish",
                    "--image", image, "--out", str(out)], check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - started
    return seconds, sum(p.stat().st_size for p in out.iterdir() if p.is_file())


def emulator(platform: str) -> str:
    from edgevllm.containers.host import emulator_version, host_arch, platform_arch

    if platform_arch(platform) == host_arch():
        return "native"
    version = emulator_version(platform)
    return f"qemu {version[0]}.{version[1]}" if version else "qemu (version unknown)"


def one_build(target: str, case: str, args, engine, images, work: Path) -> dict:
    from edgevllm.builder.pipeline import build

    started = time.perf_counter()
    result = build(spec_for(target, args, *images), work / "out", engine)
    total = time.perf_counter() - started
    layers = result.layers or {}
    row = {"target": target, "case": case, "platform": args.platform,
           "total_s": round(total, 1), "image_s": result.image_seconds,
           "image_bytes": int(engine.image_inspect(result.image)["Size"]),
           "layers": len(layers.get("layers", [])), "layer_bytes": layers.get("total_bytes"),
           "shadowed_bytes": layers.get("shadowed_bytes"),
           "verify": (result.verify or {}).get("summary"),
           "probe": (result.probe or {}).get("summary"), "emulator": emulator(args.platform),
           "image": result.image, "tags": result.tags}
    if args.publish:
        os.environ["EDGEVLLM_LAYER_CACHE"] = str(work / "layers")  # no layer compressed yet
        row["publish_s"], row["publish_bytes"] = publish(result.image, work / f"pub-{target}")
        shutil.rmtree(work / f"pub-{target}")
    return row


def goals(rows: list[dict]) -> list[str]:
    first, after = rows[0], rows[1:]
    lines = [f"first image ({first['target']}, warm wheelhouse): {first['image_s']} s, "
             f"{first['image_s'] / GOALS['first_image_s']:.2f}x the goal of "
             f"{GOALS['first_image_s']} s",
             f"cold build ({first['target']}, all of it): {first['total_s']} s, "
             f"{first['total_s'] / GOALS['cold_total_s']:.2f}x the goal of "
             f"{GOALS['cold_total_s']} s"]
    lines += [f"{r['target']} after {first['target']}: image {r['image_s']} s, "
              f"{r['image_s'] / GOALS['after_image_s']:.2f}x the goal of "
              f"{GOALS['after_image_s']} s" for r in after]
    return lines


def main() -> int:
    args = parse_args()
    from edgevllm.containers.docker import DockerEngine

    engine = DockerEngine()
    base, twin, python = base_images(args, engine)
    run = uuid.uuid4().hex[:8]
    images = (salted(engine, base, run, "target"), salted(engine, twin, run, "build"), python)
    rows: list[dict] = []
    try:
        with tempfile.TemporaryDirectory(prefix="edgevllm-real-") as tmp:
            os.environ["EDGEVLLM_CACHE"] = str(Path(tmp) / "cache")   # cold: a new wheelhouse
            for index, target in enumerate(args.target or ["spark", "thor"]):
                case = "cold" if index == 0 else f"after {rows[0]['target']}"
                rows.append(one_build(target, case, args, engine, images, Path(tmp)))
                print(json.dumps(rows[-1]), flush=True)
    finally:
        if not args.keep:
            for tag in [t for r in rows for t in r["tags"]] + list(images[:2]):
                engine.run_cli(["rmi", "-f", tag], timeout=300)
    print(f"{'target':8} {'case':12} {'total s':>8} {'image s':>8} {'image GB':>9} "
          f"{'layers':>6} {'shadowed GB':>11}  emulator; verify")
    for r in rows:
        print(f"{r['target']:8} {r['case']:12} {r['total_s']:8.1f} {r['image_s']:8.1f} "
              f"{r['image_bytes'] / 1e9:9.2f} {r['layers']:6d} "
              f"{(r['shadowed_bytes'] or 0) / 1e9:11.3f}  {r['emulator']}; {r['verify']}")
    for line in goals(rows):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
