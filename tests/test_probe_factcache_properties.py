"""Property-based tests (Hypothesis) of the probe cache's reader (edgevllm/probe/factcache.py):
a record is outside data. The seed is a record of facts shaped as the in-image check script
reports them; each mutated record, as found on disk (its checksum then fails) or re-sealed with
a valid header and checksum (a hostile writer), reads back as facts (one JSON object) or as a
miss, never as an exception, within the memory bound of ``bounded`` and Hypothesis's deadline."""

from __future__ import annotations

import hashlib
import json

from hypothesis import given

from edgevllm.probe.factcache import FORMAT, FactCache
from support.properties import PROPERTY, bounded, mutated

KEY = "f" * 64
FACTS = {"target_arch": "12.1a", "python": {"version": "3.13.5", "machine": "aarch64"},
         "imports": {"vllm": {"ok": True, "version": "0.33.0", "file": "/opt/venv/vllm"},
                     "flashinfer": {"ok": False, "error": "libcuda.so.1: cannot open"}},
         "torch": {"cuda": "13.0", "arch_list": ["sm_90", "sm_120"]},
         "env": {"LD_PRELOAD": None}, "lock": {"exists": True, "valid": True},
         "vllm_extensions": {"dir": "/opt/venv/vllm", "items": [{"path": "_C.abi3.so",
                                                                  "ok": True}]}}


def seed() -> bytes:
    body = json.dumps(FACTS, sort_keys=True, separators=(",", ":")).encode()
    header = {"format": FORMAT, "key": KEY, "sha256": hashlib.sha256(body).hexdigest()}
    return json.dumps(header).encode() + b"\n" + body


def _read_back(folder, data: bytes):
    cache = FactCache(folder, 1 << 30)
    (folder / f"{KEY}.facts").write_bytes(data)
    found = bounded(cache.get, KEY)
    assert found is None or isinstance(found, dict)
    return found


@PROPERTY
@given(data=mutated(seed()))
def test_a_damaged_record_is_a_miss(tmp_path_factory, data):
    found = _read_back(tmp_path_factory.mktemp("probe"), data)
    assert found is None or found == FACTS


@PROPERTY
@given(body=mutated(seed().partition(b"\n")[2]))
def test_a_hostile_record_with_a_valid_checksum_reads_back_or_is_a_miss(tmp_path_factory, body):
    header = {"format": FORMAT, "key": KEY, "sha256": hashlib.sha256(body).hexdigest()}
    _read_back(tmp_path_factory.mktemp("probe"), json.dumps(header).encode() + b"\n" + body)
