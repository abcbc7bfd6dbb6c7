"""End-to-end fixtures: a stand-in vLLM upstream (real git), hermetic build specs, built images.

What stands in for what, and why:
- ``fixtures/fake-vllm`` stands in for vLLM's tree: a full vLLM compile takes hours and a machine
  with far more memory than CI has. It builds through the same template, stages and driver, and
  compiles real CUDA code with nvcc for TORCH_CUDA_ARCH_LIST.
- The base image is built locally (debootstrap + NVIDIA's CUDA compiler wheels from PyPI) because
  no registry is reachable; the real targets name nvcr.io's CUDA images.
- Builds resolve their locked closure on the host (the fixture tree's requirements/cuda.txt, real
  PyPI wheels downloaded there) and install it offline by sha256, as every build does: builds
  inside Docker have no network here, and need none.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

FIXTURE_TREE = Path(__file__).parent / "fixtures" / "fake-vllm"
FLASHINFER_TREE = Path(__file__).parent / "fixtures" / "fake-flashinfer"
KERNELS = "csrc/kernels.cu"

# The fixture builds need a few GB, not the 60 GB a real vLLM compile asks of the host; the
# disk check itself is tested in tests/test_builder_doctor.py. 6, not 8: right after the real
# image's publish test, BuildKit's copies of its build contexts hold about 3 GB until .ci/run's
# trimmer (every 20 s) removes them, and the recipe build that came next met 7.9 GB free.
os.environ.setdefault("EDGEVLLM_MIN_DISK_GB", "6")
PR_MARKER = 1      # changes the compiled marker string to "pr-1"
PR_BROKEN = 2      # breaks the CUDA source: the compile stage must fail


def kernels_with(marker: str, extra: str = "") -> str:
    text = (FIXTURE_TREE / KERNELS).read_text()
    return text.replace('"upstream"', json.dumps(marker)) + extra


@pytest.fixture(scope="session")
def fake_upstream(tmp_path_factory):
    """A bare git upstream of fake-vllm with tag v0.1.0 and PRs #1 (marker) and #2 (broken)."""
    from support.gitfixtures import add_pr, make_upstream_repo

    root = tmp_path_factory.mktemp("upstream")
    upstream = make_upstream_repo(root, FIXTURE_TREE)
    add_pr(upstream, PR_MARKER, {KERNELS: kernels_with("pr-1")})
    add_pr(upstream, PR_BROKEN, {KERNELS: kernels_with("broken", "\nthis is not CUDA;\n")})
    return upstream


@pytest.fixture(scope="session")
def fake_flashinfer_upstream(tmp_path_factory):
    """A bare git upstream of fake-flashinfer (tag v0.1.0)."""
    from support.gitfixtures import make_upstream_repo

    return make_upstream_repo(tmp_path_factory.mktemp("fi-upstream"), FLASHINFER_TREE,
                              name="flashinfer.git")


def write_spec(path: Path, **fields) -> Path:
    path.write_text(yaml.safe_dump(fields, sort_keys=False))
    return path


def hermetic_spec(target: str, base_image: str, upstream, **extra) -> dict:
    spec = {
        "target": target,
        "vllm": {"repo": upstream.url, "ref": "v0.1.0"},
        "images": {"build": base_image, "runtime": base_image},
        "torch": {"version": None},
        "apt_packages": [],
        "python": "python3.11",   # the base image's (Debian 12): the closure resolves for it
        # The stand-in has no torch to pair FlashInfer / CuTe DSL with: drop the target's pins.
        "packages": {"flashinfer-python": None, "nvidia-cutlass-dsl": None},
        "max_jobs": 2,
        "image_repo": f"edgevllm-test/e2e-{target}",
        "probe_required": ["vllm"],
    }
    spec.update(extra)
    return spec
