"""Reproducible images on the real engine (issue 45): the small spark image (the host's
platform, the stand-in vLLM of conftest.py) built from its lock with --check-reproducible:
built (its times set to the lock's after BuildKit), built again with every step rerun (BuildKit's
cache not used), and the two compared: the same config digest, the same layer diff ids. The
image of a default build (no --reproducible) is another, and the comparison names its first
differing file in one line: a file's mtime, the build's own time."""

from __future__ import annotations

import json

import pytest

from e2e.conftest import hermetic_spec
from support.platforms import native_platform

pytestmark = pytest.mark.e2e
REPO = "edgevllm-test/e2e-reproducible"


@pytest.fixture
def made_images(engine):
    """The images the test tags, removed after (only those: never another's)."""
    made: list[str] = []
    yield made
    for ref in made:
        engine.remove_image(ref)


def test_a_lock_rebuilt_with_every_step_rerun_is_the_same_image(
    engine, cuda_image_native, fake_upstream, tmp_path, cli, made_images
):
    from edgevllm.builder.pipeline import build
    from edgevllm.image.rebuildcheck import compare_images
    from edgevllm.specs.buildspec import spec_from_dict

    out = tmp_path / "out"
    spec = hermetic_spec("spark", cuda_image_native, fake_upstream, platform=native_platform(),
                         mods=[], image_repo=REPO)
    first = build(spec_from_dict(spec), out, engine)  # a default build: its lock, its times
    made_images.append(first.image_id)
    code, stdout, stderr = cli(
        "build", "--lock", str(first.lock_path), "--out", str(out), "--no-verify",
        "--image-repo", REPO, "--check-reproducible", "--json", str(tmp_path / "again.json"),
        timeout=1200,
    )
    again = json.loads((tmp_path / "again.json").read_text()) if code == 0 else {}
    made_images.extend(again.get("tags", []))
    assert code == 0, stderr[-3000:]
    assert "every step rerun" in stderr
    assert "reproducible: the same image sha256:" in stderr, stderr[-3000:]
    shape = engine.image_inspect(again["image"])
    assert shape["Created"].startswith(str(json.loads(
        first.lock_path.read_text())["created_at"])[:19])

    # The default build's image differs from the reproducible one: the check names the first
    # differing file, a time of its own build, in one line.
    verdict = compare_images(engine, first.image_id, again["image"])
    assert not verdict.same and verdict.layer is not None
    assert verdict.line.startswith(f"layer {verdict.layer} (")
    assert ": mtime " in verdict.line and "\n" not in verdict.line, verdict.line


def test_a_spec_build_checked_is_rebuilt_as_its_spec_tags_and_checks_it(
    engine, cuda_image_native, fake_upstream, tmp_path, cli, made_images
):
    """--check-reproducible after a --spec build: the rebuild from its lock keeps what the lock
    does not record (the image repository, the checks' settings), so it is tagged and checked as
    the first build was, and is the same image."""
    from e2e.conftest import write_spec

    spec = hermetic_spec("spark", cuda_image_native, fake_upstream, platform=native_platform(),
                         mods=[], image_repo=REPO, verify=False)
    spec_file = write_spec(tmp_path / "spec.yaml", **spec)
    code, stdout, stderr = cli(
        "build", "--spec", str(spec_file), "--out", str(tmp_path / "out"),
        "--check-reproducible", "--json", str(tmp_path / "result.json"), timeout=1200,
    )
    result = json.loads((tmp_path / "result.json").read_text()) if code == 0 else {}
    made_images.extend(result.get("tags", []))
    assert code == 0, stderr[-3000:]
    assert "reproducible: the same image sha256:" in stderr, stderr[-3000:]
    assert result["image"].startswith(f"{REPO}:") and stdout.strip() == result["image"]
    assert "edgevllm/vllm:" not in stderr
