"""JIT cache bundles: what a harvest keeps, and what every reader refuses.

The caches are a folder laid out as a harvest copies them out of a container, holding real device
code built with nvcc 13.0 (tests/support/cuda_libs.py): a raw sm_121a cubin as Triton's cache holds
one, an sm_121a shared object as FlashInfer's JIT builds one, an sm_110a one (a build for Thor,
which must not ride along in a Spark bundle) and opaque compute-cache files. No Docker here; the
harvest from a container and the seeding are in tests/e2e/test_warm_harvest.py.
"""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from edgevllm.common.errors import MissingInputError, RecipeError
from edgevllm.serve.cache.bundle import (
    MANIFEST,
    BundleKey,
    bundle_key,
    check_bundle,
    model_revision,
    read_manifest,
    seed_stream,
)
from edgevllm.serve.cache.harvest import bundle_folder
from support.checks import present
from support.cuda_libs import nvcc_cubin, nvcc_libs

IMAGE = "sha256:" + "ab" * 32
OTHER_IMAGE = "sha256:" + "cd" * 32
KEY = BundleKey(image_id=IMAGE, recipe="qwen3-8b", model="Qwen/Qwen3-8B", model_revision="",
                target="spark", cuda_arch="12.1a")
CACHES = {"triton": "/root/.triton", "flashinfer": "/root/.cache/flashinfer",
          "compute": "/root/.nv/ComputeCache"}


def _caches(root: Path) -> Path:
    libs = nvcc_libs()
    files = {
        "triton/cache/k1/scale.cubin": nvcc_cubin("121a").read_bytes(),
        "flashinfer/121a/sampling/sampling.so": libs["sm_121a"].read_bytes(),
        "flashinfer/110a/sampling/sampling.so": libs["sm_110a"].read_bytes(),
        "compute/index": b"\x01\x02index",
        "compute/7f/3e": bytes(range(256)) * 40,
    }
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    (root / "triton" / "cache" / "latest").symlink_to("k1")
    return root


@pytest.fixture
def bundle(tmp_path) -> Path:
    out = tmp_path / "out" / "b.jitcache.tar"
    bundle_folder(_caches(tmp_path / "caches"), KEY, CACHES, out)
    return out


def test_harvest_lists_every_file_with_its_sha256_and_leaves_out_another_arch(bundle):
    manifest = check_bundle(bundle, KEY)
    by_path = {e.path: e for e in manifest.entries}
    assert sorted(by_path) == ["caches/compute/7f/3e", "caches/compute/index",
                               "caches/flashinfer/121a/sampling/sampling.so",
                               "caches/triton/cache/k1/scale.cubin"]
    assert by_path["caches/triton/cache/k1/scale.cubin"].kind == "cubin"
    assert by_path["caches/triton/cache/k1/scale.cubin"].level == "native"
    assert by_path["caches/flashinfer/121a/sampling/sampling.so"].kind == "library"
    assert by_path["caches/compute/index"].kind == "file"
    assert by_path["caches/compute/7f/3e"].size == 10240
    left = "\n".join(manifest.left_out)
    assert "caches/flashinfer/110a/sampling/sampling.so" in left and "sm_121" in left
    assert "caches/triton/cache/latest: a symlink" in left
    # nothing but the bundle is left where it was written
    assert [p.name for p in bundle.parent.iterdir()] == [bundle.name]


def _rewrite(bundle: Path, change) -> Path:
    """A copy of the bundle with each (name, data) passed through ``change``."""
    out = bundle.with_name("changed.jitcache.tar")
    with tarfile.open(bundle) as src, tarfile.open(out, "w") as dst:
        for member in src.getmembers():
            data = present(src.extractfile(member)).read()
            for name, body in change(member.name, data):
                info = tarfile.TarInfo(name)
                info.size = len(body)
                dst.addfile(info, io.BytesIO(body))
    return out


def _refused(path: Path, key: BundleKey = KEY) -> str:
    with pytest.raises(RecipeError) as caught:
        check_bundle(path, key)
    assert caught.value.exit_code == 11
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_flipped_byte_is_refused(bundle):
    def flip(name, data):
        if name.endswith("scale.cubin"):
            data = data[:100] + bytes([data[100] ^ 1]) + data[101:]
        yield name, data
    message = _refused(_rewrite(bundle, flip))
    assert "scale.cubin does not match its sha256" in message


