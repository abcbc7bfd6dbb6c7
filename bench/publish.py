"""Bench: ``inv publish`` (per-layer zstd, layer cache) vs ``docker save | gzip`` on real wheels.

Image (default): the Debian + Python test base with real PyPI wheels installed in one layer, as a
real vLLM image carries them (vllm 0.33.0, torch 2.13.0 CPU, triton, cuBLAS, cuDNN, cuSPARSELt,
cuFFT, cuSOLVER, cuSPARSE, nvJitLink, NVRTC: ~6 GB), built once and cached in the engine under a
tag keyed by its inputs. ``--image IMG`` measures any local image instead (e.g. a real vLLM one).

One run prints, each against the baseline ``docker save IMG | gzip -6`` run in the same process:
- cold: ``inv publish`` with an empty layer cache: layers read from the local engine's layer
  store when readable (root, local overlay2 engine), compressed per layer and cached by diff id
  while the set is written;
- cold via docker save: the same with the layer store off (what a non-root user gets);
- warm: the same publish again (a republish: every layer comes from the cache, no docker save);
- optional ``--also-prime``: ``inv publish --prime-cache`` alone (what a build would pay to make
  its first publish warm) and the publish after it;
- optional ``--also-plain``: the single-stream ``docker save | zstd`` path (``--no-layer-cache``).
Also the zstd window and the memory the loader needs, and the machine's load average (the CPU is
shared: quote medians of a few runs). Run: python bench/publish.py [--image IMG] [--runs N]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from edgevllm.containers.docker import BuildOptions, DockerEngine  # noqa: E402
from edgevllm.image.layercache import ZstdSettings  # noqa: E402
from edgevllm.image.progress import human  # noqa: E402
from edgevllm.image.publish import PublishOptions, prime_layer_cache, publish  # noqa: E402
from support.downloads import pypi_download  # noqa: E402
from support.images import cache_root, python_image  # noqa: E402

WHEELS = [
    "vllm==0.33.0",
    "torch==2.13.0",
    "triton==3.8.0",
    "nvidia-cublas==13.1.1.3",
    "nvidia-cudnn-cu13==9.24.0.43",
    "nvidia-cusparselt-cu13==0.8.1",
    "nvidia-cufft==12.0.0.61",
    "nvidia-cusolver==12.0.4.66",
    "nvidia-cusparse==12.6.3.3",
    "nvidia-nvjitlink==13.0.88",
    "nvidia-cuda-nvrtc==13.0.88",
]
PLATFORM_TAGS = [
    "manylinux_2_34_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux_2_12_x86_64",
]
DOCKERFILE = """FROM {base}
RUN --mount=type=bind,source=.,target=/wheels \\
    python3 -m pip install --no-deps --no-compile --break-system-packages /wheels/*.whl
"""


def bench_image(engine: DockerEngine) -> str:
    base = python_image(engine, "amd64")
    wheels = [pypi_download(spec, PLATFORM_TAGS, "3.11") for spec in WHEELS]
    key = hashlib.sha256(repr((base, [w.name for w in wheels], DOCKERFILE)).encode()).hexdigest()
    tag = f"edgevllm-test-publish-bench:{key[:10]}"
    if engine.image_exists(tag):
        return tag
    with tempfile.TemporaryDirectory(dir=cache_root(), prefix="bench-ctx-") as tmp:
        context = Path(tmp)
        for wheel in wheels:
            try:
                os.link(wheel, context / wheel.name)  # same filesystem: no 3 GB copy
            except OSError:
                shutil.copy2(wheel, context / wheel.name)
        (context / "Dockerfile").write_text(DOCKERFILE.format(base=base))
        lines: list[str] = []
        code = engine.build(
            BuildOptions(context=context, dockerfile=context / "Dockerfile", tags=[tag]),
            lines.append,
        )
        if code != 0:
            raise SystemExit("building the bench image failed:\n" + "\n".join(lines[-20:]))
    return tag


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run_gzip_pipe(image: str, out: Path, level: int) -> tuple[float, int]:
    out.mkdir(parents=True, exist_ok=True)
    target = out / "image.tar.gz"
    start = time.perf_counter()
    subprocess.run(
        [
            "bash",
            "-o",
            "pipefail",
            "-c",
            f'docker save "$1" | gzip -{level} > "$2"',
            "bench",
            image,
            str(target),
        ],
        check=True,
    )
    return time.perf_counter() - start, target.stat().st_size


def run_publish(
    engine: DockerEngine, image: str, out: Path, cache: Path, **options
) -> tuple[float, int, dict]:
    start = time.perf_counter()
    result = publish(
        engine, PublishOptions(image=image, out_dir=out, force=True, layer_cache=cache, **options)
    )
    return time.perf_counter() - start, result.manifest["total_size"], result.manifest


DECOMPRESS = """import resource, sys, time
from edgevllm.image.tarball import open_tarball
tarset = open_tarball(sys.argv[1]); start = time.perf_counter(); tarset.check(); n = 0
with tarset.tar_stream() as tar:
    while block := tar.read(1 << 20): n += len(block)
print(time.perf_counter() - start, n, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def measure_decompression(manifest: Path) -> tuple[float, int]:
    """Check + decompress the set in a fresh process: seconds and peak RSS (bytes)."""
    proc = subprocess.run(
        [sys.executable, "-c", DECOMPRESS, str(manifest)],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    seconds, _, rss_kib = proc.stdout.split()
    return float(seconds), int(rss_kib) * 1024


def one_run(engine: DockerEngine, image: str, args, tmp: Path) -> dict[str, tuple[float, int]]:
    rows: dict[str, tuple[float, int]] = {}
    print(f"  load average before: {load_average()}", flush=True)
    rows["baseline"] = run_gzip_pipe(image, tmp / "gzip", args.gzip_level)
    shutil.rmtree(tmp / "gzip")
    if not args.skip_via_save:
        rows["cold via save"] = run_publish(
            engine, image, tmp / "save", tmp / "save-cache", read_layer_store=False
        )[:2]
        shutil.rmtree(tmp / "save")
        shutil.rmtree(tmp / "save-cache")
    cache = tmp / "cache"
    seconds, size, manifest = run_publish(engine, image, tmp / "cold", cache)
    rows["cold"] = (seconds, size)
    shutil.rmtree(tmp / "cold")
    # The publishes ran in this process: its peak RSS bounds what compression needed.
    rows["_rss"] = (0.0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    rows["warm"] = run_publish(engine, image, tmp / "warm", cache)[:2]
    rows["decompress"] = measure_decompression(tmp / "warm" / f"{manifest['name']}.manifest.json")
    rows["_memory"] = (0.0, manifest["compression"]["decompression_memory"])
    rows["_cache"] = (0.0, sum(p.stat().st_size for p in cache.rglob("*") if p.is_file()))
    for name in ("warm", "cache"):
        shutil.rmtree(tmp / name)
    if args.also_prime:
        start = time.perf_counter()
        prime_layer_cache(engine, image, ZstdSettings(), tmp / "cache")
        rows["prime"] = (time.perf_counter() - start, 0)
        rows["after prime"] = run_publish(engine, image, tmp / "primed", tmp / "cache")[:2]
        shutil.rmtree(tmp / "primed")
        shutil.rmtree(tmp / "cache")
    if args.also_plain:
        rows["plain"] = run_publish(
            engine, image, tmp / "plain", tmp / "unused", use_layer_cache=False
        )[:2]
        shutil.rmtree(tmp / "plain")
    print(f"  load average after: {load_average()}", flush=True)
    return rows


LABELS = {
    "cold": "inv publish, cold (empty layer cache)",
    "cold via save": "  the same via docker save (non-root)",
    "warm": "inv publish, warm (republish)",
    "prime": "--prime-cache alone (build-time cost)",
    "after prime": "inv publish after --prime-cache",
    "plain": "inv publish --no-layer-cache",
}


def report(image_size: int, runs: list[dict[str, tuple[float, int]]], level: int) -> None:
    median = {
        key: (
            statistics.median(r[key][0] for r in runs),
            statistics.median(r[key][1] for r in runs),
        )
        for key in runs[0]
    }
    base_time, base_size = median["baseline"]
    print(f"\nmedians of {len(runs)} run(s); image {human(image_size)} uncompressed")
    print(f"{'method':40} {'time s':>8} {'size':>11} {'vs gzip time':>13} {'size ratio':>11}")
    print(
        f"{'docker save | gzip -' + str(level):40} {base_time:8.1f} {human(base_size):>11} "
        f"{'1.00x':>13} {'1.000':>11}"
    )
    for key, label in LABELS.items():
        if key not in median:
            continue
        seconds, size = median[key]
        size_text = human(size) if size else "-"
        ratio = f"{size / base_size:.3f}" if size else "-"
        print(f"{label:40} {seconds:8.1f} {size_text:>11} {base_time / seconds:12.2f}x {ratio:>11}")
    seconds, rss = median["decompress"]
    print(
        f"decompression memory stated in the manifest: {human(median['_memory'][1])}; "
        f"measured: check + decompress {seconds:.1f}s, peak RSS {human(rss)}"
    )
    print(
        f"layer cache after the cold publish: {human(median['_cache'][1])}; peak RSS of the "
        f"publishing process: {human(median['_rss'][1])}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", help="measure this local image (default: the bench image)")
    parser.add_argument("--runs", type=int, default=1, help="repeat and print medians")
    parser.add_argument("--gzip-level", type=int, default=6, help="gzip level (gzip's default 6)")
    parser.add_argument(
        "--also-prime",
        action="store_true",
        help="also time --prime-cache and the publish that follows it",
    )
    parser.add_argument(
        "--also-plain",
        action="store_true",
        help="also time the single-stream path (--no-layer-cache)",
    )
    parser.add_argument(
        "--skip-via-save",
        action="store_true",
        help="skip the cold publish through docker save (the non-root path; saves one pass "
        "over a big image)",
    )
    parser.add_argument("--build-only", action="store_true", help="build the bench image, stop")
    args = parser.parse_args()
    engine = DockerEngine()
    image = args.image or bench_image(engine)
    if args.build_only:
        print(image)
        return 0
    size = int(engine.image_inspect(image)["Size"])
    print(f"image {image}: {human(size)} uncompressed, {os.cpu_count()} CPUs")
    runs = []
    for number in range(args.runs):
        print(f"run {number + 1}/{args.runs}", flush=True)
        with tempfile.TemporaryDirectory(prefix="edgevllm-bench-publish-") as tmp:
            runs.append(one_run(engine, image, args, Path(tmp)))
        print(
            "  "
            + ", ".join(f"{k} {t:.1f}s" for k, (t, _) in runs[-1].items() if not k.startswith("_")),
            flush=True,
        )
    report(size, runs, args.gzip_level)
    return 0


if __name__ == "__main__":
    sys.exit(main())
