#!/usr/bin/env python3
"""Two builds of one lock, the same image? The small real-pipeline image (the fake-vllm fixture,
this host's platform) built three times in one process:

1. default:  from its spec, as every build runs (the lock it writes is the one rebuilt below);
2. repro:    from that lock with --reproducible (BuildKit's cache used: it must build nothing);
3. rerun:    from that lock with --reproducible and every step rerun (BuildKit's cache unused).

Prints each build's wall time, the clamp's seconds (the price of --reproducible), the steps
BuildKit took from its cache, whether 2 and 3 are the same image (config digest and diff ids), and
the first file where 1 differs from 2 (the build's own times). The images it tagged are removed.

    python bench/reproducible.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]
IMAGE_REPO = "edgevllm-bench/reproducible"


def timed(label: str, run):
    started = time.perf_counter()
    result = run()
    seconds = time.perf_counter() - started
    cached = sum(line.rstrip().endswith("CACHED")
                 for line in Path(result.log_path).read_text(errors="replace").splitlines())
    clamp = (result.tail or {}).get("seconds", {}).get("clamp")
    print(f"{label:8} {seconds:6.1f} s  {cached:2} steps from BuildKit's cache"
          + (f", clamp {clamp} s" if clamp is not None else ""))
    return result


def main() -> int:
    from e2e.conftest import FIXTURE_TREE, hermetic_spec
    from edgevllm.builder.pipeline import build
    from edgevllm.cli.build import spec_from_flags
    from edgevllm.containers.docker import DockerEngine
    from edgevllm.containers.host import host_arch
    from edgevllm.image.rebuildcheck import compare_images
    from edgevllm.specs.buildspec import spec_from_dict
    from support.gitfixtures import make_upstream_repo
    from support.images import cuda_image

    engine = DockerEngine()
    made: list[str] = []
    with tempfile.TemporaryDirectory(prefix="edgevllm-bench-") as tmp_name:
        tmp = Path(tmp_name)
        upstream = make_upstream_repo(tmp, FIXTURE_TREE)
        spec = hermetic_spec("spark", cuda_image(engine, host_arch()), upstream,
                             platform=f"linux/{host_arch()}", mods=[], verify=False,
                             image_repo=IMAGE_REPO)
        out = tmp / "out"
        try:
            first = timed("default", lambda: build(spec_from_dict(spec), out, engine))
            made.append(first.image_id)

            def again(rerun: bool):
                values = {"lock": str(first.lock_path), "reproducible": True,
                          "rerun_steps": rerun, "image_repo": IMAGE_REPO}
                return build(spec_from_flags(values, verify=False), out, engine,
                             lock_path=first.lock_path)

            repro = timed("repro", lambda: again(False))
            made.append(repro.image_id)
            rerun = timed("rerun", lambda: again(True))
            made[:0] = rerun.tags  # the tags first: an image is removed once it has none
            made.append(rerun.image_id)
            verdict = compare_images(engine, repro.image_id, rerun.image_id)
            print(f"repro vs rerun:   {'the same image' if verdict.same else 'DIFFERENT'}: "
                  f"{verdict.line}")
            differs = compare_images(engine, first.image_id, repro.image_id)
            print(f"default vs repro: {differs.line}")
        finally:
            for ref in made:
                engine.remove_image(ref)
    return 0 if verdict.same else 1


if __name__ == "__main__":
    sys.exit(main())