def test_a_bundle_of_another_image_arch_or_model_is_refused(bundle):
    other_image = BundleKey(**{**KEY.__dict__, "image_id": OTHER_IMAGE})
    assert f"made for image {IMAGE}, not {OTHER_IMAGE}" in _refused(bundle, other_image)
    thor = BundleKey(**{**KEY.__dict__, "target": "thor", "cuda_arch": "11.0a"})
    assert "made for CUDA arch 12.1a, not 11.0a" in _refused(bundle, thor)
    model = BundleKey(**{**KEY.__dict__, "model": "Qwen/Qwen3-0.6B"})
    assert "made for model Qwen/Qwen3-8B" in _refused(bundle, model)
    revision = BundleKey(**{**KEY.__dict__, "model_revision": "abc123"})
    assert "made for model revision (none), not abc123" in _refused(bundle, revision)


def test_members_the_manifest_does_not_list_or_misses_are_refused(bundle):
    def extra(name, data):
        yield name, data
        if name == MANIFEST:
            yield "caches/triton/cache/k1/added.cubin", b"x"
    assert "added.cubin is not in its manifest" in _refused(_rewrite(bundle, extra))

    def drop(name, data):
        if not name.endswith("index"):
            yield name, data
    assert "1 files of its manifest are missing" in _refused(_rewrite(bundle, drop))


def test_device_code_for_another_arch_is_refused_even_with_a_matching_sha256(bundle, tmp_path):
    """A manifest rewritten to list a Thor build (with its true sha256) is still refused."""
    thor_lib = nvcc_libs()["sm_110a"].read_bytes()

    def swap(name, data):
        if name == MANIFEST:
            manifest = json.loads(data)
            for entry in manifest["entries"]:
                if entry["path"].endswith("sampling.so"):
                    import hashlib
                    entry.update(size=len(thor_lib), sha256=hashlib.sha256(thor_lib).hexdigest())
            data = json.dumps(manifest).encode()
        elif name.endswith("sampling.so"):
            data = thor_lib
        yield name, data
    assert "holds no code that runs on sm_121" in _refused(_rewrite(bundle, swap))


@pytest.mark.parametrize("change, said", [
    (lambda m: m.update(entries=[{"path": "caches/x/../../etc/passwd", "size": 1,
                                  "sha256": "0" * 64}]), "entries.0.path"),
    (lambda m: m.update(entries=[{"path": "caches/x/a", "size": 1 << 40,
                                  "sha256": "0" * 64}]), "entries.0.size"),
    (lambda m: m["caches"].update({"../../etc": "/root/x"}), "caches"),
    (lambda m: m["caches"].update({"x": "/root/../../etc"}), "caches"),
    (lambda m: m["caches"].update({"x": "relative/path"}), "caches.x"),
    (lambda m: m.update(image_id="latest"), "image_id"),
    (lambda m: m.update(extra_field=1), "extra_field"),
    (lambda m: m.update(format="other/2"), "format"),
])
def test_a_bad_manifest_is_one_line(bundle, change, said):
    def edit(name, data):
        if name == MANIFEST:
            manifest = json.loads(data)
            change(manifest)
            data = json.dumps(manifest).encode()
        yield name, data
    message = _refused(_rewrite(bundle, edit))
    assert "manifest.json" in message and said in message


