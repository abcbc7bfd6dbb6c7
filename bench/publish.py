"""Bench: ``inv publish`` (docker save → multi-threaded zstd, sha256 while streaming) vs
``docker save | gzip`` on an image of realistic content.

Image: the Debian + Python test base plus the real torch 2.13.0 CPU wheel and NVIDIA's cuBLAS 13
wheel installed into it (shared libraries, Python code: ~1.8 GB), built once and cached in the
engine under a tag keyed by its inputs. Each contender writes into a fresh folder; the script
prints wall time, output size, throughput and the ratios, plus the bytes left on disk (the
compressed output only: nothing uncompressed is ever written). Run: python bench/publish.py
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from edgevllm.engine.docker import BuildOptions, DockerEngine
from edgevllm.image.publish import PublishOptions, human, publish
from support.downloads import pypi_download  # noqa: E402
from support.images import cache_root, python_image  # noqa: E402

WHEELS = ["torch==2.13.0", "nvidia-cublas==13.1.1.3"]
DOCKERFILE = """FROM {base}
RUN --mount=type=bind,source=.,target=/wheels \\
    python3 -m pip install --no-deps --no-compile --break-system-packages /wheels/*.whl
"""


def bench_image(engine: DockerEngine) -> str:
    base = python_image(engine, "amd64")
    wheels = [pypi_download(spec) for spec in WHEELS]
    key = hashlib.sha256(repr((base, [w.name for w in wheels], DOCKERFILE)).encode()).hexdigest()
    tag = f"edgevllm-test-publish-bench:{key[:10]}"
    if engine.image_exists(tag):
        return tag
    with tempfile.TemporaryDirectory(dir=cache_root(), prefix="bench-ctx-") as tmp:
        context = Path(tmp)
        for wheel in wheels:
            shutil.copy2(wheel, context / wheel.name)
        (context / "Dockerfile").write_text(DOCKERFILE.format(base=base))
        lines: list[str] = []
        code = engine.build(BuildOptions(context=context, dockerfile=context / "Dockerfile",
                                         tags=[tag]), lines.append)
        if code != 0:
            raise SystemExit("building the bench image failed:\n" + "\n".join(lines[-20:]))
    return tag


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run_publish(engine: DockerEngine, image: str, out: Path, fmt: str) -> tuple[float, int]:
    start = time.perf_counter()
    result = publish(engine, PublishOptions(image=image, out_dir=out, format=fmt, force=True))
    return time.perf_counter() - start, result.manifest["total_size"]


def run_gzip_pipe(image: str, out: Path, level: int) -> tuple[float, int]:
    out.mkdir(parents=True, exist_ok=True)
    target = out / "image.tar.gz"
    start = time.perf_counter()
    subprocess.run(["bash", "-o", "pipefail", "-c",
                    f'docker save "$1" | gzip -{level} > "$2"', "bench", image, str(target)],
                   check=True)
    return time.perf_counter() - start, target.stat().st_size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gzip-level", type=int, default=6, help="gzip level (gzip's default 6)")
    parser.add_argument("--also-gz", action="store_true", help="also time inv publish --format gz")
    args = parser.parse_args()
    engine = DockerEngine()
    image = bench_image(engine)
    size = engine.image_inspect(image)["Size"]
    print(f"image {image}: {human(size)} uncompressed")
    rows = []
    with tempfile.TemporaryDirectory(prefix="edgevllm-bench-publish-") as tmp:
        tmp = Path(tmp)
        seconds, out_size = run_gzip_pipe(image, tmp / "gzip", args.gzip_level)
        rows.append((f"docker save | gzip -{args.gzip_level}", seconds, out_size,
                     folder_bytes(tmp / "gzip")))
        shutil.rmtree(tmp / "gzip")
        seconds, out_size = run_publish(engine, image, tmp / "zst", "zst")
        rows.append(("inv publish (zstd -3, threads)", seconds, out_size, folder_bytes(tmp / "zst")))
        shutil.rmtree(tmp / "zst")
        if args.also_gz:
            seconds, out_size = run_publish(engine, image, tmp / "gz", "gz")
            rows.append(("inv publish --format gz", seconds, out_size, folder_bytes(tmp / "gz")))
    print(f"{'method':34} {'time s':>8} {'size':>11} {'MiB/s in':>9} {'ratio':>6} {'on disk':>11}")
    for name, seconds, out_size, disk in rows:
        print(f"{name:34} {seconds:8.1f} {human(out_size):>11} {size / seconds / 2**20:9.1f} "
              f"{size / out_size:6.2f} {human(disk):>11}")
    base_time, base_size = rows[0][1], rows[0][2]
    for name, seconds, out_size, _ in rows[1:]:
        print(f"{name}: {base_time / seconds:.2f}x faster, {out_size / base_size:.3f}x the size "
              f"of docker save | gzip ({(1 - out_size / base_size) * 100:.1f}% smaller)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
