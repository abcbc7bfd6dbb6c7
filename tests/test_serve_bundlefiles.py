"""The offline bundle's signed manifest (serve/bundlefiles.py) and the model's hub layout
(serve/cache/hubfiles.py): real keys, real files, real huggingface_hub reading the result.
Whole bundles made from an image and deployed into the engine: tests/e2e/test_offline_bundle_e2e.py.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from edgevllm.common.errors import IntegrityError, OutputFolderError, SupplyChainError
from edgevllm.inspect.dsse import generate_key
from edgevllm.serve.bundlefiles import (
    MANIFEST_NAME,
    BundleFile,
    BundleImage,
    BundleManifest,
    BundleModel,
    check_out_folder,
    copy_checked,
    hash_file,
    sign_manifest,
)
from edgevllm.serve.cache.hubfiles import check_names, place, snapshot_files
from edgevllm.serve.deploy import verify_bundle
from support.offline import COMMIT, MODEL, make_hub_cache

PARTS = {
    "image/index.json": b'{"schemaVersion": 2}',
    "image/blobs/sha256/" + "a" * 64: os.urandom(4096),
    "recipe/tiny.yaml": b"name: tiny\n",
    "lock/edgevllm.lock.json": b'{"schema_version": 1}\n',
    "model/config.json": b'{"model_type": "tiny"}',
    "caches/tiny-0123456789abcdef.jitcache.tar": os.urandom(2048),
}


@pytest.fixture
def keys(tmp_path):
    private, public = generate_key(tmp_path / "keys" / "site.key")
    return private, public


def _bundle(folder: Path, key: Path) -> BundleManifest:
    files = []
    for relative, data in PARTS.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        files.append(BundleFile(path=relative, sha256=hash_file(path), size=len(data),
                                blob="b" * 40 if relative.startswith("model/") else None))
    manifest = BundleManifest(image=BundleImage(ref="tiny:1", id="sha256:" + "c" * 64),
                              recipe="recipe/tiny.yaml", target="thor",
                              lock="lock/edgevllm.lock.json",
                              caches="caches/tiny-0123456789abcdef.jitcache.tar",
                              model=BundleModel(repo=MODEL, commit=COMMIT, ref="main"),
                              files=files)
    sign_manifest(manifest, key, folder)
    return manifest


def test_a_whole_bundle_checks_with_the_signers_public_key(tmp_path, keys):
    manifest = _bundle(tmp_path / "b", keys[0])
    assert verify_bundle(tmp_path / "b", keys[1]) == manifest


@pytest.mark.parametrize("relative", sorted(PARTS), ids=lambda r: r.split("/")[0])
def test_one_changed_byte_in_any_part_is_refused_naming_the_file(tmp_path, keys, relative):
    _bundle(tmp_path / "b", keys[0])
    path = tmp_path / "b" / relative
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match="changed or damaged") as err:
        verify_bundle(tmp_path / "b", keys[1])
    assert str(path) in str(err.value)


@pytest.mark.parametrize("relative", sorted(PARTS), ids=lambda r: r.split("/")[0])
def test_a_cut_or_missing_part_is_refused_naming_the_file(tmp_path, keys, relative):
    _bundle(tmp_path / "b", keys[0])
    path = tmp_path / "b" / relative
    path.write_bytes(path.read_bytes()[:-1])
    with pytest.raises(IntegrityError, match="incomplete or changed") as err:
        verify_bundle(tmp_path / "b", keys[1])
    assert str(path) in str(err.value)
    path.unlink()
    with pytest.raises(IntegrityError, match="missing") as err:
        verify_bundle(tmp_path / "b", keys[1])
    assert str(path) in str(err.value)


def test_a_link_in_place_of_a_part_is_refused(tmp_path, keys):
    """A link could make the check read one file and the install another."""
    _bundle(tmp_path / "b", keys[0])
    path = tmp_path / "b" / "model" / "config.json"
    (tmp_path / "elsewhere.json").write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(IntegrityError, match="a link"):
        verify_bundle(tmp_path / "b", keys[1])


def test_a_bundle_signed_by_another_key_is_refused(tmp_path, keys):
    _bundle(tmp_path / "b", keys[0])
    _, other = generate_key(tmp_path / "keys" / "other.key")
    with pytest.raises(SupplyChainError, match="another key"):
        verify_bundle(tmp_path / "b", other)


def test_a_manifest_changed_after_signing_is_refused(tmp_path, keys):
    """The attacker's move: change a file and its sha256 in the manifest alike."""
    _bundle(tmp_path / "b", keys[0])
    envelope_path = tmp_path / "b" / MANIFEST_NAME
    envelope = json.loads(envelope_path.read_text())
    payload = json.loads(base64.b64decode(envelope["payload"]))
    (tmp_path / "b" / "recipe" / "tiny.yaml").write_bytes(b"name: evil\n")
    payload["files"][2]["sha256"] = hash_file(tmp_path / "b" / "recipe" / "tiny.yaml")
    envelope["payload"] = base64.b64encode(json.dumps(payload).encode()).decode()
    envelope_path.write_text(json.dumps(envelope))
    with pytest.raises(SupplyChainError, match="changed after signing"):
        verify_bundle(tmp_path / "b", keys[1])


