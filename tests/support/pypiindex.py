"""A local package index for tests (an HTTP server on 127.0.0.1): PyPI's JSON API shape for one
project or several, and the files they name (real tarballs the test makes), served from memory."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import io
import json
import tarfile
from typing import Iterator

from support.localhttp import serve_pages


def tarball(files: dict[str, bytes], top: str) -> bytes:
    """A .tar.gz holding ``files`` under the folder ``top`` (as an sdist does)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


def sdist_entry(name: str, version: str, uploaded: dt.datetime, body: bytes,
                yanked: bool = False, sha: str | None = None) -> list[dict]:
    """A release's files as the JSON API lists them: a wheel (ignored) and the sdist."""
    when = uploaded.isoformat().replace("+00:00", "Z")
    return [{"packagetype": "bdist_wheel", "filename": "x.whl"},
            {"packagetype": "sdist", "filename": f"{name}-{version}.tar.gz",
             "url": f"../../files/{name}-{version}.tar.gz", "size": len(body),
             "digests": {"sha256": sha or hashlib.sha256(body).hexdigest()},
             "upload_time_iso_8601": when, "yanked": yanked,
             "yanked_reason": "broken wheel" if yanked else None}]


def wheel_entry(name: str, body: bytes) -> dict:
    """A wheel file as the JSON API lists it (uploaded 2026-01-01, not yanked)."""
    return {"packagetype": "bdist_wheel", "filename": name, "url": f"../../files/{name}",
            "size": len(body), "digests": {"sha256": hashlib.sha256(body).hexdigest()},
            "upload_time_iso_8601": dt.datetime(2026, 1, 1).isoformat() + "Z", "yanked": False}


@contextlib.contextmanager
def serve_projects(projects: dict[str, dict[str, list[dict]]],
                   files: dict[str, bytes]) -> Iterator[str]:
    """Serve ``/pypi/<name>/json`` for each project (its releases) and ``/files/<file>``;
    yields the base for ``EDGEVLLM_PYPI_URL``."""
    pages = {f"/pypi/{name}/json": json.dumps({"releases": releases}).encode()
             for name, releases in projects.items()}
    pages.update({f"/files/{file}": body for file, body in files.items()})
    with serve_pages(pages) as base:
        yield f"{base}/pypi"


def serve_index(name: str, releases: dict[str, list[dict]],
                files: dict[str, bytes]) -> contextlib.AbstractContextManager[str]:
    """One project's index (``serve_projects`` with one name)."""
    return serve_projects({name: releases}, files)
