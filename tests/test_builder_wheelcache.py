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

import pytest

from edgevllm.builder.modes import compile_mode, start
from edgevllm.builder.runner import Workspace
from edgevllm.builder.wheelcache import compiled_wheels
from edgevllm.common.errors import WheelCacheError
from edgevllm.image import registry as api
from edgevllm.image.wheelcache import OCI_MANIFEST, check_ref, publish
from edgevllm.specs.buildspec import Builder, load_spec, resolve
from support.downloads import pypi_download
from support.registry import local_registry


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
            "wheel_cache": ref, **extra})
    return spec


def key_of(job, spec, builder) -> str:
    forced = resolve(spec.model_copy(update={"mode": "compile"}), builder=builder)
    key = compile_mode.prepare(dataclasses.replace(job, eff=forced)).compile_key
    assert key
    return key


def test_a_default_prebuilt_compiles_nothing_from_the_wheel_cache(
        engine, release_spec, tmp_path, capsys):
    x86 = Builder(arch="amd64")  # spark is arm64: a release would build prebuilt
    wheels = tmp_path / "compiled"
    wheels.mkdir()
    six = pypi_download("six==1.16.0")
    shutil.copyfile(six, wheels / six.name)
    with local_registry() as host:
        ref = f"{host}/wheelcache25/rule"
        spec = release_spec(ref)
        ws = Workspace(tmp_path / "out" / "spark")
        job = start(spec, ws, engine, None, builder=x86)
        assert job.eff.mode == "prebuilt" and job.prepared is None
        key = key_of(job, spec, x86)
        assert not ws.wheels(key).exists()

        publish(ref, key, wheels)
        job = start(spec, ws, engine, None, builder=x86)
        assert job.eff.mode == "compile" and job.prepared is not None
        assert job.prepared.compile_key == key
        assert (ws.wheels(key) / six.name).read_bytes() == six.read_bytes()
        assert f"compiled wheels for key {key} from {ref}: nothing to compile" in \
            capsys.readouterr().err


def test_a_refused_artifact_stops_the_build_unless_compile_says_so(
        engine, release_spec, tmp_path, capsys):
    x86 = Builder(arch="amd64")
    wheels = tmp_path / "compiled"
    wheels.mkdir()
    six = pypi_download("six==1.16.0")
    shutil.copyfile(six, wheels / six.name)
    with local_registry() as host:
        ref = f"{host}/wheelcache25/refused"
        spec = release_spec(ref)
        ws = Workspace(tmp_path / "out" / "spark")
        key = key_of(start(spec, ws, engine, None, builder=x86), spec, x86)
        other = publish(ref, "0" * 16, wheels)  # another key's artifact, put under this key
        host_, name = check_ref(ref)
        raw = api.get_manifest(host_, name, "0" * 16, OCI_MANIFEST)
        assert raw is not None
        api.put_manifest(host_, name, key, raw, json.loads(raw)["mediaType"])

        with pytest.raises(WheelCacheError) as refused:
            start(spec, ws, engine, None, builder=x86)
        line = str(refused.value)
        assert "\n" not in line and f"compile key {'0' * 16}, not {key}" in line
        assert line.endswith("--compile compiles instead") and other.action == "pushed"
        assert not ws.wheels(key).exists()

        told = release_spec(ref, mode="compile")
        job = start(told, ws, engine, None, builder=x86)
        assert job.eff.mode == "compile"
        assert compiled_wheels(job, compile_mode.prepare(job)) is None  # it compiles
        assert "--compile: compiling instead" in capsys.readouterr().err
        assert not ws.wheels(key).exists()


def test_a_compile_lock_rebuild_stops_on_a_refused_artifact_unless_compile_says_so(
        engine, release_spec, tmp_path, capsys):
    """``inv build --lock`` of a compile lock: the lock's mode is compile, but only --compile
    tells the build to compile past a refused artifact (the same rule as without --lock). The
    specs come from the CLI's own flag handling; the artifact holds a real wheel whose blob has
    one byte flipped in the registry's storage."""
    from edgevllm.cli.build import spec_from_flags
    from edgevllm.specs.lock import write_lock
    from support.registry import local_registry_storage

    x86 = Builder(arch="amd64")
    wheels = tmp_path / "compiled"
    wheels.mkdir()
    six = pypi_download("six==1.16.0")
    shutil.copyfile(six, wheels / six.name)
    with local_registry_storage() as (host, storage):
        ref = f"{host}/wheelcache25/locked"
        ws = Workspace(tmp_path / "out" / "spark")
        first = compile_mode.prepare(start(release_spec(ref, mode="compile"), ws, engine, None,
                                           builder=x86))
        assert first.lock is not None and first.lock.mode == "compile"
        lock_file = write_lock(first.lock, tmp_path / "spark.lock.json")

        spec = spec_from_flags({"lock": str(lock_file), "wheel_cache": ref})
        assert spec.mode == "compile" and spec.mode_from_lock
        job = start(spec, ws, engine, first.lock, builder=x86)
        build = compile_mode.prepare(job)
        assert build.compile_key == first.compile_key  # the rebuild's key is the build's
        key = build.compile_key
        sent = publish(ref, key, wheels)
        hexa = sent.wheels[0].sha256
        blob = storage / "docker/registry/v2/blobs/sha256" / hexa[:2] / hexa / "data"
        data = blob.read_bytes()
        blob.write_bytes(data[:1000] + bytes([data[1000] ^ 1]) + data[1001:])

        with pytest.raises(WheelCacheError) as refused:
            compiled_wheels(job, build)
        line = str(refused.value)
        assert "\n" not in line and f"{six.name} is not the wheel its list" in line, line
        assert line.endswith("--compile compiles instead") and refused.value.exit_code == 10
        assert not ws.wheels(key).exists()

        told = spec_from_flags({"lock": str(lock_file), "wheel_cache": ref, "compile": True})
        assert told.mode == "compile" and not told.mode_from_lock
        job = start(told, ws, engine, first.lock, builder=x86)
        assert compiled_wheels(job, compile_mode.prepare(job)) is None  # it compiles
        assert "--compile: compiling instead" in capsys.readouterr().err
        assert not ws.wheels(key).exists()
