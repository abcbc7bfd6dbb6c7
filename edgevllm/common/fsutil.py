"""Write outputs so that an interrupted run never leaves a half-written file under a final name.

Everything is written to a temporary sibling (``.<name>.tmp-<pid>``) and renamed into place only
once complete; on any exception, Ctrl-C included, the temporary is removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import IO, Iterator


def _tmp_sibling(final: Path) -> Path:
    return final.with_name(f".{final.name}.tmp-{os.getpid()}")


@contextlib.contextmanager
def atomic_open(final: Path | str, mode: str = "wb") -> Iterator[IO]:
    """Open a temporary sibling of ``final`` for writing; rename it to ``final`` on success."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_sibling(final)
    try:
        with open(tmp, mode) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            tmp.unlink()


def atomic_write_text(final: Path | str, text: str) -> Path:
    with atomic_open(final, "w") as handle:
        handle.write(text)
    return Path(final)


def atomic_write_bytes(final: Path | str, data: bytes) -> Path:
    with atomic_open(final, "wb") as handle:
        handle.write(data)
    return Path(final)


def atomic_write_json(final: Path | str, obj: object) -> Path:
    return atomic_write_text(final, json.dumps(obj, indent=2, sort_keys=True) + "\n")


@contextlib.contextmanager
def atomic_dir(final: Path | str) -> Iterator[Path]:
    """Yield a temporary folder beside ``final``; it replaces ``final`` only if the block
    succeeds."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        yield tmp
        if final.exists():
            old = final.with_name(f".{final.name}.old-{os.getpid()}")
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def sha256_file(path: Path | str, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()
