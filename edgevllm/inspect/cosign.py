"""Signatures and attestations in cosign's registry layout, written and checked through the
registry API v2 (``image/registry.py``: docker's login, plain HTTP on loopback only).

For an image pushed as ``HOST/REPO@sha256:HEX`` (the registry's manifest digest), in REPO:

- ``sha256-HEX.sig``: an OCI image manifest; each layer is a "simple signing" payload
  (``application/vnd.dev.cosign.simplesigning.v1+json``: ``critical.image.docker-manifest-digest``
  names the image) with the base64 signature of those bytes in the layer annotation
  ``dev.cosignproject.cosign/signature``. What ``cosign sign --key`` writes, ``cosign verify``
  reads.
- ``sha256-HEX.att``: an OCI image manifest; each layer a DSSE envelope
  (``application/vnd.dsse.envelope.v1+json``) of an in-toto Statement whose subject is the
  manifest digest, annotated ``predicateType``. What ``cosign attest`` writes,
  ``cosign verify-attestation --type …`` reads.

A layer already there for another signer, or another predicate type, is kept (as cosign
appends); ours replace those of the same predicate type (as ``cosign attest --replace``). The
OCI 1.1 referrers API is not used: Debian's registry (distribution 2.8) has none, and cosign 2
reads these tags by default. Shapes: docs/inside.md.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field

from edgevllm.common.dataload import load_json
from edgevllm.common.errors import ConfigError, RegistryError, SupplyChainError
from edgevllm.common.grammar import SHA256_DIGEST
from edgevllm.common.keys import PrivateKey, PublicKey, sign_bytes, verify_bytes
from edgevllm.image.registry import (
    MANIFEST_ACCEPT,
    REPO_RE,
    check_registry,
    get_blob,
    get_manifest,
    put_blob,
    put_manifest,
)
from edgevllm.inspect import dsse

SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
DSSE_LAYER = "application/vnd.dsse.envelope.v1+json"
SIGNATURE_NOTE = "dev.cosignproject.cosign/signature"
PREDICATE_NOTE = "predicateType"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
SIGNATURE_TYPE = "cosign container image signature"
STATEMENT_TYPES = ("https://in-toto.io/Statement/v1", "https://in-toto.io/Statement/v0.1")
CYCLONEDX = "https://cyclonedx.org/bom"
SLSA_PROVENANCE_1 = "https://slsa.dev/provenance/v1"
BLOB_LIMIT = 64 << 20  # an SBOM of a large image: a few MiB


def _sha(raw: bytes) -> str:
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def split_ref(ref: str) -> tuple[str, str, str]:
    """``HOST[:PORT]/REPO:TAG`` or ``…@sha256:HEX`` → (host, repo, tag or digest)."""
    host, _, rest = ref.partition("/")
    name, at, digest = rest.partition("@")
    if not at:
        head, colon, tag = rest.rpartition(":")
        name, digest = (head, tag) if colon and "/" not in tag else (rest, "latest")
    try:
        check_registry(host)
    except ConfigError:
        raise ConfigError(f"'{ref}': give the pushed image as HOST[:PORT]/REPO:TAG or "
                          "HOST/REPO@sha256:…") from None
    if not REPO_RE.match(name) or (at and not SHA256_DIGEST.fullmatch(digest)):
        raise ConfigError(f"'{ref}': not HOST/REPO:TAG or HOST/REPO@sha256:<64 hex>")
    return host, name, digest


def tag_for(digest: str, suffix: str) -> str:
    """``sha256:HEX`` → ``sha256-HEX.sig`` / ``.att``: where cosign looks."""
    return f"{digest.replace(':', '-')}.{suffix}"


# --- writing -------------------------------------------------------------------------------------
def simple_signing(dest: str, digest: str) -> bytes:
    """The payload ``cosign sign`` signs for ``dest@digest`` (its field order)."""
    return json.dumps({"critical": {"identity": {"docker-reference": dest},
                                    "image": {"docker-manifest-digest": digest},
                                    "type": SIGNATURE_TYPE},
                       "optional": None}, separators=(",", ":")).encode()


def statement(dest: str, digest: str, predicate_type: str, predicate: object) -> dict:
    """An in-toto Statement v1 about the image ``dest@digest``."""
    return {"_type": STATEMENT_TYPES[0],
            "subject": [{"name": dest, "digest": {"sha256": digest.split(":", 1)[1]}}],
            "predicateType": predicate_type, "predicate": predicate}


def envelope(payload: bytes, key: PrivateKey) -> dict:
    """A DSSE envelope as cosign writes it: keyid left empty (cosign's verifier compares a
    keyid to its own fingerprint, not edgevllm's)."""
    signature = sign_bytes(key, dsse.pae(dsse.IN_TOTO_PAYLOAD, payload))
    return {"payloadType": dsse.IN_TOTO_PAYLOAD, "payload": base64.b64encode(payload).decode(),
            "signatures": [{"keyid": "", "sig": base64.b64encode(signature).decode()}]}


Layer = tuple[dict, bytes | None]  # the descriptor, and its bytes when they are to be uploaded


def signature_layer(dest: str, digest: str, key: PrivateKey) -> Layer:
    payload = simple_signing(dest, digest)
    note = base64.b64encode(sign_bytes(key, payload)).decode()
    return ({"mediaType": SIMPLE_SIGNING, "size": len(payload), "digest": _sha(payload),
             "annotations": {SIGNATURE_NOTE: note}}, payload)


def attestation_layer(dest: str, digest: str, predicate_type: str, predicate: object,
                      key: PrivateKey) -> Layer:
    payload = json.dumps(statement(dest, digest, predicate_type, predicate),
                         separators=(",", ":")).encode()
    blob = json.dumps(envelope(payload, key), separators=(",", ":")).encode()
    return ({"mediaType": DSSE_LAYER, "size": len(blob), "digest": _sha(blob),
             "annotations": {SIGNATURE_NOTE: "", PREDICATE_NOTE: predicate_type}}, blob)


def _manifest(layers: list[dict]) -> tuple[bytes, bytes]:
    """The OCI manifest over ``layers`` and its config (go-containerregistry's empty image
    config with the layers as diff ids, as cosign writes it)."""
    config = json.dumps({"architecture": "", "created": "0001-01-01T00:00:00Z",
                         "history": [{"created": "0001-01-01T00:00:00Z"}], "os": "",
                         "rootfs": {"type": "layers", "diff_ids": [d["digest"] for d in layers]},
                         "config": {}}, separators=(",", ":")).encode()
    raw = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                      "config": {"mediaType": OCI_CONFIG, "size": len(config),
                                 "digest": _sha(config)},
                      "layers": layers}, separators=(",", ":")).encode()
    return raw, config


