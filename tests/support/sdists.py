"""Real sdists from PyPI for tests, fetched by URL from PyPI's JSON API and cached.

``pip download --no-binary`` would try to build metadata (vLLM's needs torch and CUDA), so the
sdist file itself is fetched and checked against its published sha256. Cached under
``${EDGEVLLM_TEST_CACHE}/sdists``; a failed fetch raises ``DownloadFailed`` (tests fail, never
skip).
"""

from __future__ import annotations

import hashlib
import os
import tarfile
import tempfile
from pathlib import Path
from urllib.parse import urljoin

import requests

from support.checks import present

from .downloads import DownloadFailed, file_lock, test_cache_dir


def _sdist_info(name: str, version: str) -> dict:
    url = f"https://pypi.org/pypi/{name}/json"
    try:
        resp = requests.get(url, timeout=60)
        resp.raise_for_status()
        files = resp.json()["releases"].get(version) or []
    except (requests.RequestException, ValueError, KeyError) as exc:
        raise DownloadFailed(f"cannot read {url} ({exc}); check network access to PyPI") from exc
    for info in files:
        if info.get("packagetype") == "sdist":
            # A mirror may answer with URLs relative to the JSON page.
            return dict(info, url=urljoin(resp.url, info["url"]))
    raise DownloadFailed(f"{name}=={version} has no sdist on PyPI")


def pypi_sdist(name: str, version: str) -> Path:
    """Download the sdist of ``name==version`` (cached) and return its path."""
    root = test_cache_dir("sdists")
    with file_lock(root / f".{name}-{version}.lock"):
        found = sorted(root.glob(f"{name}-{version}/*"))
        if found:
            return found[0]
        info = _sdist_info(name, version)
        slot = root / f"{name}-{version}"
        slot.mkdir(exist_ok=True)
        final = slot / info["filename"]
        fd, tmp = tempfile.mkstemp(prefix=".dl-", dir=slot)
        digest = hashlib.sha256()
        try:
            with os.fdopen(fd, "wb") as out, \
                    requests.get(info["url"], stream=True, timeout=300) as r:
                r.raise_for_status()
                for chunk in r.iter_content(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
            if digest.hexdigest() != info["digests"]["sha256"]:
                raise DownloadFailed(f"{info['filename']}: sha256 mismatch with PyPI")
            os.replace(tmp, final)
        except requests.RequestException as exc:
            raise DownloadFailed(f"download of {info['url']} failed ({exc})") from exc
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return final


def sdist_members(sdist: Path, members: list[str], dest: Path) -> Path:
    """Extract ``members`` (paths below the sdist's top folder) into ``dest``; return ``dest``."""
    with tarfile.open(sdist) as tar:
        top = tar.getmembers()[0].name.split("/")[0]
        for member in members:
            info = tar.getmember(f"{top}/{member}")
            data = present(tar.extractfile(info)).read()
            out = dest / member
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(data)
    return dest


def sdist_tree(sdist: Path, prefixes: list[str], dest: Path) -> Path:
    """Extract every regular file under ``prefixes`` (paths below the sdist's top folder, e.g.
    ``"cmake/"`` or ``"CMakeLists.txt"``) into ``dest``; return ``dest``."""
    with tarfile.open(sdist) as tar:
        top = tar.getmembers()[0].name.split("/")[0]
        for info in tar.getmembers():
            rel = info.name[len(top) + 1:]
            if not info.isfile() or not any(rel == p or rel.startswith(p) for p in prefixes):
                continue
            out = dest / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(present(tar.extractfile(info)).read())
    return dest


def sdist_tree_cached(name: str, version: str, prefixes: list[str]) -> Path:
    """``sdist_tree`` of ``name==version``, extracted once into the test cache (reading the 47 MB
    vLLM tarball takes seconds); callers copy it before changing anything."""
    key = hashlib.sha256("|".join([name, version, *sorted(prefixes)]).encode()).hexdigest()[:12]
    root = test_cache_dir("sdist-trees")
    final = root / f"{name}-{version}-{key}"
    with file_lock(root / f".{final.name}.lock"):
        if not final.is_dir():
            tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=root))
            sdist_tree(pypi_sdist(name, version), prefixes, tmp / "tree")
            os.replace(tmp / "tree", final)
            os.rmdir(tmp)
    return final


def extract_all(tar: tarfile.TarFile, dest: Path) -> None:
    """Extract a whole archive, with the "data" filter where Python has one (3.12, 3.11.4; Debian
    12's 3.11.2 has none)."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(dest, filter="data")
    else:
        tar.extractall(dest)


def release_upstream(root: Path, name: str, version: str):
    """A bare upstream (support.gitfixtures) holding PyPI's sdist of NAME VERSION as the annotated
    tag vVERSION; returns (the upstream, the unpacked tree)."""
    from .gitfixtures import git, make_upstream_repo

    with tarfile.open(pypi_sdist(name, version)) as tar:
        extract_all(tar, root / "src")
    tree = root / "src" / f"{name}-{version}"
    upstream = make_upstream_repo(root, tree)
    git(upstream.path, "tag", "-d", "v0.1.0")
    git(upstream.path, "tag", "-a", f"v{version}", "-m", f"{name} {version}", upstream.shas["c1"],
        env={"GIT_COMMITTER_NAME": "Fixture", "GIT_COMMITTER_EMAIL": "f@example.invalid"})
    return upstream, tree


def narrowed_release_upstream(root: Path, version: str, flashinfer: str):
    """(a git upstream under ``root`` holding PyPI's vLLM ``version`` sdist as tag
    ``v<version>``, the unpacked tree): the release's CMake and setup.py, its runtime closure
    narrowed to torch and FlashInfer (``requirements/cuda.txt``), so an image of it installs in
    minutes under qemu instead of half an hour."""
    import tarfile

    from .gitfixtures import git, make_upstream_repo

    with tarfile.open(pypi_sdist("vllm", version)) as tar:
        extract_all(tar, root / "src")
    tree = root / "src" / f"vllm-{version}"
    (tree / "requirements" / "cuda.txt").write_text(
        "# edgevllm e2e: the runtime closure narrowed to torch and FlashInfer (the CMake and "
        f"setup.py are the release's)\ntorch==2.14.0\nflashinfer-python=={flashinfer}\n")
    upstream = make_upstream_repo(root, tree)
    git(upstream.path, "tag", "-d", "v0.1.0")
    git(upstream.path, "tag", f"v{version}", upstream.shas["c1"])
    return upstream, tree


def into_track_cache(name: str, version: str) -> tuple[Path, str]:
    """PyPI's sdist of ``name==version`` (from the test cache) linked where ``inv track`` looks
    for it (its cache's ``sdists/<sha256>/``; set ``EDGEVLLM_CACHE`` first), so track downloads
    nothing; (its path, its sha256)."""
    from edgevllm.common.paths import cache_dir

    path = pypi_sdist(name, version)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    link = cache_dir("sdists", digest) / path.name
    if not link.exists():
        os.symlink(path, link)
    return path, digest
