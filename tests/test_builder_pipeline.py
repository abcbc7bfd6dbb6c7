"""Pipeline pieces that need no image build: base images pinned by digest in the lock."""

from __future__ import annotations

from edgevllm.builder.steps import base_image_lock
from edgevllm.specs.buildspec import lock_overrides
from edgevllm.specs.lock import BaseImageLock, Lock


def test_base_image_digest_is_recorded_and_pins_the_rebuild(engine, python_image_amd64):
    """A base image in a real registry (Debian's docker-registry on 127.0.0.1) gets its digest
    into the lock; the lock's rebuild names the base by that digest, which records the same lock."""
    from support.registry import local_registry

    with local_registry() as host:
        ref = f"{host}/edgevllm-test/base:1"
        engine.tag(python_image_amd64, ref)
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


def test_local_only_base_image_has_no_digest(engine, python_image_amd64):
    assert base_image_lock(python_image_amd64, engine) == BaseImageLock(ref=python_image_amd64)