def signature_manifest(layers: list[dict]) -> tuple[bytes, bytes]:
    """The manifest cosign writes over ``layers``, and its config (an OCI layout's too)."""
    return _manifest(layers)


def _layers_of(raw: bytes | None, where: str) -> list[dict]:
    found = load_json(raw, where, RegistryError) if raw else {}
    layers = found.get("layers") if isinstance(found, dict) else None
    return [d for d in layers if isinstance(d, dict)] if isinstance(layers, list) else []


def _replaced(old: dict, new: list[dict]) -> bool:
    notes = old.get("annotations")
    kind = notes.get(PREDICATE_NOTE) if isinstance(notes, dict) else None
    kinds = {d["annotations"].get(PREDICATE_NOTE) for d in new} - {None}
    return old in new or kind in kinds  # the same layer, or an attestation of the same type


def put_layers(host: str, name: str, tag: str, layers: list[Layer]) -> str:
    """``tag`` holds what it held, less what ``layers`` replace, plus ``layers``; its digest."""
    new = [descriptor for descriptor, _ in layers]
    kept = [d for d in _layers_of(get_manifest(host, name, tag, OCI_MANIFEST), f"{name}:{tag}")
            if not _replaced(d, new)]
    for descriptor, blob in layers:
        if blob is not None:
            put_blob(host, name, descriptor["digest"], blob, len(blob))
    raw, config = _manifest(kept + new)
    put_blob(host, name, _sha(config), config, len(config))
    return put_manifest(host, name, tag, raw, OCI_MANIFEST)


def attach(ref: str, digest: str, key: PrivateKey,
           predicates: dict[str, object]) -> list[tuple[str, str]]:
    """Sign ``ref``'s image (``digest``) and attest each predicate, cosign's way: the refs
    written, with their manifest digests."""
    host, name, _ = split_ref(ref)
    dest = f"{host}/{name}"
    written = []
    for suffix, layers in (
            ("sig", [signature_layer(dest, digest, key)]),
            ("att", [attestation_layer(dest, digest, kind, predicate, key)
                     for kind, predicate in predicates.items()])):
        tag = tag_for(digest, suffix)
        written.append((f"{dest}:{tag}", put_layers(host, name, tag, layers)))
    return written


