#!/usr/bin/env python3
"""What ``--aot`` adds to a build, against the same build without it, in the same process.

The build is the real vLLM 0.33.0 prebuilt image for spark on linux/amd64 (the closure resolved
with uv and cached in the wheelhouse, as tests/e2e/test_aot_e2e.py builds it):

0. prime: the build without --aot and without checks, untimed, so that both timed builds find
          the closure's layers in BuildKit's cache (seconds when they already are);
1. plain: the build without --aot;
2. warm:  the same build with --aot and the shipped tiny Llama config (head_dim 64: the FA2
          batch-prefill module and the sampler), under a new file name each run, so the plan
          differs and the AOT step really runs FlashInfer's JIT (nothing is reused).

Prints both wall times, the ratio aot/plain, and the AOT step's own seconds (its record).

    python bench/aot_build.py [--config PATH] [--no-verify]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]
TINY = REPO / "tests" / "fixtures" / "model-configs" / "tiny-llama.json"


def spec_fields(base: str, verify: bool) -> dict:
    return {"target": "spark", "platform": "linux/amd64", "python": "python3.13",
            "apt_packages": [], "torch": {"version": "2.14.0", "index_url": None},
            "mode": "prebuilt", "vllm_wheel": "0.33.0", "base_image": base,
            "overrides": ["certifi>=2026.10.18"], "image_repo": "edgevllm-bench/warm",
            "verify": verify}


def timed_build(fields: dict, out: Path, engine):
    from edgevllm.builder.pipeline import build
    from edgevllm.specs.buildspec import spec_from_dict

    started = time.perf_counter()
    result = build(spec_from_dict(fields), out, engine)
    return result, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=TINY, help="a model's config.json")
    parser.add_argument("--no-verify", action="store_true", help="both builds without checks")
    args = parser.parse_args()

    import os

    from edgevllm.containers.docker import DockerEngine
    from support.downloads import test_cache_dir
    from support.real_vllm import trixie_python_image

    os.environ.setdefault("EDGEVLLM_CACHE", str(test_cache_dir("edgevllm-cache")))
    # Both builds reuse the cached closure layers: they need a few GB, not the prebuilt
    # default's margin (as the end-to-end tests set it, tests/e2e/conftest.py).
    os.environ.setdefault("EDGEVLLM_MIN_DISK_GB", "8")
    engine = DockerEngine()
    fields = spec_fields(trixie_python_image(engine, "amd64"), not args.no_verify)
    with tempfile.TemporaryDirectory(prefix="edgevllm-bench-aot-") as tmp_name:
        tmp = Path(tmp_name)
        config = tmp / f"{args.config.stem}-{uuid.uuid4().hex[:8]}.json"  # a plan not yet built
        shutil.copyfile(args.config, config)
        prime, _ = timed_build(dict(fields, verify=False), tmp / "prime", engine)
        engine.remove_image(prime.image, force=True)
        plain, plain_s = timed_build(fields, tmp / "plain", engine)
        warm, warm_s = timed_build(dict(fields, aot=str(config)), tmp / "warm", engine)
        for result in (plain, warm):
            engine.remove_image(result.image, force=True)
    record = warm.aot or {}
    megabytes = sum(m["bytes"] for m in record.get("modules", [])) / 1e6
    print("platform             linux/amd64 (target spark, arch 12.1a), vLLM 0.33.0 prebuilt")
    print(f"config               {args.config.name}: "
          + ", ".join(m["name"] for m in record.get("modules", [])))
    print(f"build without --aot  {plain_s:8.1f} s")
    print(f"build with --aot     {warm_s:8.1f} s   (the AOT step itself: "
          f"{record.get('seconds')} s, {megabytes:.1f} MB of modules)")
    print(f"ratio aot/plain      {warm_s / plain_s:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
