"""``inv bundle`` then ``inv deploy --from`` end to end, the deploy in a network namespace with no
route (``unshare -n``, as root: the docker socket is a unix socket and still answers).

What stands in for what: the image is a few-MB image of the suite's own (support/publish_images.py
``unique_image``, so the engine surely lacks it after it is removed); the model is a tiny fake
repo in a temporary Hugging Face cache (support/offline.py: a config, a tokenizer file, a few-KB
safetensors file), standing in for a real model's weights. Everything else is real: the engine's
``docker save`` / ``docker load``, the OCI layout, the signing key, huggingface_hub reading the
node's cache. Python's audit hook records every ``socket.connect`` the deploy makes to anything
but a unix socket: there must be none.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from edgevllm.inspect.cosignlayout import signature_blobs
from edgevllm.inspect.dsse import generate_key
from edgevllm.serve.bundlefiles import MANIFEST_NAME, hash_file
from edgevllm.serve.deploy import verify_bundle
from edgevllm.serve.offlinebundle import BundleRequest, make_bundle
from support.inprocess import exit_code
from support.offline import MODEL, make_hub_cache, write_recipe
from support.publish_images import NoSaveEngine, remove_everything, unique_image

pytestmark = pytest.mark.e2e

# Runs the CLI with an audit hook; writes the non-unix connects it saw to $CONNECTS at exit.
RUNNER = """
import atexit, json, os, socket, sys
seen = []
def hook(event, args):
    if event == "socket.connect" and args[0].family != socket.AF_UNIX:
        seen.append(repr(args[1]))
sys.addaudithook(hook)
atexit.register(lambda: open(os.environ["CONNECTS"], "w").write(json.dumps(seen)))
if os.environ.get("PROBE_CONNECT"):
    socket.socket().connect_ex(("127.0.0.1", 9))
