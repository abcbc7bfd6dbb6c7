"""Real PyPI downloads for tests, cached across runs under ``${EDGEVLLM_TEST_CACHE}``.

``pypi_download`` fetches one wheel (no dependencies) with ``pip download`` for any platform, so a
test on an x86_64 host can read an aarch64 wheel. Concurrent test processes share the cache: a
file lock serialises the download, and the wheel lands under its final name only once complete.
A failed download raises ``DownloadFailed`` naming the package: tests fail, they never skip.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Iterator, Sequence


class DownloadFailed(RuntimeError):
    pass


def test_cache_dir(*parts: str) -> Path:
    """``${EDGEVLLM_TEST_CACHE:-/var/cache/edgevllm-test}/<parts>``, created on demand."""
    base = Path(os.environ.get("EDGEVLLM_TEST_CACHE", "/var/cache/edgevllm-test"))
    path = base.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (created if needed) for the duration of the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _cache_key(spec: str, platform_tags: Sequence[str], python_version: str | None) -> str:
    text = "|".join([spec, ",".join(platform_tags), python_version or ""])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _pip_download(
    spec: str, platform_tags: Sequence[str], python_version: str | None, dest: Path
) -> None:
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(dest)]
    if platform_tags or python_version:
        argv.append("--only-binary=:all:")
    for tag in platform_tags:
        argv += ["--platform", tag]
    if python_version:
        argv += ["--python-version", python_version]
    proc = subprocess.run(argv + [spec], capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise DownloadFailed(f"pip download {spec} failed ({last}); check network access to PyPI")


def pypi_download(
    spec: str,
    platform_tags: Sequence[str] = (),
    python_version: str | None = None,
    dest_cache: Path | None = None,
) -> Path:
    """Download one wheel/sdist for ``spec`` (e.g. ``"nvidia-nvjpeg==13.3.2.43"``) and return it.

    ``platform_tags``: pip ``--platform`` values (e.g. ``["manylinux_2_28_aarch64"]``); empty means
    this host. Cached under ``dest_cache`` (default ``test_cache_dir("pypi")``) by spec, tags and
    Python version, so pin a version in ``spec`` for reproducible tests.
    """
    root = dest_cache or test_cache_dir("pypi")
    slot = root / _cache_key(spec, platform_tags, python_version)
    with file_lock(root / f".{slot.name}.lock"):
        if len(_downloads(slot)) != 1:
            shutil.rmtree(slot, ignore_errors=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{slot.name}.tmp-", dir=root))
            try:
                _pip_download(spec, platform_tags, python_version, tmp)
                if len(list(tmp.iterdir())) != 1:
                    raise DownloadFailed(
                        f"pip download {spec} gave {len(list(tmp.iterdir()))} files"
                    )
                tmp.chmod(0o755)
                os.replace(tmp, slot)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        return _downloads(slot)[0]


def _downloads(slot: Path) -> list[Path]:
    """The downloaded file(s) in a cache slot (unpacked folders and lock files live there too)."""
    if not slot.is_dir():
        return []
    return sorted(p for p in slot.iterdir() if p.is_file() and not p.name.startswith("."))


def unpacked_wheel(wheel: Path, dest_cache: Path | None = None) -> Path:
    """The wheel unzipped into a cached folder (next to it by default); returns that folder.

    Unix permissions stored in the wheel are applied, so shipped binaries stay executable.
    """
    target = (dest_cache or wheel.parent) / (wheel.name + ".d")
    with file_lock(target.with_name(f".{target.name}.lock")):
        if target.is_dir():
            return target
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
        try:
            with zipfile.ZipFile(wheel) as archive:
                for info in archive.infolist():
                    path = Path(archive.extract(info, tmp))
                    mode = info.external_attr >> 16
                    if mode and path.is_file():
                        path.chmod(mode & 0o777)
            tmp.chmod(0o755)
            os.replace(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target
