"""``inv build --check-reproducible``: the build, then the same lock built again with every step
rerun (BuildKit's cache not used, as a builder that never built it), both with their times
clamped to the lock's (--reproducible, image/clamp.py); the two images compared by config
digest and layer diff ids (image/rebuildcheck.py). Different images stop with one line naming
the first differing file."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from edgevllm.builder.runner import BuildResult
from edgevllm.common import console
from edgevllm.common.errors import NotReproducibleError
from edgevllm.containers.docker import DockerEngine
from edgevllm.image.rebuildcheck import Comparison, compare_images

FIRST_SUFFIX = "-first-build"


def check_rebuild(engine: DockerEngine, first: BuildResult,
                  rebuild: Callable[[Path], BuildResult]) -> Comparison:
    """``rebuild(lock)`` builds ``first``'s lock again (every step rerun); the images compared.
    The first image is held under a tag of its own meanwhile (the rebuild takes its tags) and
    that tag is dropped after; raises NotReproducibleError when they differ."""
    held = first.image + FIRST_SUFFIX
    engine.tag(first.image_id or first.image, held)
    try:
        console.step(f"reproducible: building {first.lock_path.name} again, every step rerun")
        second = rebuild(first.lock_path)
        verdict = compare_images(engine, held, second.image)
    finally:
        engine.remove_image(held)
    if not verdict.same:
        raise NotReproducibleError(f"{first.lock_path.name}: a rebuild gave another image: "
                                   f"{verdict.line}")
    console.info(f"  reproducible: {verdict.line}, {len(verdict.first.diff_ids)} layers")
    return verdict
