"""Pipeline pieces that need no image build: base images pinned by digest in the lock (the
byte-code base among them), and a lock whose base cannot be had."""

from __future__ import annotations

from edgevllm.builder.render import render_dockerfile
from edgevllm.builder.steps import base_image_lock, base_image_locks, check_base_images
from edgevllm.specs.buildspec import load_spec, lock_overrides, resolve, spec_from_dict
from edgevllm.specs.lock import BaseImageLock, Lock, write_lock


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


def test_plain_build_chooses_its_mode_from_the_engine_architecture(engine, cli, tmp_path,
                                                                   python_image_native):
    """`make image TARGET=spark` as a user runs it, through the real CLI and preflight, against
    the real engine: its architecture decides. On an x86_64 engine the release builds prebuilt
    and says what the device loses; on an arm64 one it compiles. The spec only points the torch
    index at a closed local port, so the build stops one line after its mode, downloading
    nothing; its bases are local images (preflight checks each for its stage's platform)."""
    from support.images import python_image

    (tmp_path / "spark.yaml").write_text(
        "target: spark\ntorch: {version: '2.14.0', index_url: 'http://127.0.0.1:9/whl'}\n"
        f"base_image: {python_image(engine, 'arm64')}\nbytecode_image: {python_image_native}\n")
    code, _, stderr = cli("build", "--spec", str(tmp_path / "spark.yaml"), "--out",
                          str(tmp_path / "out"),
                          env={"EDGEVLLM_MIN_DISK_GB": "1", "EDGEVLLM_CACHE": str(tmp_path)})
    arch = engine.server_arch()
    assert arch in ("amd64", "arm64"), arch
    if arch == "amd64":
        assert ("mode: prebuilt (vllm 0.33.0 with nothing on top: the released wheel, stock "
                "kernels, the stock-kernel gate; --compile cross-compiles 12.1a on this amd64 "
                "builder") in stderr, stderr
        assert "against a 12.1a compile the device runs the stock wheel's kernels" in stderr
        assert code != 0 and "package index http://127.0.0.1:9/whl is unreachable" in stderr
    else:
        assert "mode: compile (vllm 0.33.0 on a native arm64 builder" in stderr, stderr


def test_the_bytecode_base_is_locked_by_digest_and_pins_the_rebuild(engine, python_image_native):
    """The build platform's base of the closure's byte-code (a spec's ``bytecode_image``) is one
    of the lock's base images: pushed to a real registry it is recorded with its digest, the
    lock's rebuild renders ``FROM --platform=$BUILDPLATFORM ref@digest`` and records the same
    base images again. The runtime base, an image only this engine has, stays a bare ref."""
    from support.registry import local_registry

    with local_registry() as host:
        twin = f"{host}/edgevllm-test/twin:1"
        engine.tag(python_image_native, twin)
        try:
            pushed = engine.push(twin)
            eff = resolve(load_spec("spark", overrides={
                "vllm_wheel": "0.33.0", "base_image": python_image_native, "bytecode_image": twin}))
            locks = base_image_locks(eff, engine, build=eff.images.runtime)
            local = BaseImageLock(ref=python_image_native)
            assert locks == {"build": local, "runtime": local,
                             "bytecode": BaseImageLock(ref=twin, digest=pushed)}

            lock = Lock(target="spark", mode="prebuilt", base_images=locks)
            rebuilt = resolve(spec_from_dict(lock_overrides(lock)))
            assert rebuilt.bytecode_image == f"{twin}@{pushed}"
            assert (f"FROM --platform=$BUILDPLATFORM {twin}@{pushed} AS closure-bytecode"
                    in render_dockerfile(rebuilt))
            assert base_image_locks(rebuilt, engine, build=rebuilt.images.runtime) == locks
            check_base_images(rebuilt, engine, "--lock spark.lock.json")  # both can be had
        finally:
            engine.remove_image(twin)


def test_a_lock_whose_bytecode_base_cannot_be_had_stops_in_one_line(
        engine, python_image_native, cli, tmp_path):
    """`inv build --lock` through the real CLI, against a real registry that never held the
    byte-code base the lock names by digest, and an engine without it: one line naming it
    (exit 4) before anything is fetched. A lock made before the byte-code base was locked
    compiles it on the runtime base, so a runtime base that is gone is named as both."""
    from support.registry import local_registry

    env = {"EDGEVLLM_MIN_DISK_GB": "1", "EDGEVLLM_CACHE": str(tmp_path / "cache")}
    from support.platforms import native_platform

    # A wheel that is not there: were the bases not checked first, the build would stop at it
    # (instead of resolving and downloading vLLM's whole closure) and the test would fail.
    settings = {"platform": native_platform(), "python": "python3.11", "apt_packages": [],
                "torch": {"version": None},
                "vllm_wheel": str(tmp_path / "vllm-0.33.0-py3-none-any.whl")}
    here = BaseImageLock(ref=python_image_native)
    with local_registry() as host:
        gone = BaseImageLock(ref=f"{host}/edgevllm-test/gone:1", digest="sha256:" + "0" * 64)
        cases = {
            "byte-code": {"build": here, "runtime": here, "bytecode": gone},
            "runtime and byte-code": {"build": gone, "runtime": gone},
        }
        for named, images in cases.items():
            lock_file = write_lock(Lock(target="spark", mode="prebuilt", base_images=images,
                                        settings=settings), tmp_path / "spark.lock.json")
            code, _, stderr = cli("build", "--lock", str(lock_file), "--out",
                                  str(tmp_path / "out"), env=env)
            errors = [line for line in stderr.splitlines() if line.startswith("error:")]
            assert code == 4 and len(errors) == 1, stderr
            assert errors[0].startswith(
                f"error: --lock {lock_file}: the {named} base image {gone.pinned()} cannot be "
                "had: engine "), errors[0]
            assert "Traceback" not in stderr and not (tmp_path / "out" / "spark" / "src").exists()
