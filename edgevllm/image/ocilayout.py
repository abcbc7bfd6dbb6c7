"""An image as an OCI image layout folder (``oci-layout``, ``index.json``, ``blobs/sha256/…``),
for the offline bundle (``inv bundle``) and loaded back from it (``inv deploy --from``).

The engine's ``docker save`` (Docker 25 and later) writes an OCI image layout, with docker's own
``manifest.json`` beside it: skopeo (``oci:DIR``), oras (``--oci-layout``) and crane read the
folder, and ``docker load`` takes it back as a tar. The save is streamed through the archive gate
(common/archives.py) and each member written under a temporary name and renamed once complete;
a blob's bytes must be its name's sha256. A blob already in the folder with its name's size and
sha256 is kept (a bundle written again, or cut short, resumes). Loading streams a tar of the folder
into ``docker load`` without the layer blobs whose chain the engine already holds
(image/loadskip.py), as ``inv load`` does for a published set.
"""

from __future__ import annotations

import hashlib
import os
import re
import tarfile
from pathlib import Path
from typing import IO

from edgevllm.common import console
from edgevllm.common.archives import open_tar, read_file, walk
from edgevllm.common.dataload import load_json
from edgevllm.common.errors import EngineError, IntegrityError
from edgevllm.common.fsutil import StagedFile
from edgevllm.containers.docker import DockerEngine
from edgevllm.image.loadskip import Skip, held_chains, layers_to_skip
from edgevllm.image.progress import ByteProgress

CHUNK = 1 << 20
_BLOB = re.compile(r"blobs/sha256/([0-9a-f]{64})\Z")
_TOP = {"oci-layout", "index.json", "manifest.json", "repositories"}
JSON_LIMIT = 8 << 20


def is_layout_member(name: str) -> bool:
    """A file an OCI layout written by ``docker save`` holds (nothing else is written)."""
    return name in _TOP or bool(_BLOB.match(name))


def save_layout(engine: DockerEngine, ref: str, folder: Path, total: int | None,
                image_id: str | None = None) -> list[str]:
    """``docker save ref`` into ``folder`` as an OCI layout; the files written or kept,
    relative to ``folder``. ``total``: the image's size, for the progress bar. A layout of
    ``image_id`` already whole there (every blob its name's sha256) is kept without a save."""
    whole = complete_layout(folder, ref, image_id) if image_id else None
    if whole is not None:
        console.info(f"{folder}: the layout of {ref} is already whole; docker save not run")
        return whole
    label = f"docker save {ref}"
    written: list[str] = []
    with engine.save_stream([ref]) as stream, ByteProgress(f"image {ref}", total) as progress, \
            open_tar(stream, label, IntegrityError) as tar:
        for member in walk(tar, label, IntegrityError):
            name = member.name.removeprefix("./").strip("/")
            if member.isdir():
                continue
            if not member.isfile() or not is_layout_member(name):
                raise IntegrityError(f"{label}: member {name} is not one of an OCI layout's; "
                                     "the engine must be Docker 25 or later (docker save writes "
                                     "OCI layouts since)")
            handle = tar.extractfile(member)
            assert handle is not None
            _write_member(handle, folder / name, name, member.size, progress)
            written.append(name)
    if "index.json" not in written or "manifest.json" not in written:
        raise IntegrityError(f"{label}: no index.json and manifest.json; the engine must be "
                             "Docker 25 or later")
    return written


def _write_member(source: IO[bytes], final: Path, name: str, size: int,
                  progress: ByteProgress) -> None:
    found = _BLOB.match(name)
    if found and _already_there(final, found.group(1), size):
        while block := source.read(CHUNK):  # the stream goes on: read past the member
            progress(len(block))
        return
    digest = hashlib.sha256()
    with StagedFile(final) as staged:
        with staged.open() as out:
            while block := source.read(CHUNK):
                digest.update(block)
                out.write(block)
                progress(len(block))
        if found and digest.hexdigest() != found.group(1):
            raise IntegrityError(f"docker save: blob {name} is not its name's sha256 "
                                 f"({digest.hexdigest()[:16]}…); the engine's store is damaged")
        staged.commit()


def _already_there(path: Path, hexdigest: str, size: int) -> bool:
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size != size:
            return False
    except OSError:
        return False
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return digest.hexdigest() == hexdigest


def complete_layout(folder: Path, ref: str, image_id: str) -> list[str] | None:
    """The layout's files when it holds ``image_id`` under ``ref`` whole, else None."""
    try:
        entry = _docker_manifest(folder)
        index = load_json(read_file(folder / "index.json", JSON_LIMIT, "the layout file",
                                    IntegrityError), "index.json", IntegrityError)
        found = image_id_of(folder)
    except (OSError, IntegrityError):
        return None  # a damaged layout (a run cut short, a file edited) is saved again
    tags, layers = entry.get("RepoTags") or [], entry.get("Layers")
    manifests = index.get("manifests") if isinstance(index, dict) else None
    if not (isinstance(tags, list) and isinstance(layers, list) and isinstance(manifests, list)):
        return None
    if found != image_id or (ref not in tags
                             and not image_id.endswith(ref.removeprefix("sha256:"))):
        return None
    blobs = [entry.get("Config"), *layers]
    blobs += [f"blobs/sha256/{str(m.get('digest', '')).removeprefix('sha256:')}"
              for m in manifests if isinstance(m, dict)]
    tops = [name for name in sorted(_TOP) if (folder / name).is_file()]
    if not all(isinstance(b, str) and _whole_blob(folder, b) for b in blobs) \
            or "oci-layout" not in tops:
        return None
    return tops + sorted(set(blobs))


