"""image/clampmemo.py with real files: what the clamp made of a layer or an image, remembered
under its moment (layers shared by config moments, images not) and read back as outside data: an
entry that is not 64 hex digits, a symbolic link or in a folder others can write is a miss (one
warning), a bad argument a miss too; a clamped config read back only as the bytes its name says;
pruned oldest first, only its own entries; the key follows the clamp's sources and the format."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from edgevllm.common import trust
from edgevllm.image import clampmemo
from edgevllm.image.clamp import Moment
from edgevllm.image.clampmemo import ROOT_SETTING, ClampMemo, memo_key

MOMENT, OTHER = Moment(1_700_000_000, 1_699_000_000), Moment(1_700_000_001, 1_699_000_000)
CONFIG, LATER = Moment(1_710_000_000, 1_699_000_000), Moment(1_720_000_000, 1_699_000_000)
LAYER, MADE = "sha256:" + "a" * 64, "sha256:" + "b" * 64
IMAGE, MADE_IMAGE = "sha256:" + "c" * 64, "sha256:" + "d" * 64


@pytest.fixture(autouse=True)
def fresh(monkeypatch, tmp_path):
    monkeypatch.setattr(trust, "_warned", set())
    monkeypatch.delenv(trust.SHARED_SETTING, raising=False)
    monkeypatch.setenv(ROOT_SETTING, str(tmp_path / "clamp"))


def memo(moment: Moment = MOMENT, config: Moment = CONFIG) -> ClampMemo:
    found = ClampMemo.for_moments(moment, config)
    assert found is not None
    return found


def entry(found: ClampMemo, kind: str, sha: str):
    return found.root / found.keys[kind] / f"{kind}-{sha.removeprefix('sha256:')}"


def test_what_a_layer_and_an_image_became_is_read_back(tmp_path):
    one = memo()
    assert one.root == tmp_path / "clamp"
    assert one.get("layer", LAYER) is None and one.get("image", IMAGE) is None
    umask = os.umask(0o002)  # a umask that leaves group write: sealed all the same
    try:
        one.put("layer", LAYER, MADE)
        one.put("image", IMAGE.removeprefix("sha256:"), MADE_IMAGE)  # with or without sha256:
    finally:
        os.umask(umask)
    assert one.get("layer", LAYER) == MADE and one.get("layer", LAYER[7:]) == MADE
    assert one.get("image", IMAGE) == MADE_IMAGE
    assert one.get("image", LAYER) is None and one.get("layer", IMAGE) is None
    path = entry(one, "layer", LAYER)
    assert path.read_bytes() == b"b" * 64
    assert path.parent.stat().st_mode & 0o777 == 0o700 and path.stat().st_mode & 0o022 == 0


def test_layers_are_shared_by_config_moments_and_images_are_not():
    memo().put("layer", LAYER, MADE)
    memo().put("image", IMAGE, MADE_IMAGE)
    assert memo(config=LATER).get("layer", LAYER) == MADE
    assert memo(config=LATER).get("image", IMAGE) is None
    assert memo().get("image", IMAGE) == MADE_IMAGE
    assert memo(OTHER).get("layer", LAYER) is None  # another moment, another clamped layer


def test_the_root_is_the_setting_else_the_cache_and_off_is_none(tmp_path, monkeypatch):
    monkeypatch.setenv(ROOT_SETTING, "off")
    assert ClampMemo.for_moments(MOMENT, CONFIG) is None
    monkeypatch.delenv(ROOT_SETTING)
    monkeypatch.setenv("EDGEVLLM_CACHE", str(tmp_path / "cache"))
    assert memo().root == tmp_path / "cache" / "clamp"
    assert not (tmp_path / "cache").exists()  # made by the first put, not by asking


@pytest.mark.parametrize("text", [b"x" * 64, b"B" * 64, b"b" * 63, b"b" * 65, b"b" * 64 + b"\n",
                                  b"b" * 64 + b"\n" + b"c" * 64, b"", b"\xff" * 64],
                         ids=["not-hex", "upper", "63", "65", "newline", "two-lines", "empty",
                              "not-ascii"])
def test_an_entry_that_is_not_64_hex_digits_is_a_miss(text):
    one = memo()
    one.put("layer", LAYER, MADE)
    entry(one, "layer", LAYER).write_bytes(text)
    assert one.get("layer", LAYER) is None


def test_a_symbolic_link_or_a_folder_others_can_write_is_a_miss_warned_once(tmp_path, capsys):
    one = memo()
    one.put("layer", LAYER, MADE)
    one.put("layer", "sha256:" + "e" * 64, MADE)
    path = entry(one, "layer", LAYER)
    target = tmp_path / "elsewhere"
    target.write_bytes(b"f" * 64)
    path.unlink()
    path.symlink_to(target)
    assert one.get("layer", LAYER) is None
    assert "is a symbolic link" in capsys.readouterr().err
    path.unlink()
    one.put("layer", LAYER, MADE)
    assert one.get("layer", LAYER) == MADE
    path.parent.chmod(0o777)
    assert one.get("layer", LAYER) is None and one.get("layer", "sha256:" + "e" * 64) is None
    one.put("layer", IMAGE, MADE)  # not written where others could have
    assert not entry(one, "layer", IMAGE).exists()
    err = capsys.readouterr().err  # the symbolic link's warning was this root's one
    assert err == ""
    trust._warned.clear()
    assert one.get("layer", LAYER) is None and one.get("layer", LAYER) is None
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and "writable by others" in err, err


@pytest.mark.parametrize("sha", ["sha256:" + "a" * 63, "sha256:" + "A" * 64, "md5:" + "a" * 64,
                                 "../" + "a" * 64, "a" * 64 + "/x", ""],
                         ids=["63", "upper", "md5", "climbs", "folder", "empty"])
def test_an_argument_that_is_not_a_sha256_is_a_miss_not_an_exception(sha):
    one = memo()
    one.put("layer", sha, MADE)
    one.put("layer", LAYER, sha)
    assert one.get("layer", sha) is None and one.get("layer", LAYER) is None
    assert not one.root.exists() or list(one.root.rglob("*-*")) == []


def test_prune_keeps_the_newest_and_only_removes_its_own_entries(tmp_path):
    one, other = memo(), memo(OTHER)
    shas = [f"sha256:{n:064x}" for n in range(6)]
    for n, sha in enumerate(shas):
        (one if n % 2 else other).put("layer", sha, MADE)
        os.utime(entry(one if n % 2 else other, "layer", sha), (1_000 + n, 1_000 + n))
    assert one.get("layer", shas[1]) == MADE  # used now: the most recent
    folder = entry(one, "layer", shas[1]).parent
    strangers = [folder / "notes.txt", folder / "layer-xyz", one.root / f"layer-{'a' * 64}"]
    for path in strangers:
        path.write_bytes(b"a" * 64)
        os.utime(path, (1, 1))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / f"layer-{'f' * 64}").write_bytes(b"f" * 64)
    os.utime(outside / f"layer-{'f' * 64}", (1, 1))
    (one.root / "linked").symlink_to(outside)
    assert one.prune(limit=3) == 3
    kept = sorted(p.name for p in one.root.glob("*/layer-*") if p.parent.name != "linked")
    assert kept == sorted(f"layer-{s[7:]}" for s in (shas[1], shas[4], shas[5])) + ["layer-xyz"]
    assert all(path.exists() for path in strangers) and (outside / f"layer-{'f' * 64}").exists()
    assert one.prune(limit=3) == 0


def test_a_clamped_config_is_read_back_by_its_sha256_and_pruned_as_an_entry():
    import hashlib

    one, config = memo(), b'{"architecture":"arm64","rootfs":{"diff_ids":[]}}'
    image_id = "sha256:" + hashlib.sha256(config).hexdigest()
    assert one.get_config(image_id) is None
    one.put_config(config)
    assert one.get_config(image_id) == config and memo(config=LATER).get_config(image_id) is None
    path = one.root / one.keys["image"] / f"config-{image_id[7:]}"
    path.write_bytes(config + b" ")  # not the bytes its name says
    assert one.get_config(image_id) is None and one.get_config("sha256:x") is None
    one.put_config(config)
    os.utime(path, (1, 1))
    one.put("layer", LAYER, MADE)
    assert one.prune(limit=1) == 1 and not path.exists()


@pytest.fixture
def sources(tmp_path, monkeypatch):
    """A copy of the clamp's sources that clampmemo reads its version from."""
    copy = tmp_path / "image"
    copy.mkdir()
    for name in ("clamp.py", "clampimage.py", "clampmemo.py"):
        shutil.copy(os.path.join(os.path.dirname(clampmemo.__file__), name), copy / name)
    clampmemo._sources_digest.cache_clear()
    from edgevllm.image import clamp, clampimage

    for module in (clamp, clampimage, clampmemo):
        monkeypatch.setattr(module, "__file__", str(copy / Path(str(module.__file__)).name))
    yield copy
    clampmemo._sources_digest.cache_clear()


def test_the_key_follows_the_clamp_s_sources_the_format_and_the_moments(sources, monkeypatch):
    key = memo_key(MOMENT)
    assert len(key) == 32 and key == memo_key(MOMENT)
    assert len({key, memo_key(OTHER), memo_key(MOMENT, CONFIG), memo_key(MOMENT, LATER)}) == 4
    for name in ("clamp.py", "clampimage.py", "clampmemo.py"):
        before = (sources / name).read_bytes()
        (sources / name).write_bytes(before + b"# another rule\n")
        clampmemo._sources_digest.cache_clear()
        assert memo_key(MOMENT) != key, name
        (sources / name).write_bytes(before)
        clampmemo._sources_digest.cache_clear()
        assert memo_key(MOMENT) == key
    monkeypatch.setattr(clampmemo, "FORMAT", clampmemo.FORMAT + 1)
    assert memo_key(MOMENT) != key