def test_not_a_bundle_is_one_line(tmp_path, bundle):
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"not a tar at all" * 100)
    assert "not a readable tar" in _refused(junk) or "first member" in _refused(junk)
    with pytest.raises(MissingInputError, match="missing.tar: no such file") as caught:
        check_bundle(tmp_path / "missing.tar", KEY)
    assert caught.value.exit_code == 2
    cut = tmp_path / "cut.jitcache.tar"
    cut.write_bytes(bundle.read_bytes()[:bundle.stat().st_size // 2])
    message = _refused(cut)
    assert "cut short" in message or "missing" in message or "sha256" in message


def test_seed_stream_puts_each_file_at_its_container_path(bundle, tmp_path):
    out = io.BytesIO()
    skipped = seed_stream(bundle, read_manifest(bundle),
                          {"triton": "/root/.triton", "flashinfer": "/cache/fi"}, out)
    assert skipped == ["compute"]
    out.seek(0)
    with tarfile.open(fileobj=out) as tar:
        names = sorted(tar.getnames())
        cubin = present(tar.extractfile("root/.triton/cache/k1/scale.cubin")).read()
    assert names == ["cache/fi/121a/sampling/sampling.so", "root/.triton/cache/k1/scale.cubin"]
    assert cubin == nvcc_cubin("121a").read_bytes()


def test_the_key_of_a_launch_names_its_model_revision():
    assert model_revision(["vllm", "serve", "m", "--revision", "r1"], {}) == "r1"
    assert model_revision(["vllm", "serve", "m", "--revision=r2"], {"revision": "x"}) == "r2"
    assert model_revision(["vllm", "serve", "m"], {"revision": "r3"}) == "r3"
    assert model_revision(["vllm", "serve", "m"], {}) == ""

    class Rendered:
        name, model, target, values = "r", "org/m", "thor", {}
        command = ["vllm", "serve", "org/m"]
    key = bundle_key(Rendered, IMAGE)
    assert (key.cuda_arch, key.model, key.model_revision) == ("11.0a", "org/m", "")


def test_copies_of_a_bundle_check_alike(bundle, tmp_path):
    copy = tmp_path / "copy.jitcache.tar"
    shutil.copyfile(bundle, copy)
    assert check_bundle(copy, KEY).model_dump() == check_bundle(bundle, KEY).model_dump()


def test_a_file_name_the_bundle_cannot_hold_is_left_out_and_shown_escaped(tmp_path):
    caches = tmp_path / "caches"
    (caches / "triton").mkdir(parents=True)
    (caches / "triton" / "ok").write_bytes(b"kept")
    (caches / "triton" / "bad\x1b[2Jname").write_bytes(b"left out")
    out = tmp_path / "b.jitcache.tar"
    manifest = bundle_folder(caches, KEY, CACHES, out)
    assert [e.path for e in manifest.entries] == ["caches/triton/ok"]
    assert manifest.left_out == ["caches/triton/bad\\x1b[2Jname: a name the bundle cannot hold"]
    assert check_bundle(out, KEY).entries == manifest.entries


def _rewritten(bundle: Path, out: Path, extra: tarfile.TarInfo, entry: dict) -> Path:
    """The bundle with ``extra`` added as a member and ``entry`` listed in its manifest."""
    with tarfile.open(bundle) as src:
        members = [(m, present(src.extractfile(m)).read()) for m in src]
    manifest = json.loads(members[0][1])
    manifest["entries"].append(entry)
    data = json.dumps(manifest).encode()
    head = tarfile.TarInfo(MANIFEST)
    head.size = len(data)
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as dst:
        dst.addfile(head, io.BytesIO(data))
        for member, body in members[1:]:
            dst.addfile(member, io.BytesIO(body))
        dst.addfile(extra)
    return out


def test_a_sparse_member_is_refused_before_its_holes_are_read(bundle, tmp_path):
    """A 3 KB-scale addition declaring 3.2 GB of holes (GNU sparse), listed in the manifest as a
    cubin: refused at its header (was: 3.2 GB of zeros read, and held in memory for an ELF)."""
    import hashlib

    size = 3_435_973_836
    sparse = tarfile.TarInfo("caches/triton/cache/k1/huge.cubin")
    sparse.pax_headers = {"GNU.sparse.map": f"{size},0", "GNU.sparse.size": str(size),
                          "GNU.sparse.name": sparse.name}
    entry = {"path": sparse.name, "size": size, "sha256": hashlib.sha256(b"").hexdigest(),
             "kind": "cubin"}
    hostile = _rewritten(bundle, tmp_path / "sparse.jitcache.tar", sparse, entry)
    assert hostile.stat().st_size - bundle.stat().st_size < 8 << 10
    with pytest.raises(RecipeError, match="huge.cubin' is a sparse file"):
        check_bundle(hostile, KEY)


def test_a_link_in_a_bundle_is_refused(bundle, tmp_path):
    link = tarfile.TarInfo("caches/compute/token")
    link.type, link.linkname = tarfile.SYMTYPE, "/root/.cache/huggingface/token"
    entry = {"path": link.name, "size": 0, "sha256": "0" * 64, "kind": "file"}
    hostile = _rewritten(bundle, tmp_path / "link.jitcache.tar", link, entry)
    with pytest.raises(RecipeError, match="compute/token' is a link"):
        check_bundle(hostile, KEY)
