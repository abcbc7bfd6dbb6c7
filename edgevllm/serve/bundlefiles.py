"""The offline bundle's one manifest: every file with its sha256 and size, signed (DSSE, the
signing of inspect/dsse.py), and each file checked against it before any is used.

A bundle folder holds ``image/`` (an OCI image layout), ``recipe/``, ``lock/``, ``model/`` (the
model's snapshot files), ``caches/`` (a JIT cache bundle) and ``bundle.dsse.json``, the signed
manifest. ``inv deploy --from`` believes nothing in the folder until the signature checks with the
site's public key and every listed file has its size and sha256: a changed byte anywhere is
refused with the file named, before the engine or the model folder sees a byte.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from edgevllm.common.dataload import load_json
from edgevllm.common.errors import IntegrityError, OutputFolderError, SupplyChainError
from edgevllm.common.fsutil import StagedFile, atomic_write_json
from edgevllm.common.schema import Strict, parse_model
from edgevllm.image.progress import ByteProgress
from edgevllm.inspect import dsse

MANIFEST_NAME = "bundle.dsse.json"
PAYLOAD_TYPE = "application/x.edgevllm-offline-bundle.v1+json"
TOPS = ("image", "recipe", "lock", "model", "caches")
CHUNK = 1 << 20
_HEX64 = re.compile(r"[0-9a-f]{64}\Z")
_PART = re.compile(r"[^\x00-\x1f\x7f/]+\Z")


class BundleFile(Strict):
    path: str
    sha256: str
    size: int = Field(ge=0)
    blob: str | None = None  # model files: the blob name in the hub cache

    @field_validator("path")
    @classmethod
    def _relative(cls, value: str) -> str:
        parts = value.split("/")
        if len(value) > 1024 or len(parts) < 2 or parts[0] not in TOPS \
                or any(p in ("", ".", "..") or not _PART.match(p) for p in parts):
            raise ValueError(f"{value[:80]!r} is not <{'|'.join(TOPS)}>/<relative path>")
        return value

    @field_validator("sha256")
    @classmethod
    def _hex(cls, value: str) -> str:
        if not _HEX64.match(value):
            raise ValueError("not a sha256 (64 hex digits)")
        return value


class BundleImage(Strict):
    ref: str
    id: str
    serves_as: str | None = None  # the recipe's image name: deploy tags the image so


class BundleModel(Strict):
    repo: str
    commit: str
    ref: str | None = None


class BundleManifest(Strict):
    schema_version: Literal[1] = 1
    kind: Literal["edgevllm-offline-bundle"] = "edgevllm-offline-bundle"
    image: BundleImage
    recipe: str
    target: str
    lock: str | None = None
    caches: str | None = None
    model: BundleModel | None = None
    files: list[BundleFile]

    def under(self, top: str) -> list[BundleFile]:
        return [f for f in self.files if f.path.split("/", 1)[0] == top]

    def total(self) -> int:
        return sum(f.size for f in self.files)


def sign_manifest(manifest: BundleManifest, key_path: Path, folder: Path) -> Path:
    """Sign the manifest with the private key and write ``bundle.dsse.json`` (renamed in
    last: a bundle cut short has no manifest, and deploy refuses it)."""
    payload = json.dumps(manifest.model_dump(), sort_keys=True, indent=1).encode()
    envelope = dsse.sign(payload, dsse.load_private_key(key_path), PAYLOAD_TYPE)
    return atomic_write_json(folder / MANIFEST_NAME, envelope)


def read_verified(folder: Path, key_path: Path) -> BundleManifest:
    """The manifest, once its signature checks with ``key_path`` (public or private PEM)."""
    public = dsse.load_public_key(key_path)
    path = folder / MANIFEST_NAME
    if not path.is_file():
        raise IntegrityError(f"{path}: no signed manifest; the bundle is incomplete (run inv "
                             "bundle again to finish it) or not a bundle")
    envelope = dsse.read_envelope(path)
    payload = dsse.verify(envelope, public, str(path))
    if envelope.get("payloadType") != PAYLOAD_TYPE:
        raise SupplyChainError(f"{path}: signed, but not an edgevllm bundle manifest")
    data = load_json(payload, str(path), IntegrityError)
    manifest = parse_model(BundleManifest, data, str(path), IntegrityError)
    paths = [f.path for f in manifest.files]
    if len(set(paths)) != len(paths):
        raise IntegrityError(f"{path}: a file is listed twice")
    return manifest


def check_files(folder: Path, manifest: BundleManifest) -> None:
    """Every listed file is a plain file of its size and sha256; else one line naming it."""
    with ByteProgress("check the bundle", manifest.total()) as progress:
        for entry in manifest.files:
            path = folder / entry.path
            _plain_file(folder, entry.path)
            if path.stat().st_size != entry.size:
                raise IntegrityError(f"{path}: {path.stat().st_size} bytes, the manifest says "
                                     f"{entry.size}; the copy is incomplete or changed (copy "
                                     "the bundle again)")
            found = hash_file(path, progress)
            if found != entry.sha256:
                raise IntegrityError(f"{path}: sha256 {found[:16]}… is not the manifest's "
                                     f"{entry.sha256[:16]}…; the file was changed or damaged "
                                     "after signing: refused before anything was installed")


def _plain_file(folder: Path, relative: str) -> None:
    """No link anywhere on the way (a link could point out of the bundle), a regular file."""
    current = folder
    for part in relative.split("/"):
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            raise IntegrityError(f"{current}: listed in the manifest but missing; the copy is "
                                 "incomplete (copy the bundle again)") from None
        if stat.S_ISLNK(mode):
            raise IntegrityError(f"{current}: a link; a bundle holds plain files only")
    if not stat.S_ISREG(mode):
        raise IntegrityError(f"{current}: not a plain file")


def hash_file(path: Path, progress: ByteProgress | None = None) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
            if progress is not None:
                progress(len(block))
    return digest.hexdigest()


def copy_checked(source: Path, final: Path, progress: ByteProgress | None = None,
                 want: str | None = None) -> str:
    """Copy ``source`` to ``final`` under a temporary name, hashing; keep a ``final`` already
    of the source's size and sha256 (``want``, else the source's). Returns the sha256."""
    size = source.stat().st_size
    if final.is_file() and not final.is_symlink() and final.stat().st_size == size:
        expected = want or hash_file(source)
        if hash_file(final) == expected:
            if progress is not None:
                progress(size)
            return expected
    digest = hashlib.sha256()
    with StagedFile(final) as staged:
        with open(source, "rb") as src, staged.open() as out:
            while block := src.read(CHUNK):
                digest.update(block)
                out.write(block)
                if progress is not None:
                    progress(len(block))
        if want is not None and digest.hexdigest() != want:
            raise IntegrityError(f"{source}: changed while it was copied (sha256 "
                                 f"{digest.hexdigest()[:16]}…, expected {want[:16]}…)")
        staged.commit()
    return digest.hexdigest()


def check_out_folder(folder: Path) -> None:
    """``--out``: a new folder, or one holding a bundle (written again or finished): never a
    folder of the user's other files."""
    if folder.exists() and not folder.is_dir():
        raise OutputFolderError(f"--out {folder}: a file, not a folder")
    if not folder.is_dir():
        return
    others = sorted(p.name for p in folder.iterdir()
                    if p.name not in (*TOPS, MANIFEST_NAME) and not p.name.startswith("."))
    if others:
        raise OutputFolderError(f"--out {folder}: holds other files ({', '.join(others[:3])}); "
                                "give a new or empty folder, or a bundle's")
