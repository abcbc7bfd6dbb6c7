"""The ceilings every reader of verify's inputs holds to, so that a few kilobytes of hostile input
cannot take gigabytes of memory or minutes of time.

``max_library_bytes()``: the most one library (a zip or tar member, a decompressed fatbin entry)
may hold: 4 GiB by default, above the largest real CUDA library (libtorch_cuda.so: 439 MiB in torch
2.14's aarch64 wheel);
``EDGEVLLM_MAX_LIBRARY_SIZE`` (bytes, or ``8G``/``512M``) changes it. A size a file *declares*
is checked against it, and against what its stored bytes can hold, before anything is allocated.
A tar member above ``SPILL_BYTES`` is streamed to a temporary file and mapped rather than held
in memory (a tar.zst of zeros decodes at 30,000:1).
"""

from __future__ import annotations

import os
import re

from edgevllm.common.errors import ConfigError, ResourceLimitError

DEFAULT_MAX_LIBRARY = 4 << 30
SETTING = "EDGEVLLM_MAX_LIBRARY_SIZE"
SPILL_BYTES = 256 << 20
# The most bytes one stored byte can inflate to: deflate's limit (258-byte matches coded in
# under two bits); LZ4's is 255 (a length byte of 255 per 255 bytes); zstd's is 32,768.
DEFLATE_RATIO = 1032
LZ4_RATIO = 255
_SIZE = re.compile(r"(\d+)\s*([KMGT]?)(?:i?B)?", re.IGNORECASE)


def max_library_bytes() -> int:
    text = os.environ.get(SETTING, "").strip()
    if not text:
        return DEFAULT_MAX_LIBRARY
    size = parse_size(text)
    if not size:
        raise ConfigError(f"{SETTING}='{text}': expected a size such as 4G, 512M or 1000000")
    return size


def parse_size(text: str) -> int | None:
    """``512M``, ``4G``, ``1000000`` (bytes) as bytes; None for anything else."""
    match = _SIZE.fullmatch(text.strip())
    if not match:
        return None
    return int(match.group(1)) << (10 * " KMGT".index(match.group(2).upper() or " "))


def size_setting(name: str, default: int, off: str) -> int:
    """A size ceiling from the environment variable ``name`` (bytes, or 512M / 2G; 0 turns
    ``off`` off), ``default`` where it is unset; one line naming the variable otherwise."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    size = parse_size(text)
    if size is None:
        raise ConfigError(f"{name}='{text}': expected a size such as 64M, 1G, or 0 (no {off})")
    return size


def drop_oldest(records: list[tuple[float, int, str]], limit: int) -> int:
    """Remove the least recently used of ``records`` ((mtime, bytes, path), files the caller
    wrote) until the rest take at most ``limit`` bytes; how many went."""
    total, removed = sum(size for _, size, _ in records), 0
    for _, size, path in sorted(records):
        if total <= limit:
            break
        try:
            os.unlink(path)
        except OSError:
            continue
        total, removed = total - size, removed + 1
    return removed


def human(size: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            return f"{size / (1 << shift):.1f} {unit}"
    return f"{size} bytes"


def check_declared(size: int, where: str, stored: int | None = None, ratio: int = 0) -> None:
    """``where`` declares ``size`` bytes: refuse it above the ceiling, or above what ``stored``
    bytes can inflate to at ``ratio``:1 (0: no bound known for its compression)."""
    ceiling = max_library_bytes()
    if size > ceiling:
        raise ResourceLimitError(f"{where}: declares {human(size)}, over the {human(ceiling)} a "
                                 f"library may hold (raise it with {SETTING} if it is real)")
    if stored is not None and ratio and size > stored * ratio + 1024:
        raise ResourceLimitError(f"{where}: declares {human(size)} from {human(stored)} stored, "
                                 "more than its compression can produce: the archive is "
                                 "corrupt or hostile")
