"""Bench: ``inv diff`` of two images, and the SBOM + signature of one, against reading an image.

Times, in this process, on the local engine:
  1. ``inv diff A B`` as the CLI runs it (labels, lock, layer list from the layer store or
     ``docker history``; markdown rendered), median of --repeat runs;
  2. the same with ``--installed`` (one short python3 per image);
  3. the baselines: ``docker image inspect`` of both (the floor: what any tool pays to ask the
     engine), and ``docker save A | sha256sum`` (what reading one image's bytes costs);
  4. ``inv sbom`` + ``inv sign`` of A (every installed distribution, the statement, Ed25519);
and prints the times and the ratios against the baselines.

Run: python bench/diff.py [IMAGE_A IMAGE_B] [--repeat N]
Without images it builds the two test images of tests/e2e/test_inspect_e2e.py (six 1.16.0 vs
1.17.0 from PyPI on the Debian test base; needs root for debootstrap the first time).
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from edgevllm.containers.docker import DockerEngine  # noqa: E402
from edgevllm.inspect import dsse, provenance  # noqa: E402
from edgevllm.inspect.diff import compare, markdown  # noqa: E402
from edgevllm.inspect.facts import read_facts  # noqa: E402
from edgevllm.inspect.sbom import installed_distributions  # noqa: E402
from edgevllm.inspect.supplychain import sign, view_of_image, write_sbom  # noqa: E402


def median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run_diff(engine: DockerEngine, a: str, b: str, installed: bool) -> None:
    sides = [read_facts(ref, engine) for ref in (a, b)]
    extra: dict[str, tuple[dict | None, dict | None]] = {}
    if installed:
        found = [{d["name"]: d["version"] for d in installed_distributions(engine, ref)}
                 for ref in (a, b)]
        extra["installed"] = (found[0], found[1])
    markdown(compare(sides[0], sides[1], extra))


def save_sha256(image: str) -> int:
    digest, total = hashlib.sha256(), 0
    with subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE) as proc:
        assert proc.stdout is not None
        while block := proc.stdout.read(1 << 20):
            digest.update(block)
            total += len(block)
    return total


def sbom_and_sign(engine: DockerEngine, image: str, folder: Path, key: Path) -> int:
    view = view_of_image(engine, image)
    stem = provenance.image_stem(folder, image)
    write_sbom(view, stem)
    sign(view, stem, key)
    return len(view.dists)


def default_images(engine: DockerEngine) -> tuple[str, str]:
    from support.images import python_image
    from support.inside_images import variant_image

    base = python_image(engine, "amd64")
    return variant_image(engine, base, "1.16.0", "1.0"), variant_image(engine, base, "1.17.0",
                                                                         "1.1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("images", nargs="*")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    engine = DockerEngine()
    a, b = args.images if len(args.images) == 2 else default_images(engine)
    size = int(engine.image_inspect(a).get("Size") or 0)
    print(f"A = {a} ({size / 2**30:.2f} GiB), B = {b}")
    diff_s = median_time(lambda: run_diff(engine, a, b, False), args.repeat)
    installed_s = median_time(lambda: run_diff(engine, a, b, True), args.repeat)
    inspect_s = median_time(lambda: [engine.image_inspect(r) for r in (a, b)], args.repeat)
    start = time.perf_counter()
    saved = save_sha256(a)
    save_s = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as tmp:
        key, _ = dsse.generate_key(Path(tmp) / "key.pem")
        sbom_s = median_time(lambda: sbom_and_sign(engine, a, Path(tmp), key), args.repeat)
        count = sbom_and_sign(engine, a, Path(tmp), key)
    print(f"docker image inspect A and B:   {inspect_s:7.2f} s")
    print(f"inv diff A B:                   {diff_s:7.2f} s  ({diff_s / inspect_s:.1f}x inspect)")
    print(f"inv diff A B --installed:       {installed_s:7.2f} s")
    print(f"docker save A | sha256sum:      {save_s:7.2f} s  ({saved / 2**30:.2f} GiB read)")
    print(f"  diff is {save_s / diff_s:.1f}x faster than reading one image once")
    print(f"inv sbom + inv sign A:          {sbom_s:7.2f} s  ({count} distributions; "
          f"{save_s / sbom_s:.1f}x faster than docker save A)")


if __name__ == "__main__":
    main()
