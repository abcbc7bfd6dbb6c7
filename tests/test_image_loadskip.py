"""image/loadskip.py: which layer files of a checked archive ``inv load`` leaves out (their
chains held by the engine's images), and the tar stream without them. The engine-side half
(docker load making the image from such a stream, the fall-back when a held layer went) is in
tests/test_image_publish.py."""

from __future__ import annotations

import hashlib
import io
import tarfile

from hypothesis import given
from hypothesis import strategies as st

from edgevllm.image.loadskip import chain_ids, copy_without, held_chains, layers_to_skip

A, B, C = ("sha256:" + hashlib.sha256(x).hexdigest() for x in (b"a", b"b", b"c"))


def test_chain_ids_are_dockers():
    ab = "sha256:" + hashlib.sha256(f"{A} {B}".encode()).hexdigest()
    abc = "sha256:" + hashlib.sha256(f"{ab} {C}".encode()).hexdigest()
    assert chain_ids([A, B, C]) == [A, ab, abc]
    assert chain_ids([]) == []


def test_only_layers_whose_whole_chain_is_held_are_left_out():
    members = ["blobs/sha256/a", "blobs/sha256/b", "blobs/sha256/c"]
    sizes = dict(zip(members, (10, 20, 30), strict=True))
    held = held_chains([[A, B]])           # an image with the two bottom layers
    skip = layers_to_skip(members, [A, B, C], sizes, held)
    assert skip.members == {"blobs/sha256/a", "blobs/sha256/b"} and skip.bytes == 30
    assert skip.describe().startswith("2 of 3 layers")
    # B above another bottom layer is another chain: not held, so sent
    assert layers_to_skip(members, [C, B, A], sizes, held).members == set()
    # the same layer file twice in one image: left out only if both chains are held
    twice = layers_to_skip(["x", "y", "x"], [A, B, A], {"x": 5, "y": 7}, held)
    assert twice.members == {"y"} and twice.bytes == 7
    assert twice.describe().startswith("2 of 3 layers")   # two of its chains are held


def _tar(names: list[str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in names:
            data = name.encode() * 1000
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@given(st.sets(st.sampled_from(["manifest.json", "blobs/sha256/a", "blobs/sha256/b",
                                "index.json"])))
def test_the_stream_loses_exactly_the_skipped_members_and_nothing_of_the_rest(skip):
    names = ["blobs/sha256/a", "blobs/sha256/b", "index.json", "manifest.json"]
    out = io.BytesIO()
    copy_without(io.BytesIO(_tar(names)), out, set(skip), "test.tar")
    with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as tar:
        kept = {m.name: (tar.extractfile(m) or io.BytesIO()).read() for m in tar.getmembers()}
    assert set(kept) == set(names) - set(skip)
    assert all(data == name.encode() * 1000 for name, data in kept.items())
