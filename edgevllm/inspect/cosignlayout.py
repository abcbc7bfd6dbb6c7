"""cosign's signature and attestations of an image written into an OCI image layout beside it
(the offline bundle's ``image/``, image/ocilayout.py), so that a copy of the layout into a
registry carries them.

The layout's image is the one manifest of ``index.json`` that is no cosign tag; its digest is
what cosign sees in the registry after ``skopeo copy --preserve-digests`` (the bytes are kept).
For it, the ``.sig`` and ``.att`` manifests inspect/cosign.py writes to a registry are written
here as blobs (``blobs/sha256/<hex>``: the layers, the config, the manifest) and named in
``index.json`` by ``org.opencontainers.image.ref.name`` ``sha256-<hex>.sig`` / ``.att``:
``skopeo copy oci:DIR:sha256-<hex>.sig docker://HOST/REPO:sha256-<hex>.sig`` puts each where
``cosign verify`` looks. Writing again replaces the two entries (ECDSA signatures differ each
time; the blobs no entry names any more are removed).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from edgevllm.common.archives import read_file
from edgevllm.common.dataload import load_json
from edgevllm.common.errors import IntegrityError
from edgevllm.common.fsutil import atomic_write_bytes
from edgevllm.common.grammar import SHA256_DIGEST
from edgevllm.common.keys import PrivateKey
from edgevllm.inspect import cosign

REF_NAME = "org.opencontainers.image.ref.name"
INDEX_LIMIT = 8 << 20
_SUFFIXES = (".sig", ".att")


def _sha(raw: bytes) -> str:
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def _index(folder: Path) -> dict:
    path = folder / "index.json"
    try:
        raw = read_file(path, INDEX_LIMIT, "the layout's index", IntegrityError)
    except OSError as exc:
        raise IntegrityError(f"{path}: cannot read the layout's index ({exc.strerror}); "
                             "save the image again") from None
    data = load_json(raw, str(path), IntegrityError)
    if not isinstance(data, dict) or not isinstance(data.get("manifests"), list):
        raise IntegrityError(f"{path}: not an OCI image index")
    return data


def _is_cosign(entry: dict) -> bool:
    notes = entry.get("annotations")
    name = notes.get(REF_NAME) if isinstance(notes, dict) else None
    return isinstance(name, str) and name.startswith("sha256-") and name.endswith(_SUFFIXES)


def image_digest(folder: Path) -> str:
    """The digest of the layout's one image (its manifest, or its index)."""
    images = [m for m in _index(folder)["manifests"] if isinstance(m, dict) and not _is_cosign(m)]
    digests = {m.get("digest") for m in images}
    if len(digests) != 1:
        raise IntegrityError(f"{folder}/index.json: {len(digests)} images; a bundle's layout "
                             "holds exactly one")
    digest = digests.pop()
    if not isinstance(digest, str) or not SHA256_DIGEST.fullmatch(digest):
        raise IntegrityError(f"{folder}/index.json: the image has no sha256 digest")
    return digest


def _put(folder: Path, blob: bytes) -> str:
    name = f"blobs/sha256/{hashlib.sha256(blob).hexdigest()}"
    atomic_write_bytes(folder / name, blob)
    return name


def add_signatures(folder: Path, dest: str, key: PrivateKey,
                   predicates: dict[str, object]) -> list[str]:
    """Sign the layout's image (and attest each predicate) as cosign would in the registry
    ``dest`` (``HOST/REPO``, the signature's docker-reference); the files written, relative to
    ``folder``, ``index.json`` last. No predicates: the signature alone."""
    index = _index(folder)
    digest = image_digest(folder)
    old = [m for m in index["manifests"] if isinstance(m, dict) and _is_cosign(m)]
    entries = [m for m in index["manifests"] if m not in old]
    written: list[str] = []
    plan = [("sig", [cosign.signature_layer(dest, digest, key)])]
    if predicates:
        plan.append(("att", [cosign.attestation_layer(dest, digest, kind, predicate, key)
                             for kind, predicate in predicates.items()]))
    for suffix, layers in plan:
        raw, config = cosign.signature_manifest([descriptor for descriptor, _ in layers])
        written += [_put(folder, blob) for _, blob in layers if blob is not None]
        written += [_put(folder, config), _put(folder, raw)]
        entries.append({"mediaType": cosign.OCI_MANIFEST, "digest": _sha(raw), "size": len(raw),
                        "annotations": {REF_NAME: cosign.tag_for(digest, suffix)}})
    _drop_stale(folder, old, set(written))
    atomic_write_bytes(folder / "index.json", json.dumps({**index, "manifests": entries},
                                                         separators=(",", ":")).encode())
    return written + ["index.json"]


def signature_blobs(folder: Path, entries: list[dict] | None = None) -> set[str]:
    """The blobs (``blobs/sha256/<hex>``) of the layout's cosign entries (or of ``entries``)."""
    if entries is None:
        entries = [m for m in _index(folder)["manifests"] if isinstance(m, dict) and _is_cosign(m)]
    names: set[str] = set()
    for entry in entries:
        name = f"blobs/sha256/{str(entry.get('digest', '')).removeprefix('sha256:')}"
        try:
            found = load_json(read_file(folder / name, INDEX_LIMIT, "a cosign manifest",
                                        IntegrityError), name, IntegrityError)
        except (OSError, IntegrityError):
            continue
        parts = [found.get("config"), *found.get("layers", [])] if isinstance(found, dict) else []
        names |= {name} | {f"blobs/sha256/{str(d.get('digest', '')).removeprefix('sha256:')}"
                           for d in parts if isinstance(d, dict)}
    return {n for n in names if SHA256_DIGEST.fullmatch("sha256:" + n.rsplit("/")[-1])}


def _drop_stale(folder: Path, old: list[dict], kept: set[str]) -> None:
    """The blobs of the cosign manifests replaced (a bundle written again), where no new one
    shares them."""
    for stale in signature_blobs(folder, old) - kept:
        (folder / stale).unlink(missing_ok=True)
