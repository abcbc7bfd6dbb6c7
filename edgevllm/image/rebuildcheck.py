"""Two builds of one lock, compared: the image config's digest and each layer's diff id, and
where they differ, the first differing file named in one line (its layer's index, its path,
and what differs: kind, mode, owner, content, link, mtime, other tar headers, or presence).

``compare_images(engine, first, second)`` inspects both images (the engine's answer, nothing
read) and, where a layer's diff id differs, reads that layer of each image out of ``docker
save`` member by member (names, headers and a sha256 of every file's bytes; no file is
written). ``layer_members`` and ``first_member_difference`` work on any layer tar stream: the
unit tests feed them real tar files.
"""

from __future__ import annotations

import hashlib
import tarfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import IO

from edgevllm.common.archives import open_tar, walk
from edgevllm.common.errors import IntegrityError
from edgevllm.containers.docker import DockerEngine

CHUNK = 1 << 20
KINDS = {tarfile.REGTYPE: "file", tarfile.AREGTYPE: "file", tarfile.DIRTYPE: "dir",
         tarfile.SYMTYPE: "symlink", tarfile.LNKTYPE: "hardlink", tarfile.CHRTYPE: "char device",
         tarfile.BLKTYPE: "block device", tarfile.FIFOTYPE: "fifo"}
# The config fields docker inspect shows that a rebuild may change (what a differing config
# digest is explained by when every layer agrees).
CONFIG_FIELDS = ("Created", "Architecture", "Os", "Variant", "Author")
RUN_FIELDS = ("Labels", "Env", "Entrypoint", "Cmd", "WorkingDir", "User", "ExposedPorts",
              "Volumes", "StopSignal", "Healthcheck", "Shell", "OnBuild")


@dataclass(frozen=True)
class Member:
    """One entry of a layer tar: what a rebuild must give again."""

    path: str
    kind: str
    mode: int
    owner: str  # "uid:gid"
    mtime: float
    size: int
    digest: str  # a file's sha256; a link's target
    headers: tuple[tuple[str, str], ...] = ()  # PAX records other than the times (xattrs)


def layer_members(stream: IO[bytes], label: str = "a layer") -> list[Member]:
    """Every member of an uncompressed layer tar read as a stream, in order; a stream that is
    no tar, or is cut inside its first header or a file's bytes, is one IntegrityError line."""
    try:
        with open_tar(stream, label, IntegrityError) as tar:
            return [_member(tar, info)
                    for info in walk(tar, label, IntegrityError, filesystem=True)]
    except (tarfile.TarError, EOFError) as exc:
        detail = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        raise IntegrityError(f"{label}: not a whole tar archive ({detail})") from None


def _member(tar: tarfile.TarFile, info: tarfile.TarInfo) -> Member:
    digest = info.linkname if info.issym() or info.islnk() else ""
    if info.isfile():
        sha = hashlib.sha256()
        handle = tar.extractfile(info)
        if handle is not None:
            while block := handle.read(CHUNK):
                sha.update(block)
        digest = sha.hexdigest()
    headers = tuple(sorted((k, v) for k, v in info.pax_headers.items()
                           if k not in ("mtime", "atime", "ctime", "path", "linkpath", "size")))
    return Member(path=info.name, kind=KINDS.get(info.type, f"type {info.type!r}"),
                  mode=info.mode, owner=f"{info.uid}:{info.gid}", mtime=float(info.mtime),
                  size=info.size, digest=digest, headers=headers)


def first_member_difference(first: list[Member], second: list[Member]) -> str | None:
    """``path: what differs`` for the first member (in the first layer's order) that the two
    layers do not share exactly; None when every member agrees."""
    theirs = {m.path: m for m in second}
    for mine in first:
        other = theirs.get(mine.path)
        if other is None:
            return f"{mine.path}: only in the first build"
        if mine != other:
            return f"{mine.path}: {'; '.join(_aspects(mine, other))}"
    ours = {m.path for m in first}
    for other in second:
        if other.path not in ours:
            return f"{other.path}: only in the second build"
    if [m.path for m in first] != [m.path for m in second]:
        return "the same members in another order"
    return None


def _aspects(one: Member, two: Member) -> list[str]:
    found = []
    if one.kind != two.kind:
        found.append(f"kind {one.kind} vs {two.kind}")
    if one.mode != two.mode:
        found.append(f"mode {one.mode:o} vs {two.mode:o}")
    if one.owner != two.owner:
        found.append(f"owner {one.owner} vs {two.owner}")
    if one.kind == two.kind and one.digest != two.digest:
        what = "link target" if one.kind in ("symlink", "hardlink") else "content"
        found.append(f"{what} ({one.size} vs {two.size} bytes)" if what == "content"
                     else f"{what} {one.digest} vs {two.digest}")
    if one.mtime != two.mtime:
        found.append(f"mtime {_when(one.mtime)} vs {_when(two.mtime)}")
    if one.headers != two.headers:
        found.append("tar headers (PAX records)")
    return found


