"""image/rebuildcheck.py on real tar files: two layers compared member by member, the first
differing file named with what differs (mtime, content, mode, owner, kind, presence), and two
images' shapes compared by config digest and diff ids."""

from __future__ import annotations

import io
import tarfile

import pytest

from edgevllm.image.rebuildcheck import (
    ImageShape,
    compare_shapes,
    first_layer_difference,
    first_member_difference,
    layer_members,
)

EPOCH = 1_700_000_000


def layer(*entries: tuple) -> list:
    """A real layer tar written with tarfile and read back as a stream: entries are
    (path, data or None for a directory, mode, mtime[, uid])."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, data, mode, mtime, *uid in entries:
            info = tarfile.TarInfo(path)
            info.mode, info.mtime, info.uid = mode, mtime, (uid[0] if uid else 0)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif isinstance(data, str):
                info.type, info.linkname = tarfile.SYMTYPE, data
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    return layer_members(buffer)


BASE = (("opt/", None, 0o755, EPOCH), ("opt/a.py", b"print(1)\n", 0o644, EPOCH),
        ("opt/b.txt", b"b\n", 0o644, EPOCH))


def with_entry(index: int, entry: tuple) -> list:
    entries = list(BASE)
    entries[index] = entry
    return layer(*entries)


def test_the_same_members_agree():
    assert first_member_difference(layer(*BASE), layer(*BASE)) is None


def test_a_later_mtime_is_named_with_both_times():
    found = first_member_difference(layer(*BASE),
                                    with_entry(1, ("opt/a.py", b"print(1)\n", 0o644, EPOCH + 60)))
    assert found == "opt/a.py: mtime 2023-11-14T22:13:20Z vs 2023-11-14T22:14:20Z"


def test_the_first_differing_member_is_named_not_a_later_one():
    one = layer(("opt/", None, 0o755, EPOCH), ("opt/a.py", b"x", 0o644, EPOCH),
                ("opt/b.txt", b"b\n", 0o644, EPOCH))
    two = layer(("opt/", None, 0o755, EPOCH + 1), ("opt/a.py", b"y", 0o644, EPOCH),
                ("opt/b.txt", b"c\n", 0o644, EPOCH))
    assert first_member_difference(one, two) == (
        "opt: mtime 2023-11-14T22:13:20Z vs 2023-11-14T22:13:21Z")


def test_content_mode_and_owner_are_told_apart():
    content = with_entry(2, ("opt/b.txt", b"other\n", 0o644, EPOCH))
    assert first_member_difference(layer(*BASE), content) == (
        "opt/b.txt: content (2 vs 6 bytes)")
    same_size = with_entry(2, ("opt/b.txt", b"c\n", 0o644, EPOCH))
    assert first_member_difference(layer(*BASE), same_size) == "opt/b.txt: content (2 vs 2 bytes)"
    mode = with_entry(2, ("opt/b.txt", b"b\n", 0o755, EPOCH))
    assert first_member_difference(layer(*BASE), mode) == "opt/b.txt: mode 644 vs 755"
    owner = with_entry(2, ("opt/b.txt", b"b\n", 0o644, EPOCH, 1000))
    assert first_member_difference(layer(*BASE), owner) == "opt/b.txt: owner 0:0 vs 1000:0"


def test_a_link_target_and_a_kind_are_named():
    link = layer(("opt/l", "a.py", 0o777, EPOCH))
    other = layer(("opt/l", "b.txt", 0o777, EPOCH))
    assert first_member_difference(link, other) == "opt/l: link target a.py vs b.txt"
    as_file = layer(("opt/l", b"a.py", 0o777, EPOCH))
    assert first_member_difference(link, as_file) == "opt/l: kind symlink vs file"


def test_a_member_in_one_build_only_and_another_order():
    fewer = layer(*BASE[:2])
    assert first_member_difference(layer(*BASE), fewer) == "opt/b.txt: only in the first build"
    assert first_member_difference(fewer, layer(*BASE)) == "opt/b.txt: only in the second build"
    swapped = layer(BASE[0], BASE[2], BASE[1])
    assert first_member_difference(layer(*BASE), swapped) == "the same members in another order"


def test_a_file_hash_reads_every_byte():
    big = bytes(range(256)) * 8192  # 2 MiB: more than one read
    changed = big[:-1] + b"\x00"
    assert first_member_difference(layer(("f", big, 0o644, EPOCH)),
                                   layer(("f", changed, 0o644, EPOCH))) == (
        f"f: content ({len(big)} vs {len(big)} bytes)")


def shape(config_digest: str, diff_ids: list[str], **config) -> ImageShape:
    return ImageShape(ref="x", config_digest=config_digest, diff_ids=diff_ids,
                      config={"Created": "2023-11-14T22:13:20Z", "Labels": {}, **config})


def test_shapes_the_same_image():
    verdict = compare_shapes(shape("sha256:1", ["a", "b"]), shape("sha256:1", ["a", "b"]))
    assert verdict.same and verdict.layer is None


def test_shapes_a_config_that_differs_over_the_same_layers_names_its_fields():
    verdict = compare_shapes(shape("sha256:1", ["a", "b"]),
                             shape("sha256:2", ["a", "b"], Created="2026-01-01T00:00:00Z"))
    assert not verdict.same and verdict.layer is None
    assert verdict.line == "every layer agrees; the image config differs: Created"


def test_shapes_the_first_differing_layer_index():
    verdict = compare_shapes(shape("sha256:1", ["a", "b", "c"]), shape("sha256:2", ["a", "x", "y"]))
    assert verdict.layer == 1


@pytest.mark.parametrize(("one", "two", "index"), [
    (["a"], ["a"], None), (["a", "b"], ["a"], 1), (["a"], ["b"], 0), ([], ["a"], 0)])
def test_first_layer_difference(one, two, index):
    assert first_layer_difference(one, two) == index