from edgevllm.cli import main
sys.argv = ["edgevllm", *sys.argv[1:]]
main()
"""


def _deploy(tmp_path: Path, argv: list[str], no_network: bool = True,
            probe: bool = False) -> tuple[subprocess.CompletedProcess, list[str]]:
    if no_network and (os.geteuid() != 0 or not shutil.which("unshare")):
        pytest.fail("the offline deploy test runs the deploy in 'unshare -n': run the suite as "
                    "root with util-linux's unshare installed")
    connects = tmp_path / "connects.json"
    env = {**os.environ, "CONNECTS": str(connects), "EDGEVLLM_CACHE": str(tmp_path / "cache")}
    env.pop("HF_HOME", None)
    if probe:
        env["PROBE_CONNECT"] = "1"
    prefix = ["unshare", "-n"] if no_network else []
    proc = subprocess.run([*prefix, sys.executable, "-c", RUNNER, *argv], capture_output=True,
                          text=True, timeout=600, env=env)
    return proc, json.loads(connects.read_text()) if connects.exists() else ["no record"]


def test_the_audit_hook_sees_a_connect(tmp_path):
    """The hook the deploy runs under does record a TCP connect (else 'none seen' proves
    nothing)."""
    _, seen = _deploy(tmp_path, ["--version"], no_network=False, probe=True)
    assert seen == ["('127.0.0.1', 9)"]


def _bundle(tmp_path: Path, image: str, key: Path, caches: Path | None = None) -> Path:
    make_hub_cache(tmp_path / "hf")
    recipe = write_recipe(tmp_path / "tiny-offline.yaml", image, tmp_path / "hf")
    out = tmp_path / "bundle"
    extra = ["--with-caches", str(caches)] if caches else []
    assert exit_code(["bundle", "--image", image, "--recipe", str(recipe), "--out", str(out),
                 "--key", str(key), "--lock", str(recipe), *extra]) == 0
    return out


def _jit_caches(tmp_path: Path, image_id: str) -> Path:
    """A JIT cache bundle of the image, as inv warm writes it (files that stand in for a
    driver's compute cache: no device code)."""
    from edgevllm.serve.cache.bundle import BundleKey
    from edgevllm.serve.cache.harvest import bundle_folder
    from edgevllm.specs.targets import load_target

    folder = tmp_path / "harvested"
    (folder / "compute" / "7f").mkdir(parents=True)
    (folder / "compute" / "index").write_bytes(b"\x01\x02index")
    (folder / "compute" / "7f" / "3e").write_bytes(bytes(range(256)) * 8)
    key = BundleKey(image_id=image_id, recipe="tiny-offline", model=MODEL, model_revision="",
                    target="thor", cuda_arch=load_target("thor").cuda_arch)
    out = tmp_path / "tiny.jitcache.tar"
    bundle_folder(folder, key, {"compute": "/root/.nv/ComputeCache"}, out)
    return out


def test_a_bundle_deploys_with_no_network_and_every_tampered_part_is_refused(engine, tmp_path):
    private, public = generate_key(tmp_path / "site.key")
    image = unique_image(engine, "offline")
    image_id = engine.image_id(image)
    try:
        caches = _jit_caches(tmp_path, image_id)
        out = _bundle(tmp_path, image, private, caches)
        for name in ("oci-layout", "index.json"):  # what skopeo/oras/crane read
            assert (out / "image" / name).is_file()
        _the_layouts_signature_verifies_in_a_registry(out / "image", public)
        remove_everything(engine, image_id)

        blob = max((out / "image" / "blobs" / "sha256").iterdir(), key=lambda p: p.stat().st_size)
        data = bytearray(blob.read_bytes())
        data[len(data) // 2] ^= 0x01
        blob.write_bytes(bytes(data))
        argv = ["deploy", "--from", str(out), "--key", str(public),
                "--hf-cache", str(tmp_path / "node-hf")]
        proc, seen = _deploy(tmp_path, argv)
        assert proc.returncode != 0 and str(blob) in proc.stderr, proc.stderr
        assert not engine.image_exists(image_id), "a tampered bundle reached the engine"
        assert not (tmp_path / "node-hf").exists(), "a tampered bundle reached the model folder"
        installed = tmp_path / "cache" / "jit-bundles"
        assert not installed.exists(), "a tampered bundle installed its caches"
        data[len(data) // 2] ^= 0x01
        blob.write_bytes(bytes(data))

        proc, seen = _deploy(tmp_path, argv)
        assert proc.returncode == 0, proc.stderr
        assert seen == [], f"the deploy tried to connect: {seen}"
        assert engine.image_exists(image_id) and engine.image_id(image) == image_id
        assert "inv serve" in proc.stdout and "tiny-offline.yaml" in proc.stdout, proc.stdout
        _model_is_in_the_node_cache(tmp_path / "node-hf")
        copies = list(installed.iterdir())
        assert [p.read_bytes() for p in copies] == [caches.read_bytes()]
        assert f"--caches {copies[0]}" in proc.stdout, proc.stdout
    finally:
        remove_everything(engine, image_id)


def _the_layouts_signature_verifies_in_a_registry(layout: Path, public: Path) -> None:
    """docker save's layout, signed by inv bundle: copied with its .sig into a registry, digests
    kept, the real cosign verifies it under the digest docker save wrote."""
    from edgevllm.inspect import cosign, cosignlayout
    from support.cosign import cosign_verify
    from support.registry import local_registry
    from support.skopeo import run_skopeo, skopeo_copy

    digest = cosignlayout.image_digest(layout)
    index = json.loads((layout / "index.json").read_text())
    image_tag = next(m["annotations"][cosignlayout.REF_NAME] for m in index["manifests"]
                     if m["digest"] == digest)
    sig = cosign.tag_for(digest, "sig")
    found = run_skopeo("inspect", "--raw", f"oci:{layout}:{sig}")
    assert found.returncode == 0 and cosign.SIMPLE_SIGNING in found.stdout, found.stderr
    with local_registry() as host:
        for tag in (image_tag, sig):
            copied = skopeo_copy(f"oci:{layout}:{tag}", f"docker://{host}/bundled:{tag}")
            assert copied.returncode == 0, copied.stderr
        result = cosign_verify(None, public, f"{host}/bundled@{digest}")
        assert result.returncode == 0, result.stderr


def _model_is_in_the_node_cache(node: Path) -> None:
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(MODEL, "model.safetensors", cache_dir=str(node / "hub"))
    here = try_to_load_from_cache(MODEL, "model.safetensors",
                                  cache_dir=str(node.parent / "hf" / "hub"))
    assert isinstance(found, str) and isinstance(here, str)
    assert Path(found).read_bytes() == Path(here).read_bytes()


def test_a_bundle_cut_short_is_finished_by_running_it_again(engine, tmp_path):
    private, public = generate_key(tmp_path / "site.key")
    image = unique_image(engine, "offline-resume")
    image_id = engine.image_id(image)
    try:
        out = _bundle(tmp_path, image, private)
        signed = {out / "image" / name for name in signature_blobs(out / "image")}
        assert len(signed) == 3  # the image's cosign .sig: its layer, config and manifest
        blobs = sorted(set((out / "image" / "blobs" / "sha256").iterdir()) - signed,
                       key=lambda p: p.stat().st_size)  # the signature is signed anew
        kept = {p: p.stat().st_ino for p in blobs[:-1]}
        (out / MANIFEST_NAME).unlink()     # cut short before the manifest, one blob half
        blobs[-1].write_bytes(blobs[-1].read_bytes()[:1000])
        (out / "model" / "config.json").unlink()
        proc, _ = _deploy(tmp_path, ["deploy", "--from", str(out), "--key", str(public)],
                          no_network=False)
        assert proc.returncode != 0 and "incomplete" in proc.stderr, proc.stderr
        recipe = str(tmp_path / "tiny-offline.yaml")
        assert exit_code(["bundle", "--image", image, "--recipe", recipe, "--out", str(out),
                     "--key", str(private), "--lock", recipe]) == 0
        assert {p: p.stat().st_ino for p in kept} == kept, "whole files were written again"
        assert hash_file(blobs[-1]) == blobs[-1].name
        assert (out / "model" / "config.json").is_file() and (out / MANIFEST_NAME).is_file()
        # whole now: a third run keeps the layout without docker save
        manifest = make_bundle(NoSaveEngine(), BundleRequest(
            image=image, recipe=recipe, out=out, key=private, lock=Path(recipe)))
        assert {p: p.stat().st_ino for p in kept} == kept
        tops = ("oci-layout", "index.json", "manifest.json", "repositories")
        layout = {f"image/{p.relative_to(out / 'image')}" for p in blobs} | {
            f"image/{name}" for name in signature_blobs(out / "image")} | {
            f"image/{name}" for name in tops}
        assert {"image/index.json", "image/oci-layout"} <= {f.path for f in manifest.under(
            "image")} <= layout
        assert verify_bundle(out, public) == manifest
    finally:
        remove_everything(engine, image_id)
