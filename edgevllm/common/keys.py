"""Signing keys: ECDSA P-256 (what cosign signs and verifies: SHA-256, DER signatures) and
Ed25519 (older edgevllm keys). One place says how each kind signs and checks bytes, for the DSSE
envelopes (inspect/dsse.py), the cosign registry layout (inspect/cosign.py) and the wheel cache's
signed list (image/wheelcache.py)."""

from __future__ import annotations

import hashlib

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

PrivateKey = Ed25519PrivateKey | ec.EllipticCurvePrivateKey
PublicKey = Ed25519PublicKey | ec.EllipticCurvePublicKey


def p256(key: object) -> bool:
    return isinstance(key, (ec.EllipticCurvePrivateKey, ec.EllipticCurvePublicKey)) and \
        isinstance(key.curve, ec.SECP256R1)


def is_ed25519(key: object) -> bool:
    return isinstance(key, (Ed25519PrivateKey, Ed25519PublicKey))


def sign_bytes(key: PrivateKey, data: bytes) -> bytes:
    """Ed25519 over the bytes; ECDSA P-256 over their SHA-256 (DER), as cosign signs."""
    if isinstance(key, Ed25519PrivateKey):
        return key.sign(data)
    return key.sign(data, ec.ECDSA(hashes.SHA256()))


def verify_bytes(public: PublicKey, signature: bytes, data: bytes) -> bool:
    try:
        if isinstance(public, Ed25519PublicKey):
            public.verify(signature, data)
        else:
            public.verify(signature, data, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return False
    return True


def keyid(public: PublicKey) -> str:
    """The sha256 of the public key's DER (SubjectPublicKeyInfo) bytes."""
    der = public.public_bytes(serialization.Encoding.DER,
                              serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()
