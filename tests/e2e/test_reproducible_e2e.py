"""Reproducible images on the real engine (issue 45): the small spark image (the host's
platform, the stand-in vLLM of conftest.py) built from its lock with --check-reproducible:
built (its times set to the lock's after BuildKit), built again with every step rerun (BuildKit's
cache not used), and the two compared: the same config digest, the same layer diff ids. The
image of a default build (no --reproducible) is another, and the comparison names its first
differing file in one line: a file's mtime, the build's own time. Every check once per content: a
rebuild's verify and probe come from their caches, a one-mod rebuild changes two layers."""

from __future__ import annotations

import json
import re
import zipfile

import pytest

from e2e.conftest import hermetic_spec
from support.platforms import native_platform

pytestmark = pytest.mark.e2e
REPO = "edgevllm-test/e2e-reproducible"
MOD = "repro-test-mod"


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
    # the rerun's clamp found the first build's layers: digests alone, nothing written again
    assert "the engine held them all, nothing written" in stderr, stderr[-3000:]
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


def mod_at(root, version: str, text: str) -> None:
    """The test's files-only mod under ``root`` (EDGEVLLM_MODS_PATH) at ``version``."""
    from support.files_mod import write_files_mod

    manifest = write_files_mod(root, MOD, text, "/opt/edgevllm/repro",
                               "the reproducible test's mod") / "manifest.yaml"
    manifest.write_text(manifest.read_text().replace('version: "1"', f'version: "{version}"'))


def test_a_spec_build_checked_keeps_its_checks_takes_them_from_the_caches_and_one_mod_changes_two(
    engine, cuda_image_native, fake_upstream, tmp_path, monkeypatch, capfd, cli, made_images
):
    """--check-reproducible after a --spec build: the rebuild from its lock keeps what the lock
    does not record (the image repository, the checks' settings: the probe's required imports),
    so it is tagged and checked as the first build was, and is the same image, the mods record's
    time included. Every check once per content: that rebuild (every step rerun) reads no layer
    for verify (all known to its cache) and takes the probe's facts from its cache. A rebuild
    that changed one mod (its version and the file it installs; a new lock, made at another
    time) changes only the mods layer and the layer holding the lock: verify reads those two and
    the probe runs again (other content is never served from its cache)."""
    from e2e.conftest import write_spec
    from edgevllm.builder.pipeline import build
    from edgevllm.image.clamp import ZIP_EPOCH
    from edgevllm.specs.buildspec import spec_from_dict

    for setting, folder in (("EDGEVLLM_VERIFY_CACHE", "verify"), ("EDGEVLLM_PROBE_CACHE", "probe"),
                            ("EDGEVLLM_MODS_PATH", "mods")):
        monkeypatch.setenv(setting, str(tmp_path / folder))
    mod_at(tmp_path / "mods", "1", "first\n")
    spec = hermetic_spec("spark", cuda_image_native, fake_upstream, platform=native_platform(),
                         mods=[MOD], image_repo=REPO)
    out = tmp_path / "out"
    code, stdout, stderr = cli(
        "build", "--spec", str(write_spec(tmp_path / "spec.yaml", **spec)), "--out", str(out),
        "--check-reproducible", "--json", str(tmp_path / "result.json"), timeout=1200,
    )
    result = json.loads((tmp_path / "result.json").read_text()) if code == 0 else {}
    made_images.extend(result.get("tags", []))
    assert code == 0, stderr[-3000:]
    assert "reproducible: the same image sha256:" in stderr, stderr[-3000:]
    assert result["image"].startswith(f"{REPO}:") and stdout.strip() == result["image"]
    assert "edgevllm/vllm:" not in stderr
    built, rebuilt = stderr.split("every step rerun", 1)
    assert "facts of the probe cache" not in built
    assert re.search(r"layers: (\d+) in \S+, \1 known to the verify cache, 0 read", rebuilt), \
        rebuilt[-3000:]
    assert "probe level 1: the facts of the probe cache" in rebuilt
    # The compile's wheel (exported afresh into this --out) carries no time of its compile.
    wheels = sorted((out / "spark" / "wheels").glob("*/*.whl"))
    assert wheels and "wheel(s)' entry dates set to 1980-01-01" in built
    with zipfile.ZipFile(wheels[0]) as wheel:
        assert {entry.date_time for entry in wheel.infolist()} == {ZIP_EPOCH}

    mod_at(tmp_path / "mods", "2", "second\n")
    capfd.readouterr()
    third = build(spec_from_dict(dict(spec, reproducible=True)), out, engine)
    made_images.extend(third.tags)
    layers = engine.image_inspect(result["image"])["RootFS"]["Layers"]
    after = engine.image_inspect(third.image_id)["RootFS"]["Layers"]
    assert len(after) == len(layers)
    changed = [i for i, (a, b) in enumerate(zip(layers, after, strict=True)) if a != b]
    assert changed == [len(layers) - 2, len(layers) - 1], changed
    assert third.tail and sorted(third.tail["verify_layers"]["read"]) == \
        sorted(after[i] for i in changed)
    assert "facts of the probe cache" not in capfd.readouterr().err
