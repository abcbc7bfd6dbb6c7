"""A JIT cache bundle: the caches one image filled on a device, as one checked file.

``inv warm`` harvests the JIT caches of an image id (vLLM's compile cache, FlashInfer, Triton,
TileLang, the driver's compute cache: every entry of ``launch.jit_caches``) into
``<recipe>-<image id>.jitcache.tar``: a plain tar whose first member is ``manifest.json`` and the
rest ``caches/<name>/<path>``, one regular file each. The manifest is keyed by the image id, the
recipe, the model and its revision, and the target and its CUDA arch; it lists every file with its
size, sha256 and, for ELF files (cubins, shared objects), what verify found for the target.

``check_bundle`` is the one gate every reader passes (``inv serve --caches``, ``inv copy`` and
``inv publish --with-caches``): a manifest over the limits, one made for another image, arch or
model, a member the manifest does not list, a size or sha256 that differs, or device code that
does not run on the target is refused with one line (exit 11), before any byte is used.
"""

from __future__ import annotations

import hashlib
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Annotated, Iterator, Literal

from pydantic import Field, field_validator

from edgevllm.common.archives import check_member, forget_members, open_tar
from edgevllm.common.errors import MissingInputError, RecipeError
from edgevllm.common.grammar import SHA256_DIGEST, SHA256_HEX, ContainerPath
from edgevllm.common.schema import Strict, parse_json, parse_model

FORMAT = "edgevllm-jitcache/1"
SUFFIX = ".jitcache.tar"
MANIFEST = "manifest.json"
CACHES = "caches"
# Bounds on what a bundle may declare, checked before anything is read or allocated.
MAX_ENTRIES = 200_000
MAX_MANIFEST_BYTES = 64 << 20
MAX_ENTRY_BYTES = 8 << 30
MAX_ELF_BYTES = 1 << 30  # a JIT-built cubin or module: tens of MiB
MAX_BUNDLE_BYTES = 256 << 30
MAX_PATH = 1024
CHUNK = 1 << 20
_SAFE_PART = re.compile(r"[^\x00-\x1f\x7f/]+")
_CACHE_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


def safe_member(path: str) -> str:
    """``caches/<name>/<path>``: relative, no ``..``, no control characters; else ValueError."""
    parts = path.split("/")
    if (len(path) > MAX_PATH or len(parts) < 3 or parts[0] != CACHES
            or not _CACHE_NAME.fullmatch(parts[1])
            or any(p in ("", ".", "..") or not _SAFE_PART.fullmatch(p) for p in parts)):
        raise ValueError(f"{path[:120]!r} is not caches/<name>/<relative path>")
    return path


class Entry(Strict):
    path: str
    size: int = Field(ge=0, le=MAX_ENTRY_BYTES)
    sha256: str
    kind: Literal["file", "cubin", "library"] = "file"
    level: str | None = None  # verify's level of an ELF file with device code on the target

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        return safe_member(value)

    @field_validator("sha256")
    @classmethod
    def _sha(cls, value: str) -> str:
        if not SHA256_HEX.fullmatch(value):
            raise ValueError("is not 64 lower-case hex digits")
        return value


class Manifest(Strict):
    format: Literal["edgevllm-jitcache/1"]
    image_id: str
    recipe: str = Field(max_length=200)
    model: str = Field(max_length=500)
    model_revision: str = Field(default="", max_length=200)
    target: str = Field(max_length=64)
    cuda_arch: str = Field(max_length=16)
    created: str = Field(max_length=64)
    # name → the container path it was harvested from
    caches: dict[Annotated[str, Field(max_length=64)], ContainerPath] = Field(max_length=64)
    entries: list[Entry] = Field(max_length=MAX_ENTRIES)
    left_out: list[str] = Field(default_factory=list, max_length=MAX_ENTRIES)

    @field_validator("image_id")
    @classmethod
    def _image(cls, value: str) -> str:
        if not SHA256_DIGEST.fullmatch(value):  # an image id
            raise ValueError("is not an image id (sha256:<64 hex digits>)")
        return value

    @field_validator("caches")
    @classmethod
    def _caches(cls, value: dict[str, str]) -> dict[str, str]:
        for name, where in value.items():
            if not _CACHE_NAME.fullmatch(name):
                raise ValueError(f"cache name {name[:64]!r} is not a-z, 0-9, '_' or '-'")
            if ".." in where.split("/"):
                raise ValueError(f"cache {name}: {where[:120]!r} climbs out with '..'")
        return value

    @field_validator("entries")
    @classmethod
    def _total(cls, value: list[Entry]) -> list[Entry]:
        if sum(e.size for e in value) > MAX_BUNDLE_BYTES:
            raise ValueError(f"declare more than {MAX_BUNDLE_BYTES >> 30} GiB in all")
        if len({e.path for e in value}) != len(value):
            raise ValueError("list one path twice")
        return value

    @property
    def total_bytes(self) -> int:
        return sum(e.size for e in self.entries)

    def describe(self) -> str:
        return (f"{len(self.entries)} files, {self.total_bytes / (1 << 20):.1f} MiB of "
                f"{', '.join(sorted(self.caches))} caches for {self.recipe} ({self.model}"
                f"{'@' + self.model_revision if self.model_revision else ''}) on {self.target}, "
                f"image {self.image_id[7:19]}")


