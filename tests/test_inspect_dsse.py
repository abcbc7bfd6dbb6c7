"""DSSE envelopes with an offline Ed25519 key: PAE as the spec writes it, sign / verify, tamper."""

from __future__ import annotations

import base64
import json
import stat

import pytest

from edgevllm.common.errors import ConfigError, SupplyChainError
from edgevllm.inspect import dsse


def test_pae_is_the_specs_encoding():
    # The DSSE protocol document's own example.
    assert dsse.pae("http://example.com/HelloWorld", b"hello world") == \
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"


@pytest.fixture
def keys(tmp_path):
    private, public = dsse.generate_key(tmp_path / "signing.pem")
    return private, public


def test_keygen_writes_a_private_key_only_its_owner_reads(keys):
    private, public = keys
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert b"PUBLIC KEY" in public.read_bytes()
    assert dsse.keyid(dsse.load_public_key(public)) == \
        dsse.keyid(dsse.load_private_key(private).public_key())


def test_keygen_never_overwrites(keys):
    with pytest.raises(ConfigError, match="already exists"):
        dsse.generate_key(keys[0])


def test_round_trip_and_tampered_payload(keys):
    private, public = keys
    envelope = dsse.sign(b'{"a":1}', dsse.load_private_key(private))
    assert dsse.verify(envelope, dsse.load_public_key(public), "env") == b'{"a":1}'
    envelope["payload"] = base64.b64encode(b'{"a":2}').decode()
    with pytest.raises(SupplyChainError, match="env: no valid signature"):
        dsse.verify(envelope, dsse.load_public_key(public), "env")


def test_changed_payload_type_fails(keys):
    private, public = keys
    envelope = dsse.sign(b"x", dsse.load_private_key(private))
    envelope["payloadType"] = "text/plain"
    with pytest.raises(SupplyChainError, match="no valid signature"):
        dsse.verify(envelope, dsse.load_public_key(public), "env")


def test_another_key_fails(keys, tmp_path):
    other, _ = dsse.generate_key(tmp_path / "other.pem")
    envelope = dsse.sign(b"x", dsse.load_private_key(other))
    with pytest.raises(SupplyChainError, match="another key"):
        dsse.verify(envelope, dsse.load_public_key(keys[1]), "env")


def test_not_an_envelope_and_not_a_key(tmp_path, keys):
    with pytest.raises(SupplyChainError, match="not a DSSE envelope"):
        dsse.verify({"payload": "!!"}, dsse.load_public_key(keys[1]), "env")
    junk = tmp_path / "junk.pem"
    junk.write_text("not a key")
    with pytest.raises(ConfigError, match="not a PEM key"):
        dsse.load_private_key(junk)
    with pytest.raises(ConfigError, match="not an ECDSA P-256 or Ed25519 private key"):
        dsse.load_private_key(keys[1])
    bad = tmp_path / "env.json"
    bad.write_text(json.dumps([1]))
    with pytest.raises(SupplyChainError, match="not a DSSE envelope"):
        dsse.read_envelope(bad)


def test_a_key_that_never_ends_is_one_line():
    """--key /dev/zero: read to the key's limit (64 KiB), not until memory runs out."""
    with pytest.raises(ConfigError, match="--key /dev/zero: over the 64 KiB"):
        dsse.load_private_key("/dev/zero")
    with pytest.raises(ConfigError, match="--key /dev/zero: over the 64 KiB"):
        dsse.load_public_key("/dev/zero")


def test_an_envelope_nested_thousands_deep_is_one_line(tmp_path):
    path = tmp_path / "deep.intoto.jsonl"
    path.write_text('{"payload": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(SupplyChainError, match="not JSON; the provenance envelope is damaged"):
        dsse.read_envelope(path)
