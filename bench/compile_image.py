#!/usr/bin/env python3
"""The compile mode's image, measured against the prebuilt image of the same release.

A real compile of vLLM cannot run everywhere (its CMake dependencies come from GitHub; it takes
hours), but the compile mode has a road that compiles nothing: the compiled wheels of this
build's compile key are already in ``out/<target>/wheels/<key>/``. This bench takes that road
through the same ``build()`` as ``inv build``, for the host's own platform (no emulation):

1. **prebuilt** (the baseline): ``--vllm-wheel 0.33.0``, the released wheel and its closure;
2. the **compile** of the real vLLM 0.33.0 tree (PyPI's sdist made into a git repository with
   the tag v0.33.0, as the e2e tests do), prepared as ``build()`` prepares it, which gives its
   compile key; the released vLLM wheel for the same platform (from the baseline's lock, fetched
   by sha256) is put into ``wheels/<key>/`` as a **stand-in** for the compiled wheel;
3. that compile build: ``build()`` finds its wheels, compiles nothing, and builds the compile
   mode's one runtime stage: the tree's closure by sha256 on the target's runtime base, the wheel
   over it with ``--no-deps``, the mods.

It prints each image's size, bytes per layer and shadowed bytes (the build summary's ``layers``)
and the compile image against the prebuilt one. The stand-in carries upstream's arch list; a
compile for 12.1a / 11.0a alone carries fewer kernels, so the vLLM layer's figure is an upper
bound. Also not the real compile's: the repositories the tree's CMake clones (GitHub, unreachable
where this ran) are not fetched, so the key hashes the tree without them; they feed the compile
stage only, never the runtime image. verify is off in both builds: the compile gate refuses the
stand-in's stock kernels, as it must.

The base must be local (no registry here): the tests' Debian trixie image with Python 3.13 for
the host's platform. It needs about 20 GB free (two images of about 10 GB whose closures differ
by the vLLM wheel); the wheelhouse is ``$EDGEVLLM_CACHE`` (4.3 GB when it starts empty).

    python bench/compile_image.py [--target spark] [--keep]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]
VLLM = "0.33.0"
# The PyPI mirror here lags one pin: vllm 0.33.0 asks certifi>=2026.10.19 (see the e2e tests).
CERTIFI = "certifi>=2026.10.18"
STAND_IN = ("stand-in for the compiled wheel: PyPI's vllm {version} ({file}, sha256 {sha}…), "
            "upstream's arch list; a compile for the target's arch alone carries fewer kernels, "
            "so its layer is an upper bound")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="spark")
    parser.add_argument("--override", action="append", default=[CERTIFI])
    parser.add_argument("--keep", action="store_true", help="keep the images")
    return parser.parse_args()


def common_spec(args, platform: str, base: str, python: str, which: str) -> dict:
    # PyPI's torch 2.14.0 is the cu130 build; the target's torch index is unreachable here.
    return {"target": args.target, "platform": platform, "base_image": base,
            "bytecode_image": base, "python": python, "apt_packages": [],
            "overrides": args.override, "torch": {"version": "2.14.0", "index_url": None},
            "verify": False, "image_repo": f"edgevllm-compilesize/{which}-{args.target}"}


def row_of(which: str, result, engine, seconds: float) -> dict:
    layers = result.layers or {}
    return {"mode": which, "image": result.image, "tags": result.tags,
            "compiled": result.compiled, "total_s": round(seconds, 1),
            "image_s": result.image_seconds, "wheels_dir": str(result.wheels_dir),
            "image_bytes": int(engine.image_inspect(result.image)["Size"]),
            "layer_bytes": layers.get("total_bytes"),
            "shadowed_bytes": layers.get("shadowed_bytes"),
            "layers": layers.get("layers", [])}


def prebuilt(args, engine, images: tuple[str, str, str], out: Path) -> tuple[dict, object]:
    """The baseline, and the released vLLM wheel's pin from its lock."""
    from edgevllm.builder.pipeline import build
    from edgevllm.sources.wheels import Closure
    from edgevllm.specs.buildspec import spec_from_dict
    from edgevllm.specs.lock import read_lock

    spec = spec_from_dict({**common_spec(args, *images, "prebuilt"), "vllm_wheel": VLLM})
    started = time.perf_counter()
    result = build(spec, out, engine)
    row = row_of("prebuilt", result, engine, time.perf_counter() - started)
    closure = read_lock(result.lock_path).closure
    pin = Closure.from_dict(closure.model_dump()).pin("vllm") if closure else None
    if pin is None:
        raise SystemExit(f"{result.lock_path}: the prebuilt lock holds no vllm wheel")
    return row, pin


def compile_spec(args, images: tuple[str, str, str], upstream):
    from edgevllm.specs.buildspec import spec_from_dict

    return spec_from_dict({**common_spec(args, *images, "compile"),
                           "vllm": {"repo": upstream.url, "ref": f"v{VLLM}"}})


def no_cmake_deps(tree, job):
    """In place of ``modes.compile.with_cmake_deps``: the CMake dependencies are not fetched
    (GitHub), an empty ``cmake-deps`` context instead; only the compile stage reads it."""
    import dataclasses

    from edgevllm.sources.cmakedeps import empty_deps_dir

    return dataclasses.replace(tree, deps_dir=empty_deps_dir(job.ws.root / "deps"))


