"""inv warm end to end, off the device: harvest a container's JIT caches, seed a start from them.

What stands in for what: no GPU here, so the "server" is the fixture streaming server the bench
tests use (tests/support/bench_server.py, a mock of an OpenAI-compatible vLLM server) on the host,
and the recipe's container (a real Debian image on the host network, through the same launch path
as ``inv serve``) fills its JIT cache folders at start the way vLLM, FlashInfer and Triton would on
the device: with real device code built by nvcc 13.0 (an sm_121a cubin and shared object, and an
sm_110a one built for the wrong device). The warm-up goes through vLLM 0.33.0's own benchmark
client (tests/support/vllm_client.py) to the fixture server. Everything else is real: Docker,
``docker cp`` out of the stopped container and into the created one, verify's reader, the bundle
file and the CLI's refusals. The run on a device (a real first start) is the user's.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from edgevllm.serve.cache.bundle import bundle_name, bundles_dir, read_manifest
from edgevllm.serve.launch import jit_folder, serve, stop
from edgevllm.serve.recipe.load import load_recipe, render
from support.bench_server import BenchServer, ServerConfig
from support.checks import present
from support.cuda_libs import nvcc_cubin, nvcc_libs
from support.tiny_tokenizer import make_tokenizer
from support.vllm_client import client_python

REPO = Path(__file__).resolve().parents[2]
NAME = "edgevllm-test-harvest26"
# What the "server" compiles at its first start, by container path.
FILLS = {
    "/root/.triton/cache/k1/scale.cubin": "scale.cubin",
    "/root/.cache/flashinfer/121a/sampling/sampling.so": "libsm_121a.so",
    "/root/.cache/flashinfer/110a/sampling/sampling.so": "libsm_110a.so",
}


def _fixture_files(folder: Path) -> Path:
    folder.mkdir()
    shutil.copy(nvcc_cubin("121a"), folder / "scale.cubin")
    for variant in ("sm_121a", "sm_110a"):
        shutil.copy(nvcc_libs()[variant], folder / f"lib{variant}.so")
    return folder


def _recipe(path: Path, image: str, port: int, jit_root: Path, fixtures: Path) -> Path:
    fill = " && ".join(f"mkdir -p {os.path.dirname(dest)} && cp /fixture/{src} {dest}"
                       for dest, src in FILLS.items())
    fill += " && head -c 4096 /dev/urandom > /root/.nv/ComputeCache/blob"
    path.write_text(yaml.safe_dump({
        "name": NAME, "description": "harvest against the fixture server",
        "targets": ["spark"], "status": {"spark": "untested"}, "image": image,
        "model": "fixture-model", "defaults": {"port": port},
        "serve": {"command": ["sh", "-c", f"{fill} && exec sleep 600"]},
        "container": {"network": "host", "ports": [], "volumes": [f"{fixtures}:/fixture:ro"],
                      "shm_size": None, "ipc": None, "gpus": None},
        "health": {"interval": "1s", "timeout": "5s", "retries": 60, "start_period": "1s"},
        "launch": {"ulimits": {"nofile": None}, "jit_cache_root": str(jit_root)},
    }))
    return path


def _stop_quietly(engine) -> None:
    try:
        stop(engine, recipe=NAME, timeout=1)
    except Exception:  # noqa: BLE001 - nothing to stop
        pass


def _cli(*argv: str, **extra_env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(REPO), "COLUMNS": "200",
           **extra_env}
    return subprocess.run([sys.executable, "-c", "from edgevllm.cli import main; main()", *argv],
                          capture_output=True, text=True, env=env, timeout=300)


def _rewrite(bundle: Path, out: Path, change) -> Path:
    with tarfile.open(bundle) as src, tarfile.open(out, "w") as dst:
        for member in src.getmembers():
            data = change(member.name, present(src.extractfile(member)).read())
            info = tarfile.TarInfo(member.name)
            info.size = len(data)
            dst.addfile(info, io.BytesIO(data))
    return out


@pytest.fixture(scope="module")
def harvested(engine, python_image_native, tmp_path_factory):
    """inv warm RECIPE once for the module: (bundle, its stderr), the recipe file, the number
    of requests the server answered."""
    tmp_path = tmp_path_factory.mktemp("warm")
    tokenizer = str(make_tokenizer(tmp_path / "tok"))
    client = str(client_python())
    fixtures = _fixture_files(tmp_path / "fixture")
    with pytest.MonkeyPatch.context() as patch, \
            BenchServer(ServerConfig(ttft_s=0.02, itl_s=0.01)) as server:
        patch.setenv("EDGEVLLM_CACHE", str(tmp_path / "cache"))
        recipe = _recipe(tmp_path / f"{NAME}.yaml", python_image_native, server.port,
                         tmp_path / "jit", fixtures)
        _stop_quietly(engine)
        try:
            # The fixture server listens on the host's loopback: the recipe's container joins
            # the host's network, which a recipe may do only with --allow-host-access.
            proc = _cli("warm", str(recipe), "--client-python", client, "--tokenizer",
                        tokenizer, "--lengths", "32:8", "--prompts", "2", "--wait", "120",
                        "--allow-host-access")
        finally:
            _stop_quietly(engine)
        requests = server.requests
    assert proc.returncode == 0, proc.stderr
    result = Path(proc.stdout.strip().splitlines()[-1]), proc.stderr
    return result, recipe, requests


def test_warm_harvests_a_checked_bundle_and_serve_fills_a_fresh_start_from_it(
        engine, python_image_native, harvested, tmp_path, monkeypatch):
    (bundle, said), recipe, requests = harvested
    monkeypatch.setenv("EDGEVLLM_CACHE", str(bundle.parents[1]))
    image_id = engine.image_id(python_image_native)
    # the start probe's one streamed completion (start timing), then the 2 warm-up requests
    assert requests == 3
    assert "start: healthy after" in said and "2 warm-up requests" in said
    assert "left out of the bundle: caches/flashinfer/110a/sampling/sampling.so" in said
    assert bundle == bundles_dir() / bundle_name(NAME, image_id)
    assert not engine.containers(label=f"io.edgevllm.recipe={NAME}")  # stopped and removed
    manifest = read_manifest(bundle)
    assert (manifest.image_id, manifest.target, manifest.cuda_arch, manifest.model) == \
        (image_id, "spark", "12.1a", "fixture-model")
    by_path = {e.path: e for e in manifest.entries}
    cubin = by_path["caches/triton/cache/k1/scale.cubin"]
    assert (cubin.kind, cubin.level) == ("cubin", "native")
    assert cubin.sha256 == hashlib.sha256(nvcc_cubin("121a").read_bytes()).hexdigest()
    assert by_path["caches/flashinfer/121a/sampling/sampling.so"].kind == "library"
    assert by_path["caches/compute/blob"].size == 4096
    assert "caches/flashinfer/110a/sampling/sampling.so" not in by_path
    assert any("110a" in line and "another device" in line for line in manifest.left_out)
    assert not [p for p in bundle.parent.iterdir() if p.name.startswith(".")]

    # A start on an empty cache folder: inv serve finds the bundle by image id and fills it.
    fresh = tmp_path / "fresh-jit"
    data = yaml.safe_load(recipe.read_text())
    data["launch"]["jit_cache_root"] = str(fresh)
    data["serve"]["command"] = ["sleep", "600"]
    second = tmp_path / f"{NAME}.yaml"
    second.write_text(yaml.safe_dump(data))
    dry = _cli("serve", str(second), "--dry-run", "--allow-host-access",
               EDGEVLLM_CACHE=str(bundle.parents[1]))
    assert dry.returncode == 0 and f"cache bundle: {bundle}, checked" in dry.stderr, dry.stderr
    try:
        serve(render(load_recipe(str(second)), allow_host_access=True), engine)
    finally:
        _stop_quietly(engine)
    folder = fresh / jit_folder(image_id)
    assert (folder / "triton/cache/k1/scale.cubin").read_bytes() == \
        nvcc_cubin("121a").read_bytes()
    assert (folder / "flashinfer/121a/sampling/sampling.so").read_bytes() == \
        nvcc_libs()["sm_121a"].read_bytes()
    assert not (folder / "flashinfer/110a").exists()
    assert len((folder / "compute/blob").read_bytes()) == 4096


def test_serve_refuses_a_flipped_byte_and_a_bundle_of_another_image(harvested, tmp_path,
                                                                    engine):
    (bundle, _), recipe, _ = harvested

    def flip(name, data):
        if name.endswith("sampling.so"):
            return data[:64] + bytes([data[64] ^ 0x10]) + data[65:]
        return data

    def other_image(name, data):
        if name == "manifest.json":
            manifest = json.loads(data)
            manifest["image_id"] = "sha256:" + "0" * 64
            return json.dumps(manifest).encode()
        return data

    cases = [(flip, "sampling.so does not match its sha256"),
             (other_image, "was made for image sha256:000")]
    for change, said in cases:
        bad = _rewrite(bundle, tmp_path / "bad.jitcache.tar", change)
        proc = _cli("serve", str(recipe), "--caches", str(bad), "--allow-host-access")
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert proc.returncode == 11, proc.stderr
        assert len(errors) == 1 and said in errors[0], proc.stderr
        assert "Traceback" not in proc.stderr
        assert not engine.containers(label=f"io.edgevllm.recipe={NAME}")  # nothing started


@pytest.fixture
def tiny_image(engine, tmp_path):
    """A one-file image (kilobytes): publishing it stays quick."""
    from support.images import one_file_image

    tag = one_file_image(engine, tmp_path, "edgevllm-test/harvest26-tiny:1",
                         b"edgevllm harvest test\n")
    yield tag
    engine.remove_image(tag, force=True)


def test_copy_fills_a_nodes_cache_folders_from_the_bundle(engine, python_image_native,
                                                         harvested, tmp_path):
    """The node is the local engine (tests/e2e/test_serve_distribute.py streams images to
    ssh nodes; the caches go through the same engine calls, docker create + docker cp)."""
    (bundle, _), _, _ = harvested
    root = tmp_path / "node-jit"
    proc = _cli("copy", "--image", python_image_native, "--to", "local", "--with-caches",
                str(bundle), "--jit-cache-root", str(root))
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()]
    files = str(len(read_manifest(bundle).entries))  # the cubin, the sm_121a library, a blob
    assert rows[0][1:4] == ["up", "to", "date"] and rows[1][1:3] == ["caches", files] and \
        files == "3", rows
    folder = root / jit_folder(engine.image_id(python_image_native))
    assert (folder / "triton/cache/k1/scale.cubin").read_bytes() == \
        nvcc_cubin("121a").read_bytes()
    assert not engine.containers(label=f"io.edgevllm.recipe={NAME}")


def test_publish_puts_the_bundle_beside_the_set_and_refuses_another_images(
        engine, harvested, tiny_image, tmp_path):
    from edgevllm.serve.cache.bundle import BundleKey
    from edgevllm.serve.cache.harvest import bundle_folder

    (bundle, _), _, _ = harvested
    out = tmp_path / "set"
    layers = {"EDGEVLLM_LAYER_CACHE": str(tmp_path / "layers")}
    proc = _cli("publish", "--image", tiny_image, "--out", str(out), "--with-caches", str(bundle),
                **layers)
    assert proc.returncode == 11, proc.stderr
    assert "was made for image" in proc.stderr and not out.exists()

    caches = tmp_path / "caches" / "triton"
    caches.mkdir(parents=True)
    shutil.copy(nvcc_cubin("121a"), caches / "k.cubin")
    own = tmp_path / "own.jitcache.tar"
    bundle_folder(caches.parent, BundleKey(engine.image_id(tiny_image), "tiny", "fixture-model",
                                           "", "spark", "12.1a"), {"triton": "/root/.triton"},
                  own)
    proc = _cli("publish", "--image", tiny_image, "--out", str(out), "--with-caches", str(own),
                **layers)
    assert proc.returncode == 0, proc.stderr
    carried = out / "harvest26-tiny_1.jitcache.tar"  # beside harvest26-tiny_1.tar.zst
    assert f"{carried}\n{carried}.sha256" in proc.stdout
    assert carried.read_bytes() == own.read_bytes()
    check = subprocess.run(["sha256sum", "-c", carried.name + ".sha256"], cwd=out,
                           capture_output=True, text=True)
    assert check.returncode == 0 and check.stdout.strip().endswith(": OK"), check.stdout
