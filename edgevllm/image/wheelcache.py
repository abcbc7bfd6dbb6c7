"""Compiled wheels shared by compile key: one OCI artifact per key in a registry repository.

The artifact of compile key K in repository REF (``--wheel-cache REF``), tagged ``REF:K``:
  manifest  an OCI image manifest (``artifactType`` ARTIFACT_TYPE, annotation COMPILE_KEY_NOTE)
  config    the wheel list, JSON: ``{"schema": 1, "compile_key": K,
            "wheels": [{"name": "vllm-….whl", "sha256": "<64 hex>", "size": N}, …]}``
  layers    one blob per wheel, in the list's order, titled by its file name
A registry's answer is outside data: the manifest, the list and every wheel are checked (the
key, the names, each blob's digest against the list, each wheel's sha256 as it is written)
before the folder of wheels appears under its final name; anything else is one
``WheelCacheError`` line and nothing is left. The registry client is ``image/registry.py``'s.

Who is trusted: a compile key is computable from public inputs, so whoever can push to the
repository could write a key's artifact before the builder does, and "every sha256 checked" only
checks the wheels against their own list. A builder therefore signs the list (P-256 or Ed25519 over
``PAE(ARTIFACT_TYPE, list)``, the DSSE encoding ``inv sign`` uses: annotations SIGNATURE_NOTE
and KEYID_NOTE), and ``fetch`` takes an artifact only when a key it is given to trust signed it;
with no key to trust it takes nothing (builder/wheelcache.py: EDGEVLLM_WHEEL_CACHE_KEYS, and the
builder's own EDGEVLLM_SIGNING_KEY).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from pydantic import Field, ValidationError

from edgevllm.common import labels
from edgevllm.common.dataload import load_json
from edgevllm.common.errors import ConfigError, WheelCacheError
from edgevllm.common.fsutil import atomic_dir, sha256_file
from edgevllm.common.grammar import SHA256_DIGEST
from edgevllm.common.keys import PrivateKey, PublicKey, keyid, sign_bytes, verify_bytes
from edgevllm.common.schema import Strict, describe_validation_error, parse_json
from edgevllm.image.registry import (
    REPO_RE,
    check_registry,
    get_blob,
    get_manifest,
    put_blob,
    put_manifest,
)

SCHEMA = 1
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
ARTIFACT_TYPE = "application/vnd.edgevllm.compiled-wheels.v1+json"  # also the list's type
WHEEL_TYPE = "application/vnd.edgevllm.wheel.v1.zip"
TITLE = "org.opencontainers.image.title"
COMPILE_KEY_NOTE = labels.COMPILE_KEY
SIGNATURE_NOTE = labels.WHEELS_SIGNATURE  # base64 signature over PAE(type, wheel list)
KEYID_NOTE = labels.WHEELS_KEYID  # sha256 of the signing key's public DER
# pydantic checks it with Rust's regex, whose $ is the end of the text (no \Z there).
_KEY_PATTERN = r"^[0-9a-f]{16}$"
_KEY = re.compile(_KEY_PATTERN.replace("$", r"\Z"))
_WHEEL_NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*\.whl$"
_CHUNK = 1 << 20


class WheelEntry(Strict):
    name: str = Field(pattern=_WHEEL_NAME, max_length=255)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=1, le=1 << 40)


class WheelList(Strict):
    """The artifact's config: the compile key and its wheels, each with its sha256."""

    schema_: int = Field(alias="schema", ge=SCHEMA, le=SCHEMA)
    compile_key: str = Field(pattern=_KEY_PATTERN)
    wheels: list[WheelEntry] = Field(min_length=1, max_length=64)

    def raw(self) -> bytes:
        return json.dumps(self.model_dump(by_alias=True), sort_keys=True).encode()


@dataclass(frozen=True)
class Transfer:
    ref: str          # REF:KEY
    digest: str       # the manifest's
    action: str       # pushed | unchanged | kept (another build's wheels hold the tag) | fetched
    wheels: list[WheelEntry]


def check_ref(ref: str) -> tuple[str, str]:
    """``HOST[:PORT]/REPOSITORY`` → (host, repository); no scheme, tag or credentials."""
    where = f"--wheel-cache '{ref}'"
    if "@" in ref or "://" in ref:  # userinfo or a scheme: never echoed, it may hold a password
        raise ConfigError("--wheel-cache: give HOST[:PORT]/REPOSITORY, without a scheme, a "
                          "digest or credentials (e.g. 127.0.0.1:5000/edgevllm/wheels)")
    try:
        host, _, name = check_registry(ref).partition("/")
    except ConfigError as exc:  # its grammar's line names --registry; this is --wheel-cache
        raise ConfigError(f"{where}: {str(exc).partition(': ')[2]}") from None
    if not name or not REPO_RE.match(name):
        raise ConfigError(f"{where}: name a repository after the host "
                          "(e.g. registry.lan:5000/edgevllm/wheels)")
    return host, name


