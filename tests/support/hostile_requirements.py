"""Hostile requirement inputs for tests: projects whose build would run code on the host.

``canary_project`` is a local project whose in-tree build backend (``backend-path = ["."]``)
writes a canary file the moment it is imported: any resolver that asks it for metadata runs it.
``sdist_only_index`` is a PEP 503 folder with one package that exists only as an sdist whose
backend does the same. ``vllm_tree`` / ``flashinfer_tree`` are the smallest trees the readers
accept, with a chosen line in a chosen file.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

SDIST_NAME = "edgevllm-canary-sdist"

_BACKEND = '''import pathlib
pathlib.Path({canary!r}).write_text("the project's build backend ran on the host")
def get_requires_for_build_wheel(config_settings=None):
    return []
def prepare_metadata_for_build_wheel(directory, config_settings=None):
    raise SystemExit(1)
def build_wheel(directory, config_settings=None, metadata_directory=None):
    raise SystemExit(1)
get_requires_for_build_editable = get_requires_for_build_wheel
build_editable = build_wheel
'''
_PYPROJECT = '''[build-system]
requires = []
build-backend = "backend"
backend-path = ["."]

[project]
name = "{name}"
version = "1.0"
dynamic = ["dependencies"]
'''


def canary_project(root: Path, canary: Path, name: str = "evil") -> Path:
    """``root/name``: a project whose build backend writes ``canary`` when it is imported."""
    project = root / name
    project.mkdir(parents=True)
    (project / "pyproject.toml").write_text(_PYPROJECT.format(name=name))
    (project / "backend.py").write_text(_BACKEND.format(canary=str(canary)))
    return project


def sdist_only_index(root: Path, canary: Path) -> Path:
    """``root/simple``: a PEP 503 index holding ``edgevllm-canary-sdist`` 1.0 as an sdist only,
    its backend writing ``canary`` when a resolver builds it for metadata."""
    stem = "edgevllm_canary_sdist-1.0"
    files = {"pyproject.toml": _PYPROJECT.format(name=SDIST_NAME),
             "backend.py": _BACKEND.format(canary=str(canary)),
             "PKG-INFO": f"Metadata-Version: 2.1\nName: {SDIST_NAME}\nVersion: 1.0\n"}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{stem}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    page = root / "simple" / SDIST_NAME
    page.mkdir(parents=True)
    archive = page / f"{stem}.tar.gz"
    archive.write_bytes(buffer.getvalue())
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    (page / "index.html").write_text(
        f'<html><body><a href="{archive.name}#sha256={digest}">{archive.name}</a></body></html>\n')
    return root / "simple"


VLLM_FILES = {
    "setup.py": "num_jobs = max(1, num_jobs // nvcc_threads)\n",
    "pyproject.toml": '[build-system]\nrequires = [\n    "setuptools>=77",\n    "wheel",\n]\n',
    "requirements/build/cuda.txt": "setuptools>=77\nninja\n",
    "requirements/cuda.txt": "-r common.txt\nnumba == 0.61.2\n",
    "requirements/common.txt": "requests >= 2.26.0\n",
    "tools/use_existing_torch.py": "import sys  # --prefix\n",
}


def vllm_tree(root: Path, changed: dict[str, str]) -> Path:
    """The smallest vLLM tree ``read_build_layout`` reads, with ``changed`` files' text."""
    tree = root / "vllm"
    for name, text in {**VLLM_FILES, **changed}.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)
    return tree


def flashinfer_tree(root: Path, pyproject: str, requirements: str = "") -> Path:
    """A FlashInfer-shaped tree: its pyproject.toml and, where given, its requirements.txt."""
    tree = root / "flashinfer"
    tree.mkdir(parents=True)
    (tree / "pyproject.toml").write_text(pyproject)
    if requirements:
        (tree / "requirements.txt").write_text(requirements)
    return tree
