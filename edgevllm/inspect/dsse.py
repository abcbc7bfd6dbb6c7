"""DSSE envelopes signed with an offline key (https://github.com/secure-systems-lab/dsse).

The signature covers ``PAE(payloadType, payload)``, never the JSON around it, so an envelope can
be re-serialised freely. Keys are PEM files (PKCS#8 private, SubjectPublicKeyInfo public): ECDSA
P-256 (``inv keygen``'s default, what cosign signs and verifies: SHA-256, DER signatures) or
Ed25519 (older edgevllm keys: edgevllm verifies them, cosign does not). ``keyid`` is the sha256
of the public key's DER bytes, so a verifier can tell which key an envelope claims without
trusting it; cosign leaves it empty, which matches any key.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Callable

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from edgevllm.common.archives import read_file
from edgevllm.common.dataload import load_json
from edgevllm.common.errors import ConfigError, SupplyChainError
from edgevllm.common.fsutil import atomic_open, atomic_write_bytes
from edgevllm.common.keys import PrivateKey, PublicKey, keyid, p256, sign_bytes, verify_bytes

IN_TOTO_PAYLOAD = "application/vnd.in-toto+json"
KEY_LIMIT = 64 << 10  # a PEM P-256 or Ed25519 key is under 300 bytes
ENVELOPE_LIMIT = 16 << 20  # a provenance envelope: a few KiB
KINDS = ("p256", "ed25519")
COSIGN_CANNOT = ("an Ed25519 key: edgevllm verifies its signatures, cosign and the admission "
                 "controllers built on it do not (sigstore/cosign#5074); inv keygen makes a "
                 "P-256 key they verify")


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: what is signed."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def load_private_key(path: Path | str) -> PrivateKey:
    key = _load(path)
    if not (isinstance(key, Ed25519PrivateKey) or
            (isinstance(key, ec.EllipticCurvePrivateKey) and p256(key))):
        raise ConfigError(f"--key {path}: not an ECDSA P-256 or Ed25519 private key; make one "
                          "with 'inv keygen --out KEY'")
    return key


def load_public_key(path: Path | str) -> PublicKey:
    """A public key file, or the public half of a private key file."""
    key = _load(path)
    if isinstance(key, (Ed25519PrivateKey, ec.EllipticCurvePrivateKey)):
        key = key.public_key()
    if not (isinstance(key, Ed25519PublicKey) or
            (isinstance(key, ec.EllipticCurvePublicKey) and p256(key))):
        raise ConfigError(f"--key {path}: not an ECDSA P-256 or Ed25519 key (PEM)")
    return key


def _load(path: Path | str) -> object:
    try:  # bounded: --key /dev/zero is one line, not all of memory
        data = read_file(path, KEY_LIMIT, "--key", ConfigError)
    except OSError as exc:
        raise ConfigError(f"--key {path}: cannot read the key file ({exc.strerror})") from None
    loaders: list[Callable[[], object]] = [
        lambda: serialization.load_pem_private_key(data, password=None),
        lambda: serialization.load_pem_public_key(data)]
    for load in loaders:
        try:
            return load()
        except (ValueError, TypeError):
            continue
    if b"SIGSTORE PRIVATE KEY" in data:
        raise ConfigError(f"--key {path}: a cosign private key (encrypted): sign with cosign, "
                          "or verify with its public key (cosign.pub)")
    raise ConfigError(f"--key {path}: not a PEM key without a passphrase")


def generate_key(private_path: Path | str, kind: str = "p256") -> tuple[Path, Path]:
    """A new key (ECDSA P-256, or Ed25519): the private PEM (PKCS#8, mode 0600) and
    ``<name>.pub`` beside it (SubjectPublicKeyInfo, what ``cosign verify --key`` reads)."""
    private_path = Path(private_path)
    if kind not in KINDS:
        raise ConfigError(f"--kind '{kind}': one of {', '.join(KINDS)}")
    public_path = private_path.with_name(private_path.name + ".pub")
    for path in (private_path, public_path):  # a site's public key beside it is a key too
        if path.exists() or path.is_symlink():
            raise ConfigError(f"{path} already exists; pick another --out (keys are never "
                              "overwritten)")
    key: PrivateKey = ec.generate_private_key(ec.SECP256R1()) if kind == "p256" \
        else Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    with atomic_open(private_path) as handle:
        os.fchmod(handle.fileno(), 0o600)  # before a byte of the key is in it
        handle.write(pem)
    atomic_write_bytes(public_path, public)
    return private_path, public_path


def sign(payload: bytes, key: PrivateKey, payload_type: str = IN_TOTO_PAYLOAD) -> dict:
    signature = sign_bytes(key, pae(payload_type, payload))
    return {"payloadType": payload_type,
            "payload": base64.b64encode(payload).decode(),
            "signatures": [{"keyid": keyid(key.public_key()),
                            "sig": base64.b64encode(signature).decode()}]}


def verify(envelope: dict, public: PublicKey, origin: str) -> bytes:
    """The payload, once a signature by ``public`` over its PAE checks; else one line."""
    try:
        payload_type = envelope["payloadType"]
        payload = base64.b64decode(envelope["payload"], validate=True)
        signatures = [(s.get("keyid", ""), base64.b64decode(s["sig"], validate=True))
                      for s in envelope["signatures"]]
        if not isinstance(payload_type, str) or not all(isinstance(k, str) for k, _ in signatures):
            raise TypeError("a field of the wrong kind")
        pae(payload_type, payload)  # a lone surrogate cannot be encoded: ValueError here
    except (KeyError, TypeError, ValueError, AttributeError):
        raise SupplyChainError(f"{origin}: not a DSSE envelope (payloadType, payload, "
                               "signatures)") from None
    wanted = keyid(public)
    for claimed, signature in signatures:
        if claimed and claimed != wanted:
            continue
        if verify_bytes(public, signature, pae(payload_type, payload)):
            return payload
    raise SupplyChainError(f"{origin}: no valid signature by key {wanted[:16]}…: the statement "
                           "was changed after signing, or signed with another key")


def read_envelope(path: Path | str) -> dict:
    try:
        data = load_json(read_file(path, ENVELOPE_LIMIT, "the provenance", SupplyChainError),
                         str(path), ConfigError)
    except OSError as exc:
        raise SupplyChainError(f"{path}: cannot read the provenance ({exc.strerror})") from None
    except ConfigError as exc:  # nested thousands deep, a value bomb, not JSON at all
        raise SupplyChainError(f"{path}: not JSON; the provenance envelope is damaged "
                               f"({str(exc).removeprefix(f'{path}: ')})") from None
    if not isinstance(data, dict):
        raise SupplyChainError(f"{path}: not a DSSE envelope")
    return data