def _whole_blob(folder: Path, name: str) -> bool:
    found = _BLOB.match(name)
    path = folder / name
    if found is None or not path.is_file():
        return False
    return _already_there(path, found.group(1), path.stat().st_size)


def image_id_of(folder: Path) -> str:
    """The image id (its config's digest) that docker's ``manifest.json`` in the layout names."""
    entry = _docker_manifest(folder)
    config = entry.get("Config", "")
    found = _BLOB.match(config) if isinstance(config, str) else None
    if not found:
        raise IntegrityError(f"{folder}/manifest.json: no config blob; the layout is damaged")
    return "sha256:" + found.group(1)


def _docker_manifest(folder: Path) -> dict:
    path = folder / "manifest.json"
    data = load_json(read_file(path, JSON_LIMIT, "the layout file", IntegrityError), str(path),
                     IntegrityError)
    if not (isinstance(data, list) and len(data) == 1 and isinstance(data[0], dict)):
        raise IntegrityError(f"{path}: not one image; a bundle carries exactly one")
    return data[0]


def held_layers(engine: DockerEngine, folder: Path) -> Skip:
    """The layout's layer blobs whose chain the engine's images already hold."""
    entry = _docker_manifest(folder)
    layers = [layer for layer in entry.get("Layers", []) if isinstance(layer, str)]
    config_path = folder / entry.get("Config", "")
    config = load_json(read_file(config_path, JSON_LIMIT, "the config", IntegrityError),
                       str(config_path), IntegrityError)
    diff_ids = (config.get("rootfs") or {}).get("diff_ids") if isinstance(config, dict) else None
    if not isinstance(diff_ids, list) or len(diff_ids) != len(layers):
        raise IntegrityError(f"{config_path}: the config's diff ids do not match the layers")
    sizes = {layer: (folder / layer).stat().st_size for layer in layers}
    return layers_to_skip(layers, diff_ids, sizes, held_chains(engine.image_layer_lists()))


def load_layout(engine: DockerEngine, folder: Path, files: list[str],
                every_layer: bool = False) -> list[str]:
    """``docker load`` a tar of ``files`` (relative to ``folder``), without the layers the
    engine holds unless ``every_layer``; once more with every layer where docker load then
    misses one (an image removed between the look and the load)."""
    skip = Skip() if every_layer else held_layers(engine, folder)
    if skip.members:
        console.info(skip.describe())
    try:
        return _load(engine, folder, [f for f in files if f not in skip.members])
    except EngineError as exc:
        if not skip.members or "no such file or directory" not in str(exc):
            raise
    console.warn("docker load missed a layer the engine held a moment ago: loading again with "
                 "every layer")
    return _load(engine, folder, files)


def load_files(engine: DockerEngine, folder: Path, files: list[str],
               consume: bool = False) -> list[str]:
    """``docker load`` a tar of exactly ``files`` (relative to ``folder``): the caller chose
    which layers the engine holds (image/clampimage.py). ``consume``: each file removed once
    sent (docker load holds its own copy by then): the disk holds two copies, not three."""
    return _load(engine, folder, files, consume)


def _load(engine: DockerEngine, folder: Path, files: list[str], consume: bool = False
          ) -> list[str]:
    total = sum((folder / name).stat().st_size for name in files)

    def feed(stdin: IO[bytes]) -> None:
        with ByteProgress("load", total) as progress, \
                tarfile.open(fileobj=stdin, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            tar.copybufsize = CHUNK  # type: ignore[attr-defined]  # not 16 KiB pipe writes
            try:
                for name in files:
                    _add(tar, folder / name, name, progress)
                    if consume:
                        (folder / name).unlink()
            except BrokenPipeError:
                return  # docker load stopped reading: its own error explains why

    return engine.load_from(feed)


def _add(tar: tarfile.TarFile, path: Path, name: str, progress: ByteProgress) -> None:
    with open(path, "rb") as handle:
        info = tarfile.TarInfo(name)
        info.size, info.mode = os.fstat(handle.fileno()).st_size, 0o644
        tar.addfile(info, _Counting(handle, progress))


class _Counting:
    """A file read by tarfile, counted for the progress bar."""

    def __init__(self, handle: IO[bytes], progress: ByteProgress):
        self.handle, self.progress = handle, progress

    def read(self, size: int = -1) -> bytes:
        block = self.handle.read(size)
        self.progress(len(block))
        return block