def wheel_list(folder: Path, key: str) -> WheelList:
    """The list of the wheels in ``folder`` (the compiled wheels of compile key ``key``)."""
    wheels = sorted(folder.glob("*.whl"))
    return WheelList.model_validate({"schema": SCHEMA, "compile_key": key, "wheels": [
        {"name": w.name, "sha256": sha256_file(w), "size": w.stat().st_size} for w in wheels]})


def manifest_for(listing: WheelList, signer: PrivateKey | None = None) -> bytes:
    config = listing.raw()
    notes = {COMPILE_KEY_NOTE: listing.compile_key}
    if signer is not None:
        notes |= {SIGNATURE_NOTE: base64.b64encode(sign_bytes(signer, _pae(config))).decode(),
                  KEYID_NOTE: keyid(signer.public_key())}
    return json.dumps({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": ARTIFACT_TYPE,
        "config": {"mediaType": ARTIFACT_TYPE, "digest": _sha(config), "size": len(config)},
        "layers": [{"mediaType": WHEEL_TYPE, "digest": f"sha256:{w.sha256}", "size": w.size,
                    "annotations": {TITLE: w.name}} for w in listing.wheels],
        "annotations": notes,
    }, sort_keys=True).encode()


def _same_signed(existing: bytes, manifest: bytes, listing: WheelList,
                 signer: PrivateKey | None) -> bool:
    """Whether the tag already holds these wheels, signed by this builder: the manifests equal
    but for the signature, which verifies with the signer's key (an ECDSA signature differs at
    every signing, an Ed25519 one does not)."""
    def unsigned(raw: bytes) -> object:
        found = load_json(raw, "the wheel cache tag's manifest")
        if isinstance(found, dict) and isinstance(found.get("annotations"), dict):
            found["annotations"].pop(SIGNATURE_NOTE, None)
        return found
    try:
        if unsigned(existing) != unsigned(manifest):
            return False
        if signer is None:
            return True
        found = load_json(existing, "the wheel cache tag's manifest")
        signature = found["annotations"][SIGNATURE_NOTE]
        return verify_bytes(signer.public_key(), base64.b64decode(signature, validate=True),
                            _pae(listing.raw()))
    except (ConfigError, ValueError, TypeError, KeyError):
        return False


def _pae(config: bytes) -> bytes:
    """DSSE's pre-authentication encoding of the wheel list: what a builder signs."""
    kind = ARTIFACT_TYPE.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(config), config)


def check_signature(raw: bytes, config: bytes, trusted: Sequence[PublicKey],
                    where: str) -> str:
    """The keyid of the trusted key that signed the wheel list; refused (one line) when no key
    is trusted, the artifact is unsigned, or no trusted key signed it."""
    if not trusted:
        raise WheelCacheError(f"{where}: no key is trusted for the wheel cache, and a compile "
                              "key's artifact may be written first by anyone who can push: set "
                              "EDGEVLLM_WHEEL_CACHE_KEYS to the builders' public keys")
    found = parse_json(raw, f"{where}: the manifest", WheelCacheError)
    notes = found.get("annotations") if isinstance(found, dict) else None
    signature = notes.get(SIGNATURE_NOTE) if isinstance(notes, dict) else None
    try:
        signed = base64.b64decode(signature, validate=True) if isinstance(signature, str) \
            else b""
    except (ValueError, TypeError):
        signed = b""
    for public in trusted if signed else []:
        if verify_bytes(public, signed, _pae(config)):
            return keyid(public)
    what = "is not signed" if not signed else "is not signed by a key you trust"
    raise WheelCacheError(f"{where} {what} (EDGEVLLM_WHEEL_CACHE_KEYS): refused, whoever wrote "
                          "it first")


def publish(ref: str, key: str, folder: Path, signer: PrivateKey | None = None
            ) -> Transfer:
    """Push the wheels of ``folder`` as key ``key``'s artifact, signed by ``signer``; an existing
    tag is never overwritten (a compile is not bit-reproducible: the first builder's wheels
    stay)."""
    host, name = check_ref(ref)
    listing = wheel_list(folder, key)
    manifest = manifest_for(listing, signer)
    where = f"{ref}:{key}"
    existing = get_manifest(host, name, key, OCI_MANIFEST)
    if existing is not None:
        action = "unchanged" if _same_signed(existing, manifest, listing, signer) else "kept"
        return Transfer(where, _sha(existing), action, listing.wheels)
    for wheel in listing.wheels:
        with open(folder / wheel.name, "rb") as data:
            put_blob(host, name, f"sha256:{wheel.sha256}", data, wheel.size)
    config = listing.raw()
    put_blob(host, name, _sha(config), config, len(config))
    return Transfer(where, put_manifest(host, name, key, manifest, OCI_MANIFEST), "pushed",
                    listing.wheels)


