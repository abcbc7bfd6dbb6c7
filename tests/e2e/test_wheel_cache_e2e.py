"""Compiled wheels shared by compile key (--wheel-cache), end to end through the CLI with real
parts: the fixture tree compiled on the real Docker engine (spark's arch list, the host's
platform), a real registry (Debian's docker-registry on 127.0.0.1) as the wheel cache.

Builder one compiles and publishes its key's wheels; builder two (its own output folder, nothing
local) has no compile stage at all: preflight says where the wheels come from, its wheels are
builder one's byte for byte, its image tag is the same; `inv build --lock` takes them too. Then a
byte flipped in the registry's storage: the build stops with one `error:` line (exit 10) and
leaves no wheels folder, and so does `inv build --lock` of builder one's compile lock (a lock's
mode is no --compile); with --compile the same build compiles instead.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from e2e.conftest import hermetic_spec, write_spec
from edgevllm.common.fsutil import sha256_file
from support.platforms import native_platform

REPO_NAME = "edgevllm-test/e2e-wheelcache25"


def run_build(cli, spec_file: Path, out: Path, *flags: str) -> tuple[int, dict, str]:
    code, _, stderr = cli("build", "--spec", str(spec_file), "--out", str(out), "--json",
                          str(out / "result.json"), *flags, timeout=3000)
    summary = json.loads((out / "result.json").read_text()) if code == 0 else {}
    return code, summary, stderr


def wheel_hashes(folder: Path) -> dict[str, str]:
    return {p.name: sha256_file(p) for p in sorted(folder.glob("*.whl"))}


def flip_a_byte(storage: Path, sha256: str) -> None:
    from support.registry import blob_file

    data = blob_file(storage, sha256)
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    data.write_bytes(bytes(raw))


def test_a_second_builder_takes_the_compiled_wheels_by_key(
        registry_storage, engine, cli, cuda_image_native, fake_upstream, tmp_path, monkeypatch):
    from edgevllm.inspect.dsse import generate_key

    host, storage = registry_storage
    private, public = generate_key(tmp_path / "builders.key")  # the first builder signs
    monkeypatch.setenv("EDGEVLLM_SIGNING_KEY", str(private))
    monkeypatch.setenv("EDGEVLLM_WHEEL_CACHE_KEYS", str(public))  # the second trusts it
    ref = f"{host}/edgevllm/wheels"
    spec_file = write_spec(tmp_path / "spec.yaml", **hermetic_spec(
        "spark", cuda_image_native, fake_upstream, platform=native_platform(), mods=[],
        verify=False, image_repo=REPO_NAME))
    images: set[str] = set()
    try:
        code, first, err = run_build(cli, spec_file, tmp_path / "one", "--wheel-cache", ref)
        assert code == 0, err[-3000:]
        images.update(first["tags"])
        assert first["compiled"] is True and first["wheel_cache"]["action"] == "pushed", first
        key = first["wheel_cache"]["ref"].removeprefix(f"{ref}:")
        compiled = wheel_hashes(tmp_path / "one" / "spark" / "wheels" / key)
        assert compiled and first["wheel_cache"]["wheels"] == compiled

        code, second, err = run_build(cli, spec_file, tmp_path / "two", "--wheel-cache", ref)
        assert code == 0, err[-3000:]
        images.update(second["tags"])
        assert f"compiled wheels for key {key} from {ref}: nothing to compile" in err
        assert second["compiled"] is False and second["tags"][0] == first["tags"][0]
        assert "compile (wheels stage)" not in Path(second["log"]).read_text()
        assert wheel_hashes(tmp_path / "two" / "spark" / "wheels" / key) == compiled
        assert second["wheel_cache"]["action"] == "unchanged"
        for summary in (first, second):  # the registry is no input of the lock or the image
            assert host not in Path(summary["lock"]).read_text()
            labels = engine.run_cli(["image", "inspect", summary["tags"][0]]).stdout.decode()
            assert host not in labels

        code, _, err = cli("build", "--lock", first["lock"], "--out", str(tmp_path / "lock"),
                           "--no-verify",
                           "--image-repo", REPO_NAME, "--wheel-cache", ref, timeout=3000)
        assert code == 0, err[-3000:]
        assert f"compiled wheels for key {key} from {ref}: nothing to compile" in err
        assert wheel_hashes(tmp_path / "lock" / "spark" / "wheels" / key) == compiled

        vllm = next(name for name in compiled if name.startswith("vllm-"))
        flip_a_byte(storage, compiled[vllm])
        code, _, err = run_build(cli, spec_file, tmp_path / "three", "--wheel-cache", ref)
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert code == 10 and len(errors) == 1 and "Traceback" not in err, err[-3000:]
        assert f"{vllm} is not the wheel its list names" in errors[0]
        assert errors[0].endswith("--compile compiles instead")
        assert not (tmp_path / "three" / "spark" / "wheels" / key).exists()
        # --lock of the compile lock: the lock's mode is no --compile, so the same refusal
        code, _, err = cli("build", "--lock", first["lock"], "--out", str(tmp_path / "relock"),
                           "--no-verify", "--image-repo", REPO_NAME, "--wheel-cache", ref,
                           timeout=3000)
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert code == 10 and len(errors) == 1 and "Traceback" not in err, err[-3000:]
        assert f"{vllm} is not the wheel its list names" in errors[0]
        assert not (tmp_path / "relock" / "spark" / "wheels" / key).exists()

        code, fourth, err = run_build(cli, spec_file, tmp_path / "four", "--wheel-cache", ref,
                                      "--compile")
        assert code == 0, err[-3000:]
        images.update(fourth["tags"])
        assert "--compile: compiling instead" in err and fourth["compiled"] is True
        assert fourth["wheel_cache"]["action"] in ("unchanged", "kept")
    finally:
        for image in images:
            engine.run_cli(["rmi", image])
