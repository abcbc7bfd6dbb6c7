"""Bench: ``inv load`` of an update (an image whose base the engine already holds) against the
same load sending every layer (``--every-layer``, what ``inv load`` did before it left held layers
out), in one process.

Image: ``--image IMG`` (default: the ~6 GB image bench/publish.py builds from real PyPI wheels,
which it makes and caches), and an update of it: IMG plus one 1 MB layer, built here. The update
is published once (``inv publish``, layer cache off), removed from the engine, then loaded: N
times with every layer, N times as an update (the base image stays in the engine throughout), the
update removed before each load. Printed: each way's median seconds, the bytes docker load was
sent (what it unpacks into its temporary folder before it makes a layer) and the ratios. The CPU
and disk are shared: quote medians, with the load average printed.
Run: python bench/load_update.py [--image IMG] [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from edgevllm.containers.docker import BuildOptions, DockerEngine  # noqa: E402
from edgevllm.image.load import load  # noqa: E402
from edgevllm.image.publish import PublishOptions, publish  # noqa: E402
from edgevllm.image.tarball import open_tarball  # noqa: E402


def update_of(engine: DockerEngine, base: str, folder: Path) -> str:
    """``base`` plus one layer of 1 MB of random bytes (a new image id each run)."""
    (folder / "extra").write_bytes(os.urandom(1 << 20))
    (folder / "Dockerfile").write_text(f"FROM {base}\nCOPY extra /opt/extra\n")
    tag = f"edgevllm-bench-update:{os.urandom(4).hex()}"
    lines: list[str] = []
    if engine.build(BuildOptions(context=folder, dockerfile=folder / "Dockerfile", tags=[tag]),
                    lines.append) != 0:
        raise SystemExit("building the update failed:\n" + "\n".join(lines[-20:]))
    return tag


def timed_load(engine: DockerEngine, image: str, manifest: Path, every_layer: bool) -> float:
    engine.remove_image(image, force=True)
    start = time.perf_counter()
    result = load(engine, manifest, every_layer=every_layer)
    seconds = time.perf_counter() - start
    if result.loaded != [image]:
        raise SystemExit(f"the load gave {result.loaded}, not {image}")
    return seconds


def sent_bytes(manifest: Path, engine: DockerEngine, every_layer: bool) -> int:
    from edgevllm.image.loadskip import held_chains, layers_to_skip

    tarset = open_tarball(manifest)
    tarset.check_contents()
    shape = tarset.archive
    assert shape is not None
    if every_layer:
        return shape.unpacked
    skip = layers_to_skip(shape.layers, shape.diff_ids, shape.sizes,
                          held_chains(engine.image_layer_lists()))
    return shape.unpacked - skip.bytes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", help="a local image to update (default: bench/publish.py's)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    engine = DockerEngine()
    if args.image:
        base = args.image
    else:
        sys.path.insert(0, str(ROOT / "bench"))
        from publish import bench_image  # bench/publish.py's image, built once and cached

        base = bench_image(engine)
    with tempfile.TemporaryDirectory(prefix="edgevllm-bench-load-") as tmp:
        folder = Path(tmp)
        image = update_of(engine, base, folder)
        try:
            result = publish(engine, PublishOptions(image=image, out_dir=folder / "set",
                                                    use_layer_cache=False))
            manifest = result.manifest_path
            full_bytes = sent_bytes(manifest, engine, every_layer=True)
            update_bytes = sent_bytes(manifest, engine, every_layer=False)
            full = [timed_load(engine, image, manifest, True) for _ in range(args.runs)]
            update = [timed_load(engine, image, manifest, False) for _ in range(args.runs)]
        finally:
            engine.remove_image(image, force=True)
    full_s, update_s = statistics.median(full), statistics.median(update)
    print(f"image {base} + 1 MB layer; load average {os.getloadavg()[0]:.1f}; {args.runs} runs")
    print(f"every layer (baseline): {full_s:7.1f} s  sent {full_bytes / 1e9:6.2f} GB")
    print(f"update (held left out): {update_s:7.1f} s  sent {update_bytes / 1e9:6.2f} GB")
    print(f"ratio: {full_s / update_s:.1f}x the baseline's speed; docker load unpacks "
          f"{(full_bytes - update_bytes) / 1e9:.2f} GB less into its temporary folder")
    return 0


if __name__ == "__main__":
    sys.exit(main())