def fetch(ref: str, key: str, dest: Path, trusted: Sequence[PublicKey]) -> Transfer | None:
    """Key ``key``'s wheels from ``ref`` into ``dest``, signed by a ``trusted`` key and every one
    checked; None when the registry holds no artifact for the key. Refused (WheelCacheError):
    nothing in ``dest``."""
    host, name = check_ref(ref)
    where = f"{ref}:{key}"
    raw = get_manifest(host, name, key, OCI_MANIFEST)
    if raw is None:
        return None
    config_digest = config_of(raw, where)
    config = _blob_bytes(host, name, config_digest, where)
    listing = read_list(config, config_digest, key, where)
    check_signature(raw, config, trusted, where)
    check_layers(raw, listing, where)
    with atomic_dir(dest) as tmp:
        for wheel in listing.wheels:
            _download(host, name, wheel, tmp / wheel.name, where)
    return Transfer(where, _sha(raw), "fetched", listing.wheels)


def config_of(raw: bytes, where: str) -> str:
    """The digest of the wheel list a manifest names; refused unless it is this artifact type."""
    manifest = parse_json(raw, f"{where}: the manifest", WheelCacheError)
    config = manifest.get("config") if isinstance(manifest, dict) else None
    if (not isinstance(manifest, dict) or manifest.get("artifactType") != ARTIFACT_TYPE
            or not isinstance(config, dict) or config.get("mediaType") != ARTIFACT_TYPE):
        raise WheelCacheError(f"{where} is not a compiled-wheels artifact of edgevllm "
                              f"(artifactType {ARTIFACT_TYPE})")
    digest = config.get("digest")
    if not isinstance(digest, str) or not SHA256_DIGEST.fullmatch(digest):
        raise WheelCacheError(f"{where}: the manifest's config digest is not sha256:<64 hex>")
    return digest


def read_list(raw: bytes, digest: str, key: str, where: str) -> WheelList:
    """The wheel list, checked: its bytes are the manifest's digest, its key is ``key``."""
    if _sha(raw) != digest:
        raise WheelCacheError(f"{where}: the wheel list's sha256 is not the manifest's {digest} "
                              "(corrupted in the registry or on the way)")
    data = parse_json(raw, f"{where}: the wheel list", WheelCacheError)
    try:
        listing = WheelList.model_validate(data)
    except ValidationError as exc:
        raise WheelCacheError(f"{where}: the wheel list: "
                              f"{describe_validation_error(exc, WheelList)}") from None
    if listing.compile_key != key:
        raise WheelCacheError(f"{where} holds the wheels of compile key {listing.compile_key}, "
                              f"not {key}: refused")
    names = [w.name for w in listing.wheels]
    if len(set(names)) != len(names):
        raise WheelCacheError(f"{where}: the wheel list names a wheel twice")
    return listing


def check_layers(raw: bytes, listing: WheelList, where: str) -> None:
    """The manifest's layers are the list's wheels, one each, in order (name, digest, size)."""
    found = parse_json(raw, f"{where}: the manifest", WheelCacheError)
    layers = found.get("layers") if isinstance(found, dict) else None
    expected = [(w.name, f"sha256:{w.sha256}", w.size) for w in listing.wheels]
    found = [((layer.get("annotations") or {}).get(TITLE), layer.get("digest"), layer.get("size"))
             for layer in layers if isinstance(layer, dict)] if isinstance(layers, list) else []
    if found != expected:
        raise WheelCacheError(f"{where}: the manifest's layers are not the wheel list's wheels "
                              "(name, sha256, size)")


def _download(host: str, name: str, wheel: WheelEntry, path: Path, where: str) -> None:
    response = get_blob(host, name, f"sha256:{wheel.sha256}")
    if response is None:
        raise WheelCacheError(f"{where}: the registry lacks the blob of {wheel.name}")
    digest, written = hashlib.sha256(), 0
    with response, open(path, "wb") as out:
        for block in response.iter_content(_CHUNK):
            written += len(block)
            if written > wheel.size:
                break
            digest.update(block)
            out.write(block)
    if written != wheel.size or digest.hexdigest() != wheel.sha256:
        raise WheelCacheError(f"{where}: {wheel.name} is not the wheel its list names (sha256 "
                              f"{wheel.sha256[:16]}…, {wheel.size} bytes): refused")


def _blob_bytes(host: str, name: str, digest: str, where: str, limit: int = 1 << 20) -> bytes:
    response = get_blob(host, name, digest)
    if response is None:
        raise WheelCacheError(f"{where}: the registry lacks the wheel list {digest}")
    with response:
        data = response.raw.read(limit + 1, decode_content=True)
    if len(data) > limit:
        raise WheelCacheError(f"{where}: the wheel list is over {limit} bytes")
    return data


def _sha(raw: bytes) -> str:
    return "sha256:" + hashlib.sha256(raw).hexdigest()
