"""Two images sharing layers, verified one after the other with the verify cache: the second
reads only its own new layer, and both verdicts equal a full scan (one ``docker save`` stream
read without the cache) bit for bit, including the libraries the new layer overwrites (with
another library; with a file that is no ELF), deletes (whiteout) and hides (opaque folder).

Exercises ``inv verify --image``'s layered road (edgevllm/verify/layered.py, verdictcache.py) on
the real engine: ``docker load`` of two images built from the same layers (real nvcc-built
libraries, tests/support/verify_layers.py), ``docker image inspect`` for their diff ids, the
local overlay2 layer store (each layer's tar-split headers and its libraries alone, mapped in
place; with ``EDGEVLLM_VERIFY_HASH_LAYERS=1`` each layer replayed and hashed to its diff id: the
same verdict), and the ``docker save`` road (known layers pass unread) when the store is not
used; ``--diff`` of the two reads each layer once."""

from __future__ import annotations

import uuid

import pytest

from edgevllm.specs.cuda import CudaArch
from edgevllm.verify.api import TargetInspect, verify
from edgevllm.verify.diff import diff_sources
from edgevllm.verify.judge import judge
from edgevllm.verify.layered import scan_layers
from edgevllm.verify.library import group_cubins
from edgevllm.verify.policy import load_policy
from edgevllm.verify.readers import library_keep, scan_image_stream
from edgevllm.verify.verdictcache import VerdictCache, cache_key
from support.checks import present
from support.platforms import native_arch
from support.verify_layers import (
    DELETED,
    HIDDEN,
    NOT_ELF_NOW,
    OVERWRITTEN,
    facts,
    layer_tars,
    save_archive,
    sha,
)

pytestmark = pytest.mark.e2e
SPARK = CudaArch(12, 1)


@pytest.fixture(scope="module")
def two_images(engine):
    """(A, B, the middle layer's diff id): A = lower + top, B = lower + top + middle."""
    tars = layer_tars()
    run = uuid.uuid4().hex[:8]
    tags = [f"edgevllm-test/verify-layers:a-{run}", f"edgevllm-test/verify-layers:b-{run}"]
    stacks = [[tars["lower"], tars["top"]], [tars["lower"], tars["top"], tars["middle"]]]
    for tag, layers in zip(tags, stacks, strict=True):
        archive = save_archive(layers, tag, native_arch())
        engine.load_from(lambda stdin, data=archive: stdin.write(data))
    yield tags[0], tags[1], sha(tars["middle"])
    for tag in tags:
        engine.remove_image(tag, force=True)


def full_scan(engine, image: str):
    """Today's road: one docker save stream, every layer read, no cache."""
    return scan_image_stream(engine, image, TargetInspect(SPARK))


def judged(reports) -> dict:
    verdict = judge(group_cubins(reports), SPARK, load_policy(), source="s", target="spark",
                    every_name=False)
    return verdict.to_json()


def test_the_second_image_reads_only_its_new_layer_from_the_layer_store(engine, two_images,
                                                                        tmp_path, monkeypatch):
    first, second, middle = two_images
    monkeypatch.setenv("EDGEVLLM_VERIFY_CACHE", str(tmp_path))
    one = verify("spark", image=first, engine=engine)
    assert one.reading.cached == [] and set(one.reading.read.values()) == {"layer store"}
    two = verify("spark", image=second, engine=engine)
    assert two.reading.read == {middle: "layer store"}
    assert two.reading.cached == one.reading.layers  # the shared layers: not read again
    assert "2 known to the verify cache, 1 read from the layer store" in two.reading.describe()
    again = verify("spark", image=second, engine=engine)
    assert again.reading.read == {} and again.to_json() == two.to_json()

    full = full_scan(engine, second)
    paths = [r.path for r in full]
    assert DELETED not in paths and HIDDEN not in paths and NOT_ELF_NOW not in paths
    assert next(r for r in full if r.path == OVERWRITTEN).arches("sass") == ["sm_120a"]
    cache = VerdictCache(tmp_path, cache_key(str(SPARK)), 1 << 30)
    cached, _ = scan_layers(engine, second, library_keep(TargetInspect(SPARK)), cache)
    assert facts(cached) == facts(full)
    assert judged(cached) == judged(full)
    assert not two.passed  # sm_120a does not run on GB10
    assert full_scan_verdict(engine, second) == two.to_json()


def full_scan_verdict(engine, image: str) -> dict:
    """``verify`` with the cache off and the layered road replaced by the full stream."""
    import edgevllm.verify.api as api

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(api, "scan_image", lambda eng, ref, inspect: full_scan(eng, ref))
        return verify("spark", image=image, engine=engine).to_json()


def test_the_hashed_replay_gives_what_the_libraries_alone_give(engine, two_images, monkeypatch):
    from edgevllm.image.layerstore import LocalLayerStore

    _, second, _ = two_images
    keep = library_keep(TargetInspect(SPARK))
    replayed = []
    real = LocalLayerStore.tar_blocks

    def counted(store, chain):
        replayed.append(chain)
        return real(store, chain)

    monkeypatch.setattr(LocalLayerStore, "tar_blocks", counted)
    alone, reading = scan_layers(engine, second, keep)
    assert set(reading.read.values()) == {"layer store"} and replayed == []
    monkeypatch.setenv("EDGEVLLM_VERIFY_HASH_LAYERS", "1")
    hashed, reading = scan_layers(engine, second, keep)
    assert set(reading.read.values()) == {"layer store"} and len(replayed) == 3
    assert facts(alone) == facts(hashed) == facts(full_scan(engine, second))
    assert judged(alone) == judged(full_scan(engine, second))


def test_the_docker_save_road_skips_known_layers_with_the_same_verdict(engine, two_images,
                                                                      tmp_path):
    first, second, middle = two_images
    keep = library_keep(TargetInspect(SPARK))
    cache = VerdictCache(tmp_path, cache_key(str(SPARK)), 1 << 30)
    _, reading = scan_layers(engine, first, keep, cache, store=False)
    assert set(reading.read.values()) == {"docker save"} and len(reading.read) == 2
    reports, reading = scan_layers(engine, second, keep, cache, store=False)
    assert reading.read == {middle: "docker save"} and len(reading.cached) == 2
    assert facts(reports) == facts(full_scan(engine, second))


def test_diff_of_two_images_reads_each_layer_once(engine, two_images, tmp_path, monkeypatch):
    first, second, middle = two_images
    monkeypatch.setenv("EDGEVLLM_VERIFY_CACHE", str(tmp_path))
    readings = []
    import edgevllm.verify.api as api

    real = api.verify

    def counted(*args, **kwargs):
        verdict = real(*args, **kwargs)
        readings.append(verdict.reading)
        return verdict

    monkeypatch.setattr(api, "verify", counted)
    diff = diff_sources("spark", first, second, engine=engine)
    assert [len(r.read) for r in readings] == [2, 1] and readings[1].read == {middle: "layer store"}
    changed = {change.path: (change.old, change.new) for change in diff.changes}
    assert present(changed["vllm/_C.abi3.so"][1]).startswith("none")
    assert changed["gone/libgone.so"][1] is None and changed["opq/libopq.so"][1] is None
