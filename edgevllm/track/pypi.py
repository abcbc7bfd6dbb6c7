"""vLLM's releases as PyPI publishes them: the JSON API read as data, an sdist fetched by its
published sha256 into the cache, and the few files ``inv track`` reads taken out of it.

Nothing of a tree runs here: the sdist is a tar read forward through ``common/archives`` (every
member checked and bounded), and only regular files under ``TREE_PREFIXES`` are written, inside
a fresh folder. The JSON API's base is ``EDGEVLLM_PYPI_URL`` (a mirror; default PyPI's).
"""

from __future__ import annotations

import datetime as _dt
import gzip
import os
import re
import shutil
import tarfile
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin

from packaging.version import InvalidVersion, Version

from edgevllm.common.archives import check_member, open_tar, read_member, walk
from edgevllm.common.dataload import load_json
from edgevllm.common.errors import DownloadError, RefNotFoundError, SourceError
from edgevllm.common.fsutil import atomic_dir, move_into_place, sha256_file
from edgevllm.common.http import stream_bounded
from edgevllm.common.paths import cache_dir

PYPI_URL = "https://pypi.org/pypi"
JSON_MAX_BYTES = 64 << 20   # vLLM's whole release list: about 3 MiB
SDIST_MAX_BYTES = 512 << 20  # vLLM 0.33.0's sdist: 47 MB
MEMBER_MAX_BYTES = 8 << 20   # one file of the tree read here (CMakeLists.txt: about 60 KiB)
# What track reads of a tree: requirement files, the CMake (plan, pins), what patches edit.
TREE_PREFIXES = ("CMakeLists.txt", "cmake/", "requirements/", "pyproject.toml", "setup.py",
                 "rust-toolchain.toml", "rust/Cargo.toml", "use_existing_torch.py", "tools/")
_VERSION_WORD = re.compile(r"^[0-9][0-9A-Za-z.+!-]{0,60}\Z")


@dataclass(frozen=True)
class Release:
    """One release's sdist as the JSON API lists it."""

    version: str
    filename: str
    url: str
    sha256: str
    size: int
    uploaded: _dt.datetime
    yanked: bool = False
    yanked_reason: str = ""

    def age_days(self, now: _dt.datetime) -> float:
        return (now - self.uploaded).total_seconds() / 86400


def pypi_url() -> str:
    return os.environ.get("EDGEVLLM_PYPI_URL", PYPI_URL).rstrip("/")


def releases(name: str = "vllm") -> dict[str, Release]:
    """Every release of ``name`` with an sdist, by version; one line where PyPI cannot be read."""
    url = f"{pypi_url()}/{name}/json"
    body = bytearray()
    # The index the user reads packages from (PyPI or EDGEVLLM_PYPI_URL's mirror, which may be
    # on the user's own network), as uv reads it: not a URL others chose.
    stream_bounded(url, body.extend, JSON_MAX_BYTES, f"PyPI's release list of {name}",
                   DownloadError, seconds=120, anywhere=True)
    data = load_json(bytes(body), url, SourceError)
    listed = data.get("releases") if isinstance(data, dict) else None
    if not isinstance(listed, dict):
        raise SourceError(f"{url}: no 'releases' mapping; is it PyPI's JSON API?")
    found: dict[str, Release] = {}
    for version, files in listed.items():
        sdist = _sdist_of(str(version), files, url)  # a mirror's file URLs may be relative
        if sdist is not None:
            found[sdist.version] = sdist
    return found


def _sdist_of(version: str, files: object, origin: str) -> Release | None:
    if not isinstance(files, list) or not _VERSION_WORD.match(version):
        return None
    for info in files:
        if not isinstance(info, dict) or info.get("packagetype") != "sdist":
            continue
        try:
            digest = str(info["digests"]["sha256"])
            uploaded = _dt.datetime.fromisoformat(
                str(info["upload_time_iso_8601"]).replace("Z", "+00:00"))
            if not re.fullmatch(r"[0-9a-f]{64}", digest):
                raise ValueError("sha256")
            return Release(version=version, filename=os.path.basename(str(info["filename"])),
                           url=urljoin(origin, str(info["url"])), sha256=digest,
                           size=int(info.get("size") or 0),
                           uploaded=uploaded if uploaded.tzinfo else
                           uploaded.replace(tzinfo=_dt.timezone.utc),
                           yanked=bool(info.get("yanked")),
                           yanked_reason=str(info.get("yanked_reason") or ""))
        except (KeyError, TypeError, ValueError):
            raise SourceError(f"{origin}: release {version}'s sdist entry lacks a sha256, a "
                              "file name or an upload time") from None
    return None


def _sortable(version: str) -> Version | None:
    try:
        return Version(version)
    except InvalidVersion:
        return None