@dataclass(frozen=True)
class BundleKey:
    """What a bundle must have been made for to be used: image, device arch, model."""

    image_id: str
    recipe: str
    model: str
    model_revision: str
    target: str
    cuda_arch: str


def image_folder(image_id: str) -> str:
    """An image's short name for folders and files: ``sha256:abcd…`` → its first 16 hex digits
    (the per-image JIT cache folder, the bundle's file name)."""
    return image_id.split(":", 1)[-1][:16]


def bundle_name(recipe: str, image_id: str) -> str:
    return f"{recipe}-{image_folder(image_id)}{SUFFIX}"


def bundles_dir() -> Path:
    """Where ``inv warm`` writes bundles and ``inv serve`` looks for one by image id."""
    from edgevllm.common.paths import cache_dir

    return cache_dir("jit-bundles", create=False)  # inv warm creates it when it writes


def find_bundle(recipe: str, image_id: str, folder: Path | None = None) -> Path | None:
    path = (folder or bundles_dir()) / bundle_name(recipe, image_id)
    return path if path.is_file() else None


# -- reading ------------------------------------------------------------------------------------
def _open_tar(path: Path) -> tarfile.TarFile:
    try:  # extended headers bounded before tarfile reads them (common/archives.py)
        return open_tar(path, f"cache bundle {path}", RecipeError)
    except (OSError, tarfile.TarError) as exc:
        raise RecipeError(f"cache bundle {path}: not a readable tar ({exc}); run inv warm "
                          "again") from None


def _next(tar: tarfile.TarFile, path: Path) -> tarfile.TarInfo | None:
    """The next member, of a shape the archive gate allows in a bundle: a regular file (no
    sparse file: 3 KB declaring 3 GB of holes; no link, device or name out of the bundle)."""
    member = tar.next()
    forget_members(tar)  # tarfile would keep every member read
    if member is not None:
        check_member(member, f"cache bundle {path}", RecipeError)
    return member


def _read_manifest(tar: tarfile.TarFile, path: Path) -> Manifest:
    first = _next(tar, path)
    if first is None or first.name != MANIFEST or not first.isfile():
        raise RecipeError(f"cache bundle {path}: its first member is not {MANIFEST}; run inv "
                          "warm again")
    if first.size > MAX_MANIFEST_BYTES:
        raise RecipeError(f"cache bundle {path}: {MANIFEST} declares {first.size} bytes, over "
                          f"the {MAX_MANIFEST_BYTES >> 20} MiB a manifest may hold")
    handle = tar.extractfile(first)
    assert handle is not None
    data = parse_json(handle.read(), f"cache bundle {path}: {MANIFEST}", RecipeError)
    return parse_model(Manifest, data, f"cache bundle {path}: {MANIFEST}", RecipeError)


def read_manifest(path: Path | str) -> Manifest:
    """The manifest alone (first member): a bad one is one line."""
    path = Path(path)
    if not path.exists():  # a file the user named that is not there: an input error
        raise MissingInputError(f"cache bundle {path}: no such file (inv warm RECIPE writes one)")
    if not path.is_file():
        raise RecipeError(f"cache bundle {path}: not a file (inv warm RECIPE writes one)")
    with _open_tar(path) as tar:
        return _read_manifest(tar, path)


def refuse_other(manifest: Manifest, key: BundleKey, path: Path) -> None:
    """A bundle made for another image, arch or model is never used."""
    checks = [("image", manifest.image_id, key.image_id),
              ("CUDA arch", manifest.cuda_arch, key.cuda_arch),
              ("model", manifest.model, key.model),
              ("model revision", manifest.model_revision or "(none)",
               key.model_revision or "(none)")]
    for what, made, wanted in checks:
        if made != wanted:
            raise RecipeError(f"cache bundle {path} was made for {what} {made}, not {wanted}: "
                              f"use the bundle of this image (inv warm {key.recipe})")


def _member_bytes(tar: tarfile.TarFile, member: tarfile.TarInfo, entry: Entry,
                  path: Path) -> Iterator[bytes]:
    if not member.isfile() or member.size != entry.size:
        raise RecipeError(f"cache bundle {path}: {member.name} is not the {entry.size}-byte file "
                          "its manifest lists; the bundle is corrupt: run inv warm again")
    handle = tar.extractfile(member)
    assert handle is not None
    while chunk := handle.read(CHUNK):
        yield chunk