# --- checking ------------------------------------------------------------------------------------
@dataclass
class Attached:
    """What the registry holds for one image, checked with one public key."""

    ref: str
    digest: str
    signatures: int = 0
    predicates: dict[str, object] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def resolve(ref: str) -> tuple[str, str, str]:
    """(host, repo, manifest digest) of the pushed image ``ref``."""
    host, name, reference = split_ref(ref)
    raw = get_manifest(host, name, reference, MANIFEST_ACCEPT)
    if raw is None:
        raise RegistryError(f"{ref}: the registry holds no such image")
    if reference.startswith("sha256:") and _sha(raw) != reference:
        raise RegistryError(f"{ref}: the registry answered a manifest of digest {_sha(raw)}")
    return host, name, _sha(raw)


def _blob(host: str, name: str, descriptor: dict, where: str) -> bytes:
    digest = descriptor.get("digest")
    if not isinstance(digest, str) or not SHA256_DIGEST.fullmatch(digest):
        raise SupplyChainError(f"{where}: a layer without a sha256 digest")
    response = get_blob(host, name, digest)
    if response is None:
        raise SupplyChainError(f"{where}: layer {digest[:19]}… is missing from the registry")
    data = bytearray()
    for block in response.iter_content(1 << 20):
        data += block
        if len(data) > BLOB_LIMIT:
            raise SupplyChainError(f"{where}: layer {digest[:19]}… is over {BLOB_LIMIT >> 20} MiB")
    if _sha(bytes(data)) != digest:
        raise SupplyChainError(f"{where}: layer {digest[:19]}…: its bytes do not hash to its "
                               "digest")
    return bytes(data)


def check(ref: str, public: PublicKey) -> Attached:
    """Every signature and attestation cosign's layout holds for ``ref``, checked with
    ``public``: a layer that fails is a problem (cosign would skip it; edgevllm refuses)."""
    host, name, digest = resolve(ref)
    found = Attached(ref, digest)
    for suffix, one in (("sig", _check_signature), ("att", _check_attestation)):
        tag = tag_for(digest, suffix)
        where = f"{host}/{name}:{tag}"
        layers = _layers_of(get_manifest(host, name, tag, OCI_MANIFEST), where)
        if not layers:
            found.problems.append(f"{where}: nothing there (no cosign "
                                  f"{'signature' if suffix == 'sig' else 'attestation'})")
        for index, descriptor in enumerate(layers):
            try:
                one(found, descriptor, _blob(host, name, descriptor, f"{where} layer {index}"),
                    public, f"{where} layer {index}")
            except SupplyChainError as exc:
                found.problems.append(str(exc))
    return found


def _check_signature(found: Attached, descriptor: dict, blob: bytes, public: PublicKey,
                     where: str) -> None:
    if descriptor.get("mediaType") != SIMPLE_SIGNING:
        raise SupplyChainError(f"{where}: not a simple signing payload")
    notes = descriptor.get("annotations")
    note = notes.get(SIGNATURE_NOTE) if isinstance(notes, dict) else None
    try:
        signature = base64.b64decode(note if isinstance(note, str) else "", validate=True)
    except ValueError:
        signature = b""
    if not signature or not verify_bytes(public, signature, blob):
        raise SupplyChainError(f"{where}: the signature does not check with this key: the "
                               "payload was changed, or signed with another key")
    payload = load_json(blob, where, SupplyChainError)
    image = payload.get("critical", {}).get("image", {}) if isinstance(payload, dict) else {}
    named = image.get("docker-manifest-digest") if isinstance(image, dict) else None
    if named != found.digest:
        raise SupplyChainError(f"{where}: signed for image {named}, not {found.digest}")
    found.signatures += 1


def _check_attestation(found: Attached, descriptor: dict, blob: bytes, public: PublicKey,
                       where: str) -> None:
    if descriptor.get("mediaType") != DSSE_LAYER:
        raise SupplyChainError(f"{where}: not a DSSE envelope layer")
    outer = load_json(blob, where, SupplyChainError)
    if not isinstance(outer, dict):
        raise SupplyChainError(f"{where}: not a DSSE envelope")
    inner = load_json(dsse.verify(outer, public, where), where, SupplyChainError)
    if not isinstance(inner, dict) or inner.get("_type") not in STATEMENT_TYPES:
        raise SupplyChainError(f"{where}: not an in-toto Statement")
    subjects = inner.get("subject") if isinstance(inner.get("subject"), list) else []
    hexes = {s.get("digest", {}).get("sha256") for s in subjects or []
             if isinstance(s, dict) and isinstance(s.get("digest"), dict)}
    if found.digest.split(":", 1)[1] not in hexes:
        raise SupplyChainError(f"{where}: attests another image, not {found.digest}")
    kind = inner.get("predicateType")
    if not isinstance(kind, str):
        raise SupplyChainError(f"{where}: the Statement names no predicateType")
    found.predicates[kind] = inner.get("predicate")
