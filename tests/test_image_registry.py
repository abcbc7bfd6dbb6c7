"""inv push against a real registry (Debian's docker-registry on 127.0.0.1, started per module).

Push → remove → pull gives the same digest and image; an immutable tag is never overwritten by
another image; moving tags are. Images are tiny and unique per test (tests/support/publish_images).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from edgevllm.common.errors import ConfigError, EngineError, RegistryError
from edgevllm.image.registry import (
    _http_manifest,
    check_registry,
    holds_image,
    push,
    remote_manifest,
)
from edgevllm.specs.lock import image_tag, parse_lock
from support.checks import present
from support.publish_images import LOCK, remove_everything, unique_image
from support.registry import free_port

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def images(engine):
    """Make unique images; every one is removed (all its tags) after the test."""
    made: list[str] = []

    def make(name: str, labels: dict[str, str] | None = None) -> str:
        tag = unique_image(engine, name, labels)
        made.append(engine.image_id(tag))
        return tag

    yield make
    for image_id in made:
        remove_everything(engine, image_id)


@pytest.fixture
def cli(cli):
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return lambda *args, **kw: cli(*args, env={"PYTHONPATH": path}, **kw)


def test_push_remove_pull_gives_the_same_digest(engine, registry, images, cli):
    """The immutable tag comes from the lock label; the CLI prints ref, digest and action."""
    image = images("lock", {"io.edgevllm.lock": json.dumps(LOCK)})
    image_id = engine.image_id(image)
    tag = image_tag(parse_lock(json.dumps(LOCK)))
    code, out, err = cli(
        "push", "--image", image, "--registry", f"{registry}/team", "--moving-tag", "latest-spark"
    )
    assert code == 0, err
    lines = [line.split() for line in out.splitlines()]
    ref = f"{registry}/team/edgevllm-test-publish-lock:{tag}"
    assert lines[0][0] == ref and lines[0][2] == "pushed"
    digest = lines[0][1]
    assert lines[1] == [
        f"{registry}/team/edgevllm-test-publish-lock:latest-spark",
        digest,
        "pushed",
    ]
    remove_everything(engine, image_id)
    assert not engine.image_exists(image_id)
    engine.pull(ref)
    assert engine.image_id(ref) == image_id
    assert (
        f"{registry}/team/edgevllm-test-publish-lock@{digest}"
        in engine.image_inspect(ref)["RepoDigests"]
    )


def test_pushing_the_same_image_again_is_a_no_op(engine, registry, images):
    image = images("again")
    first = push(engine, image, registry, tag="v1")
    second = push(engine, image, registry, tag="v1")
    assert first.immutable.action == "pushed" and second.immutable.action == "unchanged"
    assert second.immutable.digest == first.immutable.digest


def test_same_image_from_another_machine_is_recognised(engine, registry, images):
    """No RepoDigest locally (as after a load from a tarball): the config digest decides."""
    image = images("elsewhere")
    push(engine, image, registry, tag="v1", repo="elsewhere")
    raw = present(remote_manifest(engine, f"{registry}/elsewhere:v1"))
    inspect = {**engine.image_inspect(image), "RepoDigests": []}
    assert holds_image(engine, f"{registry}/elsewhere", raw, inspect)
    other = {**inspect, "Id": "sha256:" + "1" * 64}
    assert not holds_image(engine, f"{registry}/elsewhere", raw, other)


def test_immutable_tag_is_never_overwritten(engine, registry, images, cli):
    first = images("clash")
    second = images("clash")
    pushed = push(engine, first, registry, tag="v1", repo="clash")
    code, out, err = cli(
        "push", "--image", second, "--registry", registry, "--tag", "v1", "--repo", "clash"
    )
    assert code == 10, err
    assert "already exists with digest" in err and "never overwritten" in err
    assert "Traceback" not in err and out == ""
    held = present(remote_manifest(engine, f"{registry}/clash:v1"))
    assert "sha256:" + hashlib.sha256(held).hexdigest() == pushed.immutable.digest


def test_moving_tags_follow_the_latest_image(engine, registry, images):
    old = push(engine, images("moving"), registry, tag="a1", moving_tags=["latest-x"], repo="mv")
    new = push(engine, images("moving"), registry, tag="a2", moving_tags=["latest-x"], repo="mv")
    held = present(remote_manifest(engine, f"{registry}/mv:latest-x"))
    assert "sha256:" + hashlib.sha256(held).hexdigest() == new.moving[0].digest
    assert new.moving[0].digest != old.moving[0].digest


def test_tag_label_is_the_fallback_and_no_tag_is_refused(engine, registry, images):
    labelled = push(engine, images("label", {"io.edgevllm.tag": "vllm:0.11-spark-abc"}), registry)
    assert labelled.immutable.ref.endswith("/edgevllm-test-publish-label:0.11-spark-abc")
    with pytest.raises(ConfigError, match="pass --tag TAG"):
        push(engine, images("none"), registry)


@pytest.mark.parametrize("bad", ["https://ghcr.io/me", "me", "127.0.0.1:5000/Team"])
def test_bad_registry_is_one_line(bad):
    with pytest.raises(ConfigError, match="--registry"):
        check_registry(bad)


def test_unreachable_registry_is_an_error_not_a_free_tag(engine, images):
    image = images("down")
    with pytest.raises((EngineError, RegistryError), match="cannot"):
        push(engine, image, f"127.0.0.1:{free_port()}", tag="v1")


def test_http_api_fallback_reads_the_same_manifest(engine, registry, images):
    """Without buildx the registry's HTTP API v2 is asked (anonymously) instead."""
    pushed = push(engine, images("http"), registry, tag="h1", repo="http")
    raw = present(_http_manifest(f"{registry}/http:h1"))
    assert "sha256:" + hashlib.sha256(raw).hexdigest() == pushed.immutable.digest
    assert _http_manifest(f"{registry}/http:absent") is None