def test_a_folder_without_the_manifest_is_no_bundle(tmp_path, keys):
    _bundle(tmp_path / "b", keys[0])
    (tmp_path / "b" / MANIFEST_NAME).unlink()
    with pytest.raises(IntegrityError, match="incomplete"):
        verify_bundle(tmp_path / "b", keys[1])


@pytest.mark.parametrize("path", ["model/../../etc/passwd", "/etc/passwd", "elsewhere/x",
                                  "model//x", "image/a\nb"])
def test_a_signed_path_out_of_the_bundle_is_refused(tmp_path, keys, path):
    """Even the signer cannot name a file outside the bundle's folders."""
    with pytest.raises(ValueError, match="relative path"):
        BundleFile(path=path, sha256="a" * 64, size=1)


def test_names_a_model_would_be_placed_under_are_plain(tmp_path):
    check_names(MODEL, COMMIT, "main", [("config.json", "b" * 40)], "b")
    for model, commit, ref, files in [
            ("../x", COMMIT, "main", []), (MODEL, "main", None, []),
            (MODEL, COMMIT, "../../x", []), (MODEL, COMMIT, None, [("../x", "b" * 40)]),
            (MODEL, COMMIT, None, [("x", "../../b")])]:
        with pytest.raises(IntegrityError):
            check_names(model, commit, ref, files, "b")


def test_a_partial_copy_resumes_keeping_whole_files(tmp_path):
    source = tmp_path / "source.bin"
    source.write_bytes(os.urandom(3 << 20))
    whole, cut = tmp_path / "out" / "whole.bin", tmp_path / "out" / "cut.bin"
    copy_checked(source, whole)
    before = whole.stat().st_ino
    cut.write_bytes(source.read_bytes()[: 1 << 20])  # an interrupted earlier copy
    assert copy_checked(source, whole) == copy_checked(source, cut) == hash_file(source)
    assert whole.stat().st_ino == before, "a whole file was written again"
    assert cut.read_bytes() == source.read_bytes()
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]


def test_a_same_size_file_with_other_bytes_is_written_again(tmp_path):
    source = tmp_path / "source.bin"
    source.write_bytes(os.urandom(4096))
    final = tmp_path / "final.bin"
    final.write_bytes(os.urandom(4096))
    copy_checked(source, final)
    assert final.read_bytes() == source.read_bytes()


def test_the_out_folder_is_new_or_a_bundles(tmp_path):
    check_out_folder(tmp_path / "new")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("x")
    with pytest.raises(OutputFolderError, match="thesis.tex"):
        check_out_folder(tmp_path / "mine")


def test_the_model_round_trips_into_a_hub_cache_huggingface_hub_reads(tmp_path):
    """Read from one hub cache without the network, placed into another: huggingface_hub
    finds the same files there by the model's name and by its commit."""
    from huggingface_hub import snapshot_download, try_to_load_from_cache

    make_hub_cache(tmp_path / "here")
    commit, files = snapshot_files(tmp_path / "here", MODEL, None)
    assert commit == COMMIT
    assert sorted(f.path for f in files) == ["config.json", "model.safetensors",
                                             "tokenizer/vocab.txt"]
    node = tmp_path / "node"
    snapshot = place(node, MODEL, commit, "main", [(f.path, f.blob, f.source) for f in files],
                     lambda source, final: copy_checked(source, final))
    found = try_to_load_from_cache(MODEL, "tokenizer/vocab.txt", cache_dir=str(node / "hub"))
    assert found and Path(found).read_bytes() == b"a\nb\nc\n"
    assert Path(snapshot_download(MODEL, local_files_only=True,
                                  cache_dir=str(node / "hub"))) == snapshot
    for f in files:
        assert (snapshot / f.path).is_symlink()
        assert (snapshot / f.path).read_bytes() == f.source.read_bytes()
    place(node, MODEL, commit, "main", [(f.path, f.blob, f.source) for f in files],
          lambda source, final: copy_checked(source, final))  # again: nothing changes


def test_a_model_not_in_the_cache_is_one_line(tmp_path):
    from edgevllm.common.errors import MissingInputError

    with pytest.raises(MissingInputError, match="inv model-fetch"):
        snapshot_files(tmp_path / "empty", MODEL, None)


def test_a_model_whose_download_was_cut_short_is_one_line(tmp_path):
    """A snapshot link whose blob is missing: finish the download first, never a half model."""
    from edgevllm.common.errors import MissingInputError

    snapshot = make_hub_cache(tmp_path / "here")
    (snapshot / "model.safetensors").resolve().unlink()
    with pytest.raises(MissingInputError, match="model.safetensors: its blob is missing"):
        snapshot_files(tmp_path / "here", MODEL, None)
