"""The verify cache (edgevllm/verify/verdictcache.py) and the layered scan's stacking
(edgevllm/verify/layered.py): records read back exactly; records stacked give a full scan's
libraries and verdict, bit for bit, with overwritten, deleted and opaque-folder libraries; the
cache holds to its ceiling (least recently used first); its key moves with verify's sources,
rule tables, target and ceiling; a corrupt or hostile record is a miss, never trusted.

Layers are tars built here holding the nvcc-built libraries of tests/support/cuda_libs.py; the
full scan is the docker-save archive of those layers read by ``scan_tar_stream``."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
from pathlib import Path

import pytest

from edgevllm.common.errors import ConfigError
from edgevllm.specs.cuda import CudaArch
from edgevllm.verify import verdictcache
from edgevllm.verify.api import TargetInspect
from edgevllm.verify.archive import Layer, apply, read_layer
from edgevllm.verify.judge import judge
from edgevllm.verify.layered import record_of
from edgevllm.verify.library import group_cubins
from edgevllm.verify.policy import load_policy
from edgevllm.verify.readers import library_keep, scan_tar_stream
from edgevllm.verify.verdictcache import VerdictCache, cache_key, decode, digest_of, encode
from support.cuda_libs import nvcc_libs
from support.fake_rootfs import tar_of
from support.verify_layers import (
    DELETED,
    HIDDEN,
    NOT_ELF_NOW,
    OVERWRITTEN,
    SITE,
    facts,
    layer_tars,
    save_archive,
)

SPARK = CudaArch(12, 1)


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def stacked(records: list[Layer]):
    files: dict = {}
    for record in records:
        apply(files, record)
    return sorted(files.values(), key=lambda r: r.path)


def test_records_stacked_are_a_full_scan_bit_for_bit():
    inspect = TargetInspect(SPARK)
    named = layer_tars()
    tars = [named["lower"], named["middle"], named["top"]]
    full = scan_tar_stream(io.BytesIO(save_archive(tars)), "archive", inspect)
    records = []
    for tar in tars:
        layer = record_of(read_layer(io.BytesIO(tar), "layer", library_keep(inspect), True))
        data = encode(layer, "k", layer.sha256)
        records.append(decode(data, "k", _sha(tar)))
    cached = stacked(records)
    assert facts(cached) == facts(full)
    paths = [r.path for r in full]
    assert DELETED not in paths and HIDDEN not in paths and NOT_ELF_NOW not in paths
    assert next(r for r in full if r.path == OVERWRITTEN).arches("sass") == ["sm_120a"]
    policy = load_policy()
    verdicts = [judge(group_cubins(r), SPARK, policy, source="s", target="spark").to_json()
                for r in (full, cached)]
    assert verdicts[0] == verdicts[1]
    # a record keeps only the library-named paths stacking can need
    assert "etc/notes.txt" not in records[0].present
    assert records[1].present == {OVERWRITTEN, NOT_ELF_NOW}


def _record(tmp_path: Path, name: str = "a") -> tuple[str, Layer]:
    library = nvcc_libs()["sm_121a"].read_bytes()
    tar = tar_of({f"{SITE}/vllm/_C.abi3.so": library, "f": name.encode()})
    layer = record_of(read_layer(io.BytesIO(tar), "layer", library_keep(TargetInspect(SPARK)),
                                 True))
    return layer.sha256, layer


def test_a_record_reads_back_exactly(tmp_path):
    cache = VerdictCache(tmp_path, "key", 1 << 30)
    name, layer = _record(tmp_path)
    assert cache.get(name) is None
    assert cache.put(name, layer)
    back = cache.get(name)
    assert back is not None and facts(back.kept.values()) == facts(layer.kept.values())
    assert (back.present, back.whiteouts, back.opaque) == (layer.present, [], [])
    assert VerdictCache(tmp_path, "another key", 1 << 30).get(name) is None


def test_a_record_of_a_real_closure_layers_size_reads_back(tmp_path):
    """The real vLLM 0.33.0 image's closure layer (8.5 GB: torch, cuBLAS, cuDNN...) gave a
    record of 258,894 values that was written and then read as a miss on every build (a data
    file's bound of 200,000 values): whatever ``put`` keeps, ``get`` must give back."""
    from edgevllm.verify.fatbin import FatbinEntry
    from edgevllm.verify.library import LibraryReport

    libraries = {}
    for index in range(40):
        report = LibraryReport(f"{SITE}/nvidia/cu13/lib/libbig{index}.so.13", 1 << 30)
        report.entries = [FatbinEntry("sass", 121, "a", "zstd", unit, ".nv_fatbin", unit * 64,
                                      4096, 8192) for unit in range(800)]
        libraries[report.path] = report
    layer = Layer(kept=libraries, present=set(libraries))
    name = _sha(b"a closure layer of a real image's size")
    data = encode(layer, "key", name)
    assert data.count(b",") > 250_000 and len(data) < verdictcache.ENTRY_LIMIT
    cache = VerdictCache(tmp_path, "key", 1 << 30)
    assert cache.put(name, layer)
    back = cache.get(name)
    assert back is not None
    assert facts(sorted(back.kept.values(), key=lambda r: r.path)) == \
        facts(sorted(layer.kept.values(), key=lambda r: r.path))


def test_the_cache_keeps_to_its_ceiling_least_recently_used_first(tmp_path):
    records = [_record(tmp_path, str(i)) for i in range(4)]
    size = len(encode(records[0][1], "key", records[0][0]))
    cache = VerdictCache(tmp_path, "key", size * 3 + size // 2)
    for age, (name, layer) in enumerate(records[:3]):
        assert cache.put(name, layer)
        os.utime(cache._path(name), (1000 + age, 1000 + age))
    assert cache.get(records[0][0]) is not None  # used now: the newest
    assert cache.put(*records[3])
    kept = {name for name, _ in records if cache.get(name) is not None}
    assert kept == {records[0][0], records[2][0], records[3][0]}  # the oldest use went
    assert sum(p.stat().st_size for p in tmp_path.rglob("*.rec")) <= cache.limit
    stranger = tmp_path / "key" / "notes.txt"  # what the cache did not write stays
    stranger.write_text("mine")
    VerdictCache(tmp_path, "key", 1).prune()
    assert stranger.exists() and not list(tmp_path.rglob("*.rec"))


def test_the_key_moves_with_verify_its_rules_the_target_and_the_ceiling(tmp_path, monkeypatch):
    files = verdictcache.rules_files()
    names = {p.name for p in files}
    assert {"policy.yaml", "policy-stock.yaml", "cuda.py", "fatbin.py", "verdictcache.py"} <= names
    copies = [Path(shutil.copy(p, tmp_path / f"{i}-{p.name}")) for i, p in enumerate(files)]
    before = digest_of(copies)
    policy = next(p for p in copies if p.name.endswith("-policy.yaml"))
    policy.write_text(policy.read_text() + "\n# one more line\n")
    assert digest_of(copies) != before
    spark = cache_key("12.1")
    assert cache_key("11.0") != spark
    monkeypatch.setenv("EDGEVLLM_MAX_LIBRARY_SIZE", "1G")
    assert cache_key("12.1") != spark
    monkeypatch.setattr(verdictcache, "_rules_digest", lambda: "another verify")
    monkeypatch.delenv("EDGEVLLM_MAX_LIBRARY_SIZE")
    assert cache_key("12.1") != spark


def _rewrite(path: Path, body: bytes, key: str = "key", name: str | None = None) -> None:
    """A record with a valid header and checksum around ``body``: only its content is wrong."""
    header = {"format": verdictcache.FORMAT, "key": key, "name": name,
              "sha256": hashlib.sha256(body).hexdigest()}
    path.write_bytes(json.dumps(header, separators=(",", ":")).encode() + b"\n" + body)


HOSTILE_BODIES = [
    b"[]", b"{}", b'{"libraries":"x","present":[],"whiteouts":[],"opaque":[]}',
    b'{"libraries":[["p",-1,"ok","library",[],[]]],"present":[],"whiteouts":[],"opaque":[]}',
    b'{"libraries":[["p",1,"ok","rootkit",[],[]]],"present":[],"whiteouts":[],"opaque":[]}',
    b'{"libraries":[["p\\u0000",1,"ok","library",[],[]]],"present":[],"whiteouts":[],"opaque":[]}',
    b'{"libraries":[["p",1,"ok","library",[["sass",1e400,"a","none",0,"s",0,0,0]],[]]],'
    b'"present":[],"whiteouts":[],"opaque":[]}',
    b'{"libraries":[["p",1,"ok","library",[["' + b"x" * 100 + b'",1,"a","none",0,"s",0,0,0]],'
    b'[]]],"present":[],"whiteouts":[],"opaque":[]}',
    b'{"libraries":[["p",1,"ok","library",[["sass",-5,"a","none",0,"s",0,0,0]],[]]],'
    b'"present":[],"whiteouts":[],"opaque":[]}',
    b'{"libraries":[["p",1,"ok","library",[],[[0,[1]]]]],"present":[],"whiteouts":[],'
    b'"opaque":[]}',
    b'{"libraries":[],"present":[7],"whiteouts":[],"opaque":[]}',
    b"[" * 100000 + b"]" * 100000,
]


@pytest.mark.parametrize("body", HOSTILE_BODIES, ids=range(len(HOSTILE_BODIES)))
def test_a_hostile_record_is_a_miss_and_is_replaced(tmp_path, body):
    cache = VerdictCache(tmp_path, "key", 1 << 30)
    name, layer = _record(tmp_path)
    cache.put(name, layer)
    _rewrite(cache._path(name), body, name=name)
    assert cache.get(name) is None
    assert cache.put(name, layer) and cache.get(name) is not None


def test_a_corrupt_record_is_a_miss(tmp_path, monkeypatch):
    cache = VerdictCache(tmp_path, "key", 1 << 30)
    name, layer = _record(tmp_path)
    cache.put(name, layer)
    path = cache._path(name)
    good = path.read_bytes()
    flipped = bytearray(good)
    flipped[-10] ^= 1
    head, _, body = good.partition(b"\n")
    for damaged in (bytes(flipped), good[:len(good) // 2], b"", body,
                    head.replace(b'"key"', b'"kex"') + b"\n" + body):
        path.write_bytes(damaged)
        assert cache.get(name) is None
    path.write_bytes(good)
    assert cache.get(name) is not None
    monkeypatch.setattr(verdictcache, "ENTRY_LIMIT", len(good) - 1)  # over the bound: unread
    assert cache.get(name) is None and not cache.put(name, layer)
    assert cache.get("sha256:../../etc/passwd") is None
    assert not cache.put("../escape", layer) and not list(tmp_path.parent.glob("escape*"))


def test_the_ceiling_setting(monkeypatch, tmp_path):
    monkeypatch.setenv("EDGEVLLM_VERIFY_CACHE", str(tmp_path))
    monkeypatch.setenv("EDGEVLLM_VERIFY_CACHE_MAX", "0")
    assert VerdictCache.for_target("12.1") is None
    monkeypatch.setenv("EDGEVLLM_VERIFY_CACHE_MAX", "2M")
    cache = VerdictCache.for_target("12.1")
    assert cache is not None and cache.limit == 2 << 20 and cache.root == tmp_path
    monkeypatch.setenv("EDGEVLLM_VERIFY_CACHE_MAX", "lots")
    with pytest.raises(ConfigError, match="EDGEVLLM_VERIFY_CACHE_MAX='lots'"):
        VerdictCache.for_target("12.1")


def test_a_wheel_is_remembered_by_its_sha256(tmp_path, monkeypatch):
    import zipfile

    from edgevllm.verify import api

    wheel = tmp_path / "vllm-1.0-cp38-abi3-linux_aarch64.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.write(nvcc_libs()["sm_121a"], "vllm/_C.abi3.so")
        archive.write(nvcc_libs()["multi_gencode"], "vllm/libmore.so")
    monkeypatch.setenv("EDGEVLLM_VERIFY_CACHE", str(tmp_path / "cache"))
    inspect = TargetInspect(SPARK)
    first = api.scan_path(wheel, inspect)
    assert facts(first) == facts(api.scan_wheel(wheel, inspect))
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert [p.name for p in (tmp_path / "cache").rglob("*.rec")] == [f"{digest}.rec"]

    def unread(*_):
        raise AssertionError("the wheel was read again")

    monkeypatch.setattr(api, "scan_wheel", unread)
    assert facts(api.scan_path(wheel, inspect)) == facts(first)
    verdict = api.verify("spark", path=wheel)
    assert verdict.scanned == 2 and verdict.passed is not None