def _when(mtime: float) -> str:
    return datetime.fromtimestamp(mtime, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class ImageShape:
    """An image as a rebuild is judged: its config digest, its layers' diff ids, and the config
    fields docker inspect shows."""

    ref: str
    config_digest: str
    diff_ids: list[str]
    config: dict = field(default_factory=dict)


def image_shape(engine: DockerEngine, ref: str) -> ImageShape:
    found = engine.image_inspect(ref)
    config = {k: found.get(k) for k in CONFIG_FIELDS}
    config.update({k: (found.get("Config") or {}).get(k) for k in RUN_FIELDS})
    return ImageShape(ref=ref, config_digest=str(found.get("Id", "")),
                      diff_ids=list((found.get("RootFS") or {}).get("Layers") or []),
                      config=config)


@dataclass
class Comparison:
    """The verdict: ``same`` when the config digest and every diff id agree; ``line`` names the
    first difference otherwise."""

    first: ImageShape
    second: ImageShape
    same: bool
    line: str
    layer: int | None = None  # the index of the first differing layer (0: the base's first)

    def to_json(self) -> dict:
        return {"same": self.same, "line": self.line, "layer": self.layer,
                "config_digest": [self.first.config_digest, self.second.config_digest],
                "diff_ids": [self.first.diff_ids, self.second.diff_ids]}


def compare_shapes(first: ImageShape, second: ImageShape) -> Comparison:
    """What inspect alone tells: the same image, a differing config over the same layers, or
    the index of the first differing layer (its members still to be read)."""
    if first.config_digest == second.config_digest:
        return Comparison(first, second, True, f"the same image {first.config_digest}")
    index = first_layer_difference(first.diff_ids, second.diff_ids)
    if index is None:
        fields = [k for k in first.config if first.config.get(k) != second.config.get(k)]
        what = (", ".join(fields) if fields
                else "outside what docker inspect shows (the history's times or comments)")
        return Comparison(first, second, False,
                          f"every layer agrees; the image config differs: {what}")
    return Comparison(first, second, False, "", layer=index)


def first_layer_difference(first: list[str], second: list[str]) -> int | None:
    for index, (one, two) in enumerate(zip(first, second, strict=False)):
        if one != two:
            return index
    return None if len(first) == len(second) else min(len(first), len(second))


def compare_images(engine: DockerEngine, first: str, second: str) -> Comparison:
    """The two images compared; where a layer differs, its members read from both images."""
    verdict = compare_shapes(image_shape(engine, first), image_shape(engine, second))
    if verdict.same or verdict.layer is None:
        return verdict
    index = verdict.layer
    ones, twos = verdict.first.diff_ids, verdict.second.diff_ids
    if index >= len(ones) or index >= len(twos):
        longer = "first" if len(ones) > len(twos) else "second"
        verdict.line = (f"layer {index}: only the {longer} build has it "
                        f"({len(ones)} vs {len(twos)} layers)")
        return verdict
    what = first_member_difference(saved_layer(engine, first, ones[index]),
                                   saved_layer(engine, second, twos[index]))
    verdict.line = (f"layer {index} ({_short(ones[index])} vs {_short(twos[index])}): "
                    + (what or "every member agrees; the tar headers differ in bytes"))
    return verdict


def _short(diff_id: str) -> str:
    return diff_id.removeprefix("sha256:")[:12]


def saved_layer(engine: DockerEngine, image: str, diff_id: str) -> list[Member]:
    """The members of one layer of ``image`` (by its diff id), read out of ``docker save``: an
    uncompressed layer's blob is named by its sha256, which is its diff id."""
    wanted = diff_id.removeprefix("sha256:")
    found: list[Member] | None = None
    label = f"docker save {image}"
    with engine.save_stream([image]) as stream:
        with open_tar(stream, label, IntegrityError) as outer:
            for info in walk(outer, label, IntegrityError):
                handle = outer.extractfile(info) if wanted in info.name else None
                if handle is not None:
                    found = layer_members(handle, f"{label}: layer {_short(diff_id)}")
                    break
        while stream.read(CHUNK):  # the rest read, so docker save ends well (no broken pipe)
            pass
    if found is not None:
        return found
    raise IntegrityError(f"{image}: docker save holds no layer named {diff_id}; its layout is "
                         "not one edgevllm reads (docker 25 or later writes an OCI layout)")
