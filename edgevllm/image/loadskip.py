"""``inv load`` sends ``docker load`` only the layers the engine does not hold yet.

``docker load`` writes the whole archive into its temporary folder before it looks at a layer,
then makes each layer whose chain (the layer with every layer below it) it does not hold, and
never opens the file of one it holds. Loading an update of an image onto a device that has the
previous version would otherwise unpack gigabytes of layers it already has. So the archive,
checked whole first (image/setcheck.py), is streamed to docker load without the layer files of
chains some local image already holds: manifest.json, the config and every other member go as
they are, and the engine makes the same image (its id is checked after, as always).

What the engine holds is read from its images' layer lists; layers only its build cache holds
count as missing and are sent. An image removed between the look and the load makes docker load
miss a file: the load is then run again with every layer (image/load.py).
"""

from __future__ import annotations

import hashlib
import tarfile
from dataclasses import dataclass, field
from typing import IO

from edgevllm.common.archives import open_tar, walk
from edgevllm.common.errors import IntegrityError


def chain_ids(diff_ids: list[str]) -> list[str]:
    """Docker's chain ids of a layer list: the first layer's diff id, then each the sha256 of
    ``"<chain below> <diff id>"``."""
    chains: list[str] = []
    for diff_id in diff_ids:
        chains.append(diff_id if not chains else
                      "sha256:" + hashlib.sha256(f"{chains[-1]} {diff_id}".encode()).hexdigest())
    return chains


def held_chains(layer_lists: list[list[str]]) -> set[str]:
    """Every chain the engine's images hold."""
    return {chain for layers in layer_lists for chain in chain_ids(layers)}


@dataclass
class Skip:
    """The archive's layer files docker load will not need, and their bytes."""

    members: set[str] = field(default_factory=set)
    bytes: int = 0
    held: int = 0     # of the image's layers, those whose chain the engine holds
    layers: int = 0   # the image's layers in all

    def describe(self) -> str:
        return (f"{self.held} of {self.layers} layers ({self.bytes / 1e9:.1f} GB) already in "
                "the engine: not sent")


def layers_to_skip(members: list[str], diff_ids: list[str], sizes: dict[str, int],
                   held: set[str]) -> Skip:
    """The layer files (``members``, bottom first, as manifest.json lists them) whose chain is
    held. A file listed twice (the same layer twice in one image) is left out only if every
    chain it stands for is held."""
    chains = chain_ids(diff_ids)
    needed = {m for m, chain in zip(members, chains, strict=True) if chain not in held}
    skipped = set(members) - needed
    return Skip(skipped, sum(sizes.get(m, 0) for m in skipped),
                sum(chain in held for chain in chains), len(members))


def copy_without(source: IO[bytes], sink: IO[bytes], skip: set[str], label: str) -> None:
    """Stream the tar ``source`` to ``sink`` without the members named in ``skip`` (read
    through the archive gate, as the check before it read the same bytes)."""
    with open_tar(source, label, IntegrityError) as reader, \
            tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as writer:
        for member in walk(reader, label, IntegrityError):
            if member.name.removeprefix("./").strip("/") in skip:
                continue
            writer.addfile(member, reader.extractfile(member) if member.isfile() else None)
