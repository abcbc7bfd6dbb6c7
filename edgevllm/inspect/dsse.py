"""DSSE envelopes signed with an offline Ed25519 key (https://github.com/secure-systems-lab/dsse).

The signature covers ``PAE(payloadType, payload)``, never the JSON around it, so an envelope can
be re-serialised freely. Keys are PEM files (PKCS#8 private, SubjectPublicKeyInfo public) as
``openssl genpkey -algorithm ed25519`` writes them; ``keyid`` is the sha256 of the public key's
DER bytes, so a verifier can tell which key an envelope claims without trusting it.
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path
from typing import Callable

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from edgevllm.common.archives import read_file
from edgevllm.common.dataload import load_json
from edgevllm.common.errors import ConfigError, SupplyChainError
from edgevllm.common.fsutil import atomic_write_bytes

IN_TOTO_PAYLOAD = "application/vnd.in-toto+json"
KEY_LIMIT = 64 << 10  # a PEM Ed25519 key is under 200 bytes
ENVELOPE_LIMIT = 16 << 20  # a provenance envelope: a few KiB


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: what is signed."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def load_private_key(path: Path | str) -> Ed25519PrivateKey:
    key = _load(path)
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"--key {path}: not an Ed25519 private key; make one with "
                          "'inv keygen --out KEY' or 'openssl genpkey -algorithm ed25519'")
    return key


def load_public_key(path: Path | str) -> Ed25519PublicKey:
    """A public key file, or the public half of a private key file."""
    key = _load(path)
    if isinstance(key, Ed25519PrivateKey):
        return key.public_key()
    if not isinstance(key, Ed25519PublicKey):
        raise ConfigError(f"--key {path}: not an Ed25519 key (PEM)")
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
    raise ConfigError(f"--key {path}: not a PEM key without a passphrase")


def keyid(public: Ed25519PublicKey) -> str:
    der = public.public_bytes(serialization.Encoding.DER,
                              serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


def generate_key(private_path: Path | str) -> tuple[Path, Path]:
    """A new Ed25519 key: the private PEM (mode 0600) and ``<name>.pub`` beside it."""
    private_path = Path(private_path)
    if private_path.exists():
        raise ConfigError(f"{private_path} already exists; pick another --out (keys are never "
                          "overwritten)")
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    atomic_write_bytes(private_path, pem)
    os.chmod(private_path, 0o600)
    public_path = private_path.with_name(private_path.name + ".pub")
    atomic_write_bytes(public_path, public)
    return private_path, public_path


def sign(payload: bytes, key: Ed25519PrivateKey, payload_type: str = IN_TOTO_PAYLOAD) -> dict:
    signature = key.sign(pae(payload_type, payload))
    return {"payloadType": payload_type,
            "payload": base64.b64encode(payload).decode(),
            "signatures": [{"keyid": keyid(key.public_key()),
                            "sig": base64.b64encode(signature).decode()}]}


def verify(envelope: dict, public: Ed25519PublicKey, origin: str) -> bytes:
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
        try:
            public.verify(signature, pae(payload_type, payload))
            return payload
        except InvalidSignature:
            continue
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
