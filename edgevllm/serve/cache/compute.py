"""The CUDA driver's compute cache, kept per image: where it lives and how big it may grow.

The driver compiles a PTX-only kernel module once and keeps the SASS in its compute cache
(``CUDA_CACHE_PATH``), evicting the oldest entries beyond ``CUDA_CACHE_MAXSIZE`` bytes. The
launch defaults mount a host folder per image id at the container path of the ``compute`` entry
of ``launch.jit_caches``; this module sets the two variables for it. The size is what verify
measured (the PTX bytes of the image's PTX-only units, from its verify label) with a margin,
between a floor (the driver's own default on servers: never less than without edgevllm) and the
driver's maximum. An image without a verify record gets the maximum: the cache only grows as far
as what is compiled. A recipe's ``env:`` or ``launch.env:`` value wins over both variables.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from edgevllm.common import labels

COMPUTE_CACHE = "compute"  # the launch.jit_caches entry that names the driver's compute cache
PATH_ENV, SIZE_ENV = "CUDA_CACHE_PATH", "CUDA_CACHE_MAXSIZE"
MIB, GIB = 1 << 20, 1 << 30
FLOOR = 1 * GIB  # the driver's default on desktop/server platforms (256 MiB on embedded ones)
CEILING = 4 * GIB  # the largest CUDA_CACHE_MAXSIZE the driver takes
MARGIN = 1.5  # SASS per PTX byte varies by kernel; the cache also holds its own index
STEP = 256 * MIB  # sizes are rounded up to this, so a few bytes of PTX do not change the line


@dataclass
class ComputeCache:
    """The driver's compute cache of one container: the env edgevllm adds, and why that size."""

    env: dict[str, str]  # what the launch adds (the recipe's own values are left out)
    path: str | None  # where the cache is in the container (None: not kept)
    size: str | None  # CUDA_CACHE_MAXSIZE in effect
    ptx_bytes: int | None  # what verify measured; None: no record on the image
    overridden: bool = False  # the recipe set the size itself

    def describe(self) -> str:
        if not self.path:
            return "compute cache: not kept (no 'compute' entry in launch.jit_caches)"
        if self.overridden:
            why = "set by the recipe"
        elif self.ptx_bytes is None:
            why = "no verify record on the image: the driver's maximum"
        else:
            why = f"{self.ptx_bytes} bytes of PTX-only code measured by verify, x{MARGIN:g}"
        return f"compute cache: {self.path}, {SIZE_ENV}={self.size} ({why})"


def cache_size(ptx_bytes: int | None) -> int:
    """CUDA_CACHE_MAXSIZE for an image with ``ptx_bytes`` of PTX-only code (None: unknown)."""
    if ptx_bytes is None:
        return CEILING
    wanted = math.ceil(ptx_bytes * MARGIN / STEP) * STEP
    return max(FLOOR, min(CEILING, wanted))


def measured_ptx_bytes(image_labels: dict[str, str] | None) -> int | None:
    """The PTX bytes verify recorded in the image's verify label; None when it recorded none."""
    record = labels.label_record(image_labels, "verify")
    first_start = record.get("first_start") if isinstance(record, dict) else None
    value = first_start.get("ptx_bytes") if isinstance(first_start, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None


def compute_cache(jit_caches: dict[str, str], given_env: dict[str, str],
                  image_labels: dict[str, str] | None) -> ComputeCache:
    """The env that keeps the driver's cache in the mounted per-image folder. ``given_env``: what
    the launch defaults and the recipe already set (their values win)."""
    mounted = jit_caches.get(COMPUTE_CACHE)
    ptx = measured_ptx_bytes(image_labels)
    if not mounted:
        return ComputeCache({}, given_env.get(PATH_ENV), given_env.get(SIZE_ENV), ptx,
                            SIZE_ENV in given_env)
    wanted = {PATH_ENV: mounted, SIZE_ENV: str(cache_size(ptx))}
    effective = {**wanted, **{k: given_env[k] for k in wanted if k in given_env}}
    return ComputeCache({k: v for k, v in wanted.items() if k not in given_env},
                        effective[PATH_ENV], effective[SIZE_ENV], ptx, SIZE_ENV in given_env)