def never_compile(runner, options, dest: Path) -> bool:
    """In place of the tail's ``export_wheels``: the stand-in must be found; a build that would
    compile here has a compile key other than the one the stand-in was put under (a bug)."""
    from edgevllm.builder.runner import export_wheels

    if not any(dest.glob("*.whl")):
        raise SystemExit(f"the compile build looks for its wheels in {dest}, not where the "
                         "bench put them: the compile key changed between two preparations")
    return export_wheels(runner, options, dest)


def place_stand_in(args, engine, images, upstream, pin, out: Path) -> str:
    """Prepare the compile as ``build()`` does (its mode by the same rule), learn its key, and
    put the released wheel (fetched by sha256) into the key's wheels folder."""
    from edgevllm.builder import modes
    from edgevllm.builder.runner import Workspace
    from edgevllm.sources.wheelhouse import Wheelhouse
    from edgevllm.specs.buildspec import resolve

    spec = compile_spec(args, images, upstream)
    builder = modes.builder_of(engine, resolve(spec).target)
    job = modes.start(spec, Workspace(out / args.target), engine, None, builder=builder)
    if job.eff.mode != "compile":
        raise SystemExit(f"the mode rule chose {job.eff.mode} ({job.eff.mode_reason}), "
                         "not compile: run this bench on a native builder")
    prepared = modes.prepare(job)
    key = prepared.compile_key
    if key is None:
        raise SystemExit("the compile build has no compile key")
    wheelhouse = Wheelhouse()
    wheelhouse.fetch([pin])
    folder = job.ws.wheels(key)
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(wheelhouse.path_for(pin), folder / pin.filename)
    print(STAND_IN.format(version=pin.version, file=pin.filename, sha=pin.sha256[:12]),
          flush=True)
    print(f"compile key {key}: {folder / pin.filename}", flush=True)
    return prepared.contexts["wheelhouse"]


def compile_build(args, engine, images, upstream, baseline: dict, pin, out: Path) -> dict:
    from edgevllm.builder import tail
    from edgevllm.builder.modes import compile as compile_mode
    from edgevllm.builder.pipeline import build

    compile_mode.with_cmake_deps = no_cmake_deps  # type: ignore[assignment]
    tail.export_wheels = never_compile  # type: ignore[assignment]
    context = place_stand_in(args, engine, images, upstream, pin, out)
    shared = context == baseline["wheels_dir"]
    print(f"closure layers shared with the prebuilt image: {'yes' if shared else 'no'} "
          f"(closure context {Path(context).name}, prebuilt's {Path(baseline['wheels_dir']).name})",
          flush=True)
    started = time.perf_counter()
    result = build(compile_spec(args, images, upstream), out, engine)
    row = row_of("compile", result, engine, time.perf_counter() - started)
    if result.compiled:
        raise SystemExit("the compile build compiled: the wheel-reuse road was not taken")
    return row


def drop_mirror(url: str) -> None:
    """The git cache's mirror of this run's temporary upstream (the build made it; no later
    build can use it)."""
    from edgevllm.sources.gitcache import GitMirror

    mirror = GitMirror(url).path
    shutil.rmtree(mirror, ignore_errors=True)
    mirror.with_name(mirror.name + ".lock").unlink(missing_ok=True)


def print_rows(rows: list[dict]) -> None:
    for row in rows:
        print(f"{row['mode']}: {row['image']}, {len(row['layers'])} layers")
        for layer in row["layers"]:
            shadow = (f" ({layer['shadowed_bytes']:,} B shadowed)"
                      if layer["shadowed_bytes"] else "")
            print(f"  {layer['bytes']:>15,} B{shadow}  {layer['step'][:90]}")
    print(f"{'mode':9} {'image B':>15} {'layers B':>15} {'layers':>6} {'shadowed B':>11} "
          f"{'image s':>8} {'total s':>8}")
    for row in rows:
        print(f"{row['mode']:9} {row['image_bytes']:15,} {row['layer_bytes'] or 0:15,} "
              f"{len(row['layers']):6d} {row['shadowed_bytes'] or 0:11,} "
              f"{row['image_s'] or 0:8.1f} {row['total_s']:8.1f}")
    base, other = rows[0], rows[-1]
    if len(rows) == 2:
        print(f"compile / prebuilt: image {other['image_bytes'] / base['image_bytes']:.3f}x, "
              f"layers {(other['layer_bytes'] or 0) / (base['layer_bytes'] or 1):.3f}x")


def main() -> int:
    args = parse_args()
    from edgevllm.containers.docker import DockerEngine
    from edgevllm.containers.host import host_arch
    from support.real_vllm import PYTHON, trixie_python_image
    from support.sdists import release_upstream

    engine = DockerEngine()
    arch = host_arch()
    images = (f"linux/{arch}", trixie_python_image(engine, arch), PYTHON)
    rows: list[dict] = []
    try:
        with tempfile.TemporaryDirectory(prefix="edgevllm-compile-image-") as tmp:
            work = Path(tmp)
            upstream, _ = release_upstream(work / "upstream", "vllm", VLLM)
            try:
                row, pin = prebuilt(args, engine, images, work / "prebuilt")
                rows.append(row)
                rows.append(compile_build(args, engine, images, upstream, row, pin,
                                          work / "compile"))
            finally:
                drop_mirror(upstream.url)
    finally:
        print(json.dumps([{k: v for k, v in r.items() if k != "layers"} for r in rows]))
        if rows:
            print_rows(rows)
        if not args.keep:
            for tag in [t for r in rows for t in r["tags"]]:
                engine.run_cli(["rmi", "-f", tag], timeout=300)
    return 0


if __name__ == "__main__":
    sys.exit(main())