def _check_member(tar, member, entry: Entry, path: Path, arch) -> None:
    digest, head = hashlib.sha256(), bytearray()
    elf = entry.kind != "file"
    if elf and entry.size > MAX_ELF_BYTES:  # verify reads an ELF file whole, in memory
        raise RecipeError(f"cache bundle {path}: {member.name[:120]} is an ELF file of "
                          f"{entry.size} bytes, over the {MAX_ELF_BYTES >> 20} MiB a JIT cache "
                          "file may hold")
    for chunk in _member_bytes(tar, member, entry, path):
        digest.update(chunk)
        if elf:
            head += chunk
    if digest.hexdigest() != entry.sha256:
        raise RecipeError(f"cache bundle {path}: {member.name} does not match its sha256 in the "
                          "manifest (corrupt or changed); run inv warm again")
    if elf:
        check_device_code(member.name, bytes(head), arch, path)


def device_code(label: str, data, arch) -> tuple[str | None, str | None]:
    """(verify's level on ``arch`` or None without device code, the problem or None): a file
    whose code runs nowhere on ``arch``, or that verify cannot read, has a problem."""
    from edgevllm.verify.compat import library_level
    from edgevllm.verify.library import inspect_buffer

    report = inspect_buffer(label, data, arch)
    if report.corrupt:
        return None, report.status
    if not report.has_device_code:
        return None, None
    level = library_level(report.entries, arch)
    if level == "none":
        built = ", ".join(report.arches("sass") + report.arches("ptx"))
        return level, (f"holds no code that runs on sm_{arch.major}{arch.minor} ({built}): it "
                       "was built for another device")
    return level, None


def check_device_code(label: str, data, arch, path: Path | str) -> str | None:
    """``device_code``'s level; RecipeError naming the bundle when the file has a problem."""
    level, problem = device_code(label, data, arch)
    if problem:
        raise RecipeError(f"cache bundle {path}: {label} {problem}")
    return level


def check_bundle(path: Path | str, key: BundleKey) -> Manifest:
    """Every member against the manifest and the manifest against ``key``; see module doc."""
    from edgevllm.verify.compat import parse_arch

    path = Path(path)
    manifest = read_manifest(path)
    refuse_other(manifest, key, path)
    arch = parse_arch(manifest.cuda_arch)
    wanted = {e.path: e for e in manifest.entries}
    with _open_tar(path) as tar:
        _read_manifest(tar, path)
        try:
            while (member := _next(tar, path)) is not None:
                entry = wanted.pop(member.name, None)
                if entry is None:
                    raise RecipeError(f"cache bundle {path}: {member.name[:120]} is not in its "
                                      "manifest (listed twice, or added later); run inv warm "
                                      "again")
                _check_member(tar, member, entry, path, arch)
        except (OSError, tarfile.TarError, EOFError) as exc:
            raise RecipeError(f"cache bundle {path}: cut short or damaged ({exc}); copy it "
                              "again") from None
    if wanted:
        raise RecipeError(f"cache bundle {path}: {len(wanted)} files of its manifest are missing "
                          f"(e.g. {next(iter(wanted))}); copy it again")
    return manifest


def seed_stream(path: Path, manifest: Manifest, mounts: dict[str, str],
                out: IO[bytes]) -> list[str]:
    """Write the bundle's files as a tar for ``docker cp - CONTAINER:/``: ``caches/<name>/x``
    at ``<container path of name>/x``. Returns the cache names left out (not mounted here)."""
    skipped: set[str] = set()
    listed = {e.path: e.size for e in manifest.entries}
    with _open_tar(path) as tar, tarfile.open(fileobj=out, mode="w|") as seed:
        _read_manifest(tar, path)
        while (member := _next(tar, path)) is not None:
            if listed.pop(member.name, None) != member.size or not member.isfile():
                raise RecipeError(f"cache bundle {path}: {member.name[:120]} changed after it "
                                  "was checked; run the command again")
            _, name, rest = member.name.split("/", 2)
            where = mounts.get(name)
            if where is None:
                skipped.add(name)
                continue
            handle = tar.extractfile(member)
            info = tarfile.TarInfo(f"{where.strip('/')}/{rest}")
            info.size, info.mode, info.mtime = member.size, 0o644, member.mtime
            seed.addfile(info, handle)
    return sorted(skipped)


# -- the key of a recipe's launch ---------------------------------------------------------------
def model_revision(command: list[str], values: dict) -> str:
    """The model revision the server loads: its ``--revision`` flag, else the recipe's
    ``revision`` value; "" when neither pins one."""
    for index, arg in enumerate(command):
        if arg == "--revision" and index + 1 < len(command):
            return command[index + 1]
        if arg.startswith("--revision="):
            return arg.removeprefix("--revision=")
    value = values.get("revision")
    return str(value) if value else ""


def bundle_key(rendered, image_id: str) -> BundleKey:
    """The key a bundle of ``rendered`` (a ``recipe.load.Rendered``) on image ``image_id`` has."""
    from edgevllm.specs.targets import load_target

    return BundleKey(image_id=image_id, recipe=rendered.name, model=rendered.model,
                     model_revision=model_revision(rendered.command, rendered.values),
                     target=rendered.target, cuda_arch=load_target(rendered.target).cuda_arch)
