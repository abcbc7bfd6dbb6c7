"""A hand-made ImageView for the supply-chain tests without an engine: it stands in for what the
engine (or a published set) reports about an image; one distribution (six), the inspect lock and
one applied mod."""

from __future__ import annotations

from typing import Any

from edgevllm.inspect import inimage_dists
from edgevllm.inspect.supplychain import ImageView
from support.inside_locks import make_lock

IMAGE_ID = "sha256:" + "cd" * 32


def make_view(**changes) -> ImageView:
    dists = [inimage_dists.entry("/site/six-1.16.0.dist-info", b"Name: six\nVersion: 1.16.0\n",
                                 b"six.py,,\n")]
    values: dict[str, Any] = dict(ref="img:1", image_id=IMAGE_ID, repo_digests=[], lock=make_lock(),
                  mods_record=[{"name": "fastsafetensors", "version": "1.0",
                                "outcome": "applied"}], dists=dists)
    values.update(changes)
    return ImageView(**values)
