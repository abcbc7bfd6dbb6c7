"""The wheel cache in the mode rule (builder/wheelcache.compiled_wheels through modes.start), with
real git, the real engine (base image digests) and a real registry (Debian's docker-registry):
a release under emulation builds prebuilt while the registry lacks its compile key; once the key's
wheels are published it compiles, taking them (nothing compiles); a refused artifact stops the
build with one line, unless the build was told to compile (--compile): then it compiles. The
fixture tree stands in for upstream, so its tag v0.1.0 reads as a release."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from edgevllm.builder.modes import compile_mode, start
from edgevllm.builder.runner import Workspace
from edgevllm.builder.wheelcache import compiled_wheels
from edgevllm.common.errors import WheelCacheError
from edgevllm.image import registry as api
from edgevllm.image.wheelcache import OCI_MANIFEST, check_ref, publish
from edgevllm.specs.buildspec import Builder, load_spec, resolve
from support.downloads import pypi_download
from support.registry import blob_file, local_registry_storage


@pytest.fixture
def release_spec(python_image_native, tmp_path, monkeypatch):
    from edgevllm.specs.refs import UPSTREAM_REPOS
    from support.gitfixtures import make_upstream_repo

    fixture = Path(__file__).parent / "e2e" / "fixtures" / "fake-vllm"
    upstream = make_upstream_repo(tmp_path / "up", fixture)
    monkeypatch.setitem(UPSTREAM_REPOS, "vllm", upstream.url)
    monkeypatch.setenv("EDGEVLLM_CACHE", str(tmp_path / "cache"))

    def spec(ref: str, **extra):
        return load_spec("spark", overrides={
            "vllm": {"repo": upstream.url, "ref": "v0.1.0"}, "mods": [],
            "images": {"build": python_image_native, "runtime": python_image_native},
            "torch": {"version": None}, "apt_packages": [], "python": "python3.11",
            "packages": {"flashinfer-python": None, "nvidia-cutlass-dsl": None},
            # The emulated road's compile key: the stand-in tree's closure has no target CUDA
            # runtime, which the cross road (the default on amd64) needs to link.
            "toolchain": "emulated",
            "wheel_cache": ref, **extra})
    return spec


@dataclasses.dataclass
class CacheRun:
    """What the tests start from."""

    ref: str  # the wheel cache: a repository of a real local registry
    storage: Path  # the folder that registry stores its blobs in
    spec: Any  # the release spec naming the cache
    ws: Workspace
    wheels: Path  # compiled wheels to publish (six, from PyPI)
    six: Path
    signer: Any = None  # the publishing builder's key; its public half is trusted
    x86: Builder = Builder(arch="amd64")  # spark is arm64: a release builds prebuilt here


@pytest.fixture
def cache_run(release_spec, tmp_path, monkeypatch):
    from edgevllm.inspect.dsse import generate_key, load_private_key

    private, public = generate_key(tmp_path / "builder.key")
    monkeypatch.setenv("EDGEVLLM_WHEEL_CACHE_KEYS", str(public))  # whose artifacts are taken
    wheels = tmp_path / "compiled"
    wheels.mkdir()
    six = pypi_download("six==1.16.0")
    shutil.copyfile(six, wheels / six.name)
    with local_registry_storage() as (host, storage):
        ref = f"{host}/wheelcache25/release"
        yield CacheRun(ref, storage, release_spec(ref), Workspace(tmp_path / "out" / "spark"),
                       wheels, six, load_private_key(private))


def key_of(job, spec, builder) -> str:
    forced = resolve(spec.model_copy(update={"mode": "compile"}), builder=builder)
    key = compile_mode.prepare(dataclasses.replace(job, eff=forced)).compile_key
    assert key
    return key


def test_a_default_prebuilt_compiles_nothing_from_the_wheel_cache(engine, cache_run, capsys):
    run = cache_run
    job = start(run.spec, run.ws, engine, None, builder=run.x86)
    assert job.eff.mode == "prebuilt" and job.prepared is None
    key = key_of(job, run.spec, run.x86)
    assert not run.ws.wheels(key).exists()

    publish(run.ref, key, run.wheels, run.signer)
    job = start(run.spec, run.ws, engine, None, builder=run.x86)
    assert job.eff.mode == "compile" and job.prepared is not None
    assert job.prepared.compile_key == key
    assert (run.ws.wheels(key) / run.six.name).read_bytes() == run.six.read_bytes()
    assert f"compiled wheels for key {key} from {run.ref}: nothing to compile" in \
        capsys.readouterr().err


def test_a_refused_artifact_stops_the_build_unless_compile_says_so(
        engine, cache_run, release_spec, capsys):
    run = cache_run
    key = key_of(start(run.spec, run.ws, engine, None, builder=run.x86), run.spec, run.x86)
    # another key's artifact, put under this key
    other = publish(run.ref, "0" * 16, run.wheels, run.signer)
    host, name = check_ref(run.ref)
    raw = api.get_manifest(host, name, "0" * 16, OCI_MANIFEST)
    assert raw is not None
    api.put_manifest(host, name, key, raw, json.loads(raw)["mediaType"])

    with pytest.raises(WheelCacheError) as refused:
        start(run.spec, run.ws, engine, None, builder=run.x86)
    line = str(refused.value)
    assert "\n" not in line and f"compile key {'0' * 16}, not {key}" in line
    assert line.endswith("--compile compiles instead") and other.action == "pushed"
    assert not run.ws.wheels(key).exists()

    told = release_spec(run.ref, mode="compile")
    job = start(told, run.ws, engine, None, builder=run.x86)
    assert job.eff.mode == "compile"
    assert compiled_wheels(job, compile_mode.prepare(job)) is None  # it compiles
    assert "--compile: compiling instead" in capsys.readouterr().err
    assert not run.ws.wheels(key).exists()


def test_a_compile_lock_rebuild_stops_on_a_refused_artifact_unless_compile_says_so(
        engine, cache_run, release_spec, tmp_path, capsys):
    """``inv build --lock`` of a compile lock: the lock's mode is compile, but only --compile
    tells the build to compile past a refused artifact (the same rule as without --lock). The
    specs come from the CLI's own flag handling; the artifact holds a real wheel whose blob has
    one byte flipped in the registry's storage."""
    from edgevllm.cli.build import spec_from_flags
    from edgevllm.specs.lock import write_lock

    run = cache_run
    first = compile_mode.prepare(start(release_spec(run.ref, mode="compile"), run.ws, engine,
                                       None, builder=run.x86))
    assert first.lock is not None and first.lock.mode == "compile"
    lock_file = write_lock(first.lock, tmp_path / "spark.lock.json")

    spec = spec_from_flags({"lock": str(lock_file), "wheel_cache": run.ref})
    assert spec.mode == "compile" and spec.mode_from_lock
    job = start(spec, run.ws, engine, first.lock, builder=run.x86)
    build = compile_mode.prepare(job)
    assert build.compile_key == first.compile_key  # the rebuild's key is the build's
    key = build.compile_key
    assert key is not None
    sent = publish(run.ref, key, run.wheels, run.signer)
    blob = blob_file(run.storage, sent.wheels[0].sha256)
    data = blob.read_bytes()
    blob.write_bytes(data[:1000] + bytes([data[1000] ^ 1]) + data[1001:])

    with pytest.raises(WheelCacheError) as refused:
        compiled_wheels(job, build)
    line = str(refused.value)
    assert "\n" not in line and f"{run.six.name} is not the wheel its list" in line, line
    assert line.endswith("--compile compiles instead") and refused.value.exit_code == 10
    assert not run.ws.wheels(key).exists()

    told = spec_from_flags({"lock": str(lock_file), "wheel_cache": run.ref, "compile": True})
    assert told.mode == "compile" and not told.mode_from_lock
    job = start(told, run.ws, engine, first.lock, builder=run.x86)
    assert compiled_wheels(job, compile_mode.prepare(job)) is None  # it compiles
    assert "--compile: compiling instead" in capsys.readouterr().err
    assert not run.ws.wheels(key).exists()


def test_a_build_may_reuse_wheels_only_where_some_lie_in_the_output_or_a_cache_is_given(
        tmp_path):
    """Before its key is known, a compile may reuse wheels (and so asks preflight for the
    closure's disk, not a compile's) only where ``out/<target>/wheels/<key>/`` holds a wheel or
    ``--wheel-cache`` is given; an empty key folder or a stray file does not count."""
    from edgevllm.builder.wheelcache import may_reuse

    ws = Workspace(tmp_path / "out" / "spark")
    spec = load_spec("spark", overrides={"mode": "compile"})
    assert not may_reuse(spec, ws)
    (ws.wheels("0123456789abcdef")).mkdir(parents=True)
    (ws.wheels("0123456789abcdef") / "notes.txt").write_text("not a wheel")
    assert not may_reuse(spec, ws)
    assert may_reuse(spec.model_copy(update={"wheel_cache": "127.0.0.1:5000/w/c"}), ws)
    (ws.wheels("0123456789abcdef") / "vllm-0.33.0-cp38-abi3-linux_x86_64.whl").write_bytes(b"")
    assert may_reuse(spec, ws)
