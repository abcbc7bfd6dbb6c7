"""Property-based tests (Hypothesis) of the verify cache's reader (edgevllm/verify/verdictcache.py):
a record is outside data. Seeds are real records (a layer of nvcc-built libraries, read by the one
layer reader); each mutated record, as found on disk (its checksum then fails) or re-sealed with
a valid header and checksum (a hostile writer), must read back as a layer or as a miss, never as
an exception, within the memory bound of ``bounded`` and Hypothesis's deadline."""

from __future__ import annotations

import functools
import hashlib
import io
import json

from hypothesis import given

from edgevllm.specs.cuda import CudaArch
from edgevllm.verify.api import TargetInspect
from edgevllm.verify.archive import Layer, read_layer
from edgevllm.verify.layered import record_of
from edgevllm.verify.readers import library_keep
from edgevllm.verify.verdictcache import FORMAT, VerdictCache, encode
from support.properties import PROPERTY, bounded, mutated
from support.verify_layers import layer_tars

KEY = "k" * 32


@functools.lru_cache(maxsize=None)
def seed() -> tuple[str, bytes]:
    """(the layer's diff id, its record): the lower layer, with a whiteout and an opaque folder."""
    tars = layer_tars()
    layer = record_of(read_layer(io.BytesIO(tars["lower"]), "seed",
                                 library_keep(TargetInspect(CudaArch(12, 1))), True))
    layer.whiteouts, layer.opaque = ["a/gone"], ["b"]
    return layer.sha256, encode(layer, KEY, layer.sha256)


def _read_back(tmp_path, name: str, data: bytes):
    cache = VerdictCache(tmp_path, KEY, 1 << 30)
    path = cache._path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    found = bounded(cache.get, name)
    assert found is None or isinstance(found, Layer)
    return found


@PROPERTY
@given(data=mutated(seed()[1]))
def test_a_damaged_record_is_a_miss(tmp_path_factory, data):
    name, good = seed()
    found = _read_back(tmp_path_factory.mktemp("cache"), name, data)
    assert found is None or data == good


@PROPERTY
@given(body=mutated(seed()[1].partition(b"\n")[2]))
def test_a_hostile_record_with_a_valid_checksum_reads_back_or_is_a_miss(tmp_path_factory, body):
    name, _ = seed()
    header = {"format": FORMAT, "key": KEY, "name": name,
              "sha256": hashlib.sha256(body).hexdigest()}
    data = json.dumps(header, separators=(",", ":")).encode() + b"\n" + body
    _read_back(tmp_path_factory.mktemp("cache"), name, data)