def candidates(found: dict[str, Release], newer_than: str, now: _dt.datetime,
               min_age_days: int) -> list[Release]:
    """The bump rule: final releases after ``newer_than``, not yanked, uploaded at least
    ``min_age_days`` ago; oldest first."""
    base = _sortable(newer_than)
    out = []
    for release in found.values():
        version = _sortable(release.version)
        if version is None or version.is_prerelease or version.is_devrelease or release.yanked:
            continue
        if base is not None and version <= base:
            continue
        if release.age_days(now) >= min_age_days:
            out.append(release)
    return sorted(out, key=lambda r: Version(r.version))


def pick(found: dict[str, Release], to: str, current: str, now: _dt.datetime,
         min_age_days: int) -> Release | None:
    """The release ``--to`` names (``latest``: the newest candidate; None where there is none),
    one line for an unknown, yanked or too-young one."""
    if to == "latest":
        listed = candidates(found, current, now, min_age_days)
        return listed[-1] if listed else None
    version = to.removeprefix("v")
    release = found.get(version)
    if release is None:
        newest = sorted(found, key=lambda v: _sortable(v) or Version("0"))
        near = ", ".join(newest[-3:])
        raise RefNotFoundError(f"--to {to}: vLLM has no release {version} with an sdist on PyPI "
                               f"(newest: {near}); give a released version or 'latest'")
    if release.yanked:
        why = f" ({release.yanked_reason})" if release.yanked_reason else ""
        raise SourceError(f"--to {to}: vLLM {version} was yanked from PyPI{why}; track another "
                          "release")
    age = release.age_days(now)
    if age < min_age_days:
        raise SourceError(f"--to {to}: vLLM {version} was uploaded {age:.1f} days ago, under "
                          f"--min-age-days {min_age_days}; wait, or pass --min-age-days 0")
    return release


def sdist(release: Release) -> tuple[Path, int]:
    """The release's sdist in the cache (``sdists/<sha256>/``), fetched when missing and kept
    only if its bytes have the published sha256; (its path, bytes downloaded now)."""
    return fetch_file(release, "sdists", SDIST_MAX_BYTES, f"the sdist {release.filename}")


def fetch_file(release: Release, folder: str, limit: int, what: str) -> tuple[Path, int]:
    """A file PyPI lists (an sdist, a wheel) in the cache (``<folder>/<sha256>/``), as ``sdist``."""
    slot = cache_dir(folder, release.sha256)
    final = slot / release.filename
    if final.is_file() and sha256_file(final) == release.sha256:
        return final, 0
    fd, tmp = tempfile.mkstemp(prefix=".dl-", dir=slot)
    try:
        with os.fdopen(fd, "wb") as out:
            got = stream_bounded(release.url, out.write, limit, what, DownloadError,
                                 anywhere=True)  # its bytes are decided by PyPI's sha256
        if sha256_file(Path(tmp)) != release.sha256:
            raise DownloadError(f"{release.url}: its bytes do not have the sha256 PyPI publishes "
                                f"({release.sha256[:16]}…); try again or use another mirror")
        move_into_place(tmp, final)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return final, got


def release_tree(release: Release, dest: Path) -> tuple[int, int]:
    """The files track reads of ``release`` copied into ``dest`` (a new folder), taken out of its
    sdist once and kept by the sdist's sha256 (``sdist-trees/<sha256>``); (bytes downloaded,
    bytes read)."""
    final = cache_dir("sdist-trees") / release.sha256
    downloaded = read = 0
    if not final.is_dir():
        path, downloaded = sdist(release)
        with atomic_dir(final) as tmp:
            read = path.stat().st_size + extract_tree(path, tmp)
    shutil.copytree(final, dest, symlinks=True)
    return downloaded, read + sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())


def extract_tree(path: Path, dest: Path, prefixes: tuple[str, ...] = TREE_PREFIXES) -> int:
    """The sdist's files under ``prefixes`` (below its one top folder) written into ``dest``;
    returns the bytes written. Links, devices and names that climb out are refused or skipped."""
    try:
        return _extract(path, dest, prefixes)
    except (OSError, EOFError, zlib.error, tarfile.TarError) as exc:  # ReadError: no tar at all
        raise SourceError(f"{path.name}: not a readable .tar.gz ({exc})") from None


def _extract(path: Path, dest: Path, prefixes: tuple[str, ...]) -> int:
    label = path.name
    written = 0
    with gzip.open(path, "rb") as stream:
        tar = open_tar(stream, label, SourceError)  # type: ignore[arg-type]
        for member in walk(tar, label, SourceError):
            name = check_member(member, label, SourceError)
            rel = name.split("/", 1)[1] if "/" in name else ""
            if not member.isfile() or not any(rel == p or rel.startswith(p) for p in prefixes):
                continue
            data = read_member(tar, member, MEMBER_MAX_BYTES, label, SourceError)
            out = dest / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(data)
            written += len(data)
    return written
