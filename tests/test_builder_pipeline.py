"""Pipeline pieces that need no image build: base images pinned by digest in the lock."""

from __future__ import annotations

from edgevllm.builder.steps import base_image_lock
from edgevllm.specs.buildspec import lock_overrides
from edgevllm.specs.lock import BaseImageLock, Lock


def test_base_image_digest_is_recorded_and_pins_the_rebuild(engine, python_image_native):
    """A base image in a real registry (Debian's docker-registry on 127.0.0.1) gets its digest
    into the lock; the lock's rebuild names the base by that digest, which records the same lock."""
    from support.registry import local_registry

    with local_registry() as host:
        ref = f"{host}/edgevllm-test/base:1"
        engine.tag(python_image_native, ref)
        try:
            pushed = engine.push(ref)
            locked = base_image_lock(ref, engine)
            assert locked == BaseImageLock(ref=ref, digest=pushed)

            lock = Lock(target="spark", base_images={"build": locked, "runtime": locked})
            images = lock_overrides(lock)["images"]
            assert images == {"build": f"{ref}@{pushed}", "runtime": f"{ref}@{pushed}"}
            assert base_image_lock(images["build"], engine) == locked
        finally:
            engine.remove_image(ref)


def test_local_only_base_image_has_no_digest(engine, python_image_native):
    assert base_image_lock(python_image_native, engine) == BaseImageLock(ref=python_image_native)


def test_plain_build_chooses_its_mode_from_the_engine_architecture(engine, cli, tmp_path):
    """`make image TARGET=spark` as a user runs it, through the real CLI and preflight, against
    the real engine: its architecture decides. On an x86_64 engine the release builds prebuilt
    and says what the device loses; on an arm64 one it compiles. The spec only points the torch
    index at a closed local port, so the build stops one line after its mode, downloading
    nothing."""
    (tmp_path / "spark.yaml").write_text(
        "target: spark\ntorch: {version: '2.14.0', index_url: 'http://127.0.0.1:9/whl'}\n")
    code, _, stderr = cli("build", "--spec", str(tmp_path / "spark.yaml"), "--out",
                          str(tmp_path / "out"),
                          env={"EDGEVLLM_MIN_DISK_GB": "1", "EDGEVLLM_CACHE": str(tmp_path)})
    arch = engine.server_arch()
    assert arch in ("amd64", "arm64"), arch
    if arch == "amd64":
        assert ("mode: prebuilt (vllm 0.33.0 with nothing on top, and this amd64 builder would "
                "compile linux/arm64 under emulation") in stderr, stderr
        assert "against a 12.1a compile the device runs the stock wheel's kernels" in stderr
        assert code != 0 and "package index http://127.0.0.1:9/whl is unreachable" in stderr
    else:
        assert "mode: compile (vllm 0.33.0 on a native arm64 builder" in stderr, stderr
