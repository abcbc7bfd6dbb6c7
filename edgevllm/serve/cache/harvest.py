"""Harvest a container's JIT caches into a bundle, and seed a container from one.

``harvest``: ``docker cp`` copies each ``launch.jit_caches`` folder out of the (stopped) recipe
container, for a local or a remote engine alike, into a temporary folder beside the bundle; every
regular file is hashed, and every ELF file (cubin, shared object) is read by verify's reader for
the target. A file whose device code does not run on the target (a JIT build for another arch) or
that is not a readable ELF is left out of the bundle, named in its ``left_out`` and in a warning;
symlinks and special files are left out too. The bundle is written under a temporary name and
renamed (``common.fsutil``); the temporary folder is removed.

``seed``: a bundle that passed ``bundle.check_bundle`` is streamed into a created, not yet
started container with ``docker cp -``; its per-image cache folders (bind mounts) receive the
files before the server's first instruction runs.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import io
import json
import tarfile
import tempfile
from pathlib import Path

from edgevllm.common import console
from edgevllm.common.errors import EdgeVllmError, RecipeError
from edgevllm.common.fsutil import atomic_open
from edgevllm.containers.docker import DockerEngine, RunOptions
from edgevllm.serve.cache.bundle import (
    CACHES,
    CHUNK,
    FORMAT,
    MANIFEST,
    MAX_ENTRIES,
    MAX_ENTRY_BYTES,
    BundleKey,
    Entry,
    Manifest,
    bundle_key,
    bundle_name,
    check_bundle,
    device_code,
    find_bundle,
    safe_member,
    seed_stream,
)

SEED_ROOT = "/edgevllm-seed"  # where inv copy mounts a node's cache folders to fill them


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _elf_entry(path: Path, member: str, arch) -> tuple[str, str | None]:
    """(kind, level) of an ELF file through verify's reader; ValueError when it must stay out."""
    from edgevllm.verify.elf import is_cuda_elf
    from edgevllm.verify.readers import inspect_file

    found: list[tuple[str | None, str | None]] = []

    def inspect(label: str, view) -> object:
        found.append(device_code(label, view, arch))
        return True

    inspect_file(path, member, inspect)  # type: ignore[arg-type]
    level, problem = found[0] if found else (None, None)
    if problem:
        raise ValueError(problem)
    with open(path, "rb") as handle:
        kind = "cubin" if is_cuda_elf(handle.read(64)) else "library"
    return kind, level


def _entry(path: Path, member: str, arch) -> Entry:
    from edgevllm.verify.elf import is_elf

    size = path.stat().st_size
    if size > MAX_ENTRY_BYTES:
        raise ValueError(f"{size} bytes, over the {MAX_ENTRY_BYTES >> 30} GiB a bundle entry "
                         "may hold")
    with open(path, "rb") as handle:
        elf = is_elf(handle.read(4))
    kind, level = _elf_entry(path, member, arch) if elf else ("file", None)
    return Entry.model_validate({"path": member, "size": size, "sha256": _sha256(path),
                                 "kind": kind, "level": level})


def collect(folder: Path, arch) -> tuple[list[Entry], list[str]]:
    """Entries for every regular file under ``folder/<cache name>/``; what was left out, why."""
    entries, left_out = [], []
    for path in sorted(p for p in folder.rglob("*") if not p.is_dir() or p.is_symlink()):
        member = f"{CACHES}/{path.relative_to(folder).as_posix()}"
        try:
            safe_member(member)
        except ValueError:
            shown = member[:200].encode("unicode_escape").decode()  # no terminal escapes
            left_out.append(f"{shown}: a name the bundle cannot hold")
            continue
        if path.is_symlink() or not path.is_file():
            left_out.append(f"{member}: a symlink or special file")
            continue
        try:
            entries.append(_entry(path, member, arch))
        except ValueError as exc:
            left_out.append(f"{member}: {exc}")
        if len(entries) > MAX_ENTRIES:
            raise RecipeError(f"the caches hold more than {MAX_ENTRIES} files, more than a "
                              "bundle may list; clear the image's cache folder and warm again")
    return entries, left_out


def write_bundle(folder: Path, manifest: Manifest, out: Path) -> Path:
    """The tar: manifest first, then every listed file (temporary name, then rename)."""
    data = json.dumps(manifest.model_dump(), indent=1, sort_keys=True).encode()
    with atomic_open(out, "wb") as handle, tarfile.open(fileobj=handle, mode="w|") as tar:
        info = tarfile.TarInfo(MANIFEST)
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
        for entry in manifest.entries:
            source = folder / entry.path.split("/", 1)[1]
            info = tarfile.TarInfo(entry.path)
            info.size, info.mode = entry.size, 0o644
            with open(source, "rb") as body:
                tar.addfile(info, body)
    return out


def bundle_folder(folder: Path, key: BundleKey, caches: dict[str, str], out: Path) -> Manifest:
    """Write the bundle of ``folder/<cache name>/...`` (what was harvested) to ``out``."""
    from edgevllm.verify.compat import parse_arch

    entries, left_out = collect(folder, parse_arch(key.cuda_arch))
    for line in left_out:
        console.warn(f"left out of the bundle: {line}")
    created = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    manifest = Manifest.model_validate({
        "format": FORMAT, "image_id": key.image_id, "recipe": key.recipe, "model": key.model,
        "model_revision": key.model_revision, "target": key.target, "cuda_arch": key.cuda_arch,
        "created": created, "caches": dict(caches), "entries": entries, "left_out": left_out})
    write_bundle(folder, manifest, out)
    return manifest


def harvest(engine: DockerEngine, container: str, key: BundleKey, caches: dict[str, str],
            out_dir: Path) -> tuple[Path, Manifest]:
    """Copy ``caches`` (name → container path) out of ``container`` into a bundle in
    ``out_dir``; see module doc."""
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / bundle_name(key.recipe, key.image_id)
    with tempfile.TemporaryDirectory(prefix=".harvest-", dir=out_dir) as scratch:
        work = Path(scratch)
        for name, where in sorted(caches.items()):
            try:
                engine.copy_from(container, where, work / name)
            except EdgeVllmError as exc:
                console.warn(f"cache {name} ({where}): not copied ({exc}); left out")
        return out, bundle_folder(work, key, caches, out)


def seed(engine: DockerEngine, container: str, bundle: Path, manifest: Manifest,
         mounts: dict[str, str]) -> None:
    """Stream a checked bundle into a created container's cache folders (``docker cp -``)."""
    skipped: list[str] = []
    engine.copy_into(container, lambda out: skipped.extend(
        seed_stream(bundle, manifest, mounts, out)))
    for name in skipped:
        console.warn(f"cache bundle {bundle.name}: cache {name} is not mounted by this launch "
                     "(launch.jit_caches); its files were left out")


def bundle_line(rendered, image_id: str | None, caches: Path | str | None,
                find_caches: bool) -> str:
    """What a start would fill its cache folders from (``--dry-run``); checked at the start."""
    path = Path(caches) if caches else (find_bundle(rendered.name, image_id)
                                         if find_caches and image_id else None)
    if path is None:
        return "cache bundle: none (inv warm RECIPE makes one)"
    return f"cache bundle: {path}, checked and copied into the cache folders at the start"


def start_with_caches(engine: DockerEngine, options: RunOptions, rendered,
                      image_id: str, caches: Path | str | None, find_caches: bool) -> None:
    """Start the container, first filled from its checked cache bundle when there is one."""
    path = Path(caches) if caches else (find_bundle(rendered.name, image_id) if find_caches
                                         else None)
    if path is None:
        engine.start(options)
        return
    if not rendered.launch.jit_caches:
        raise RecipeError(f"--caches {path}: recipe {rendered.name} mounts no JIT cache folders "
                          "(launch.jit_caches) to put the bundle in")
    manifest = check_bundle(path, bundle_key(rendered, image_id))
    container = engine.create_container(options)
    try:
        seed(engine, container, path, manifest, dict(rendered.launch.jit_caches))
        engine.start_container(container)
    except BaseException:
        engine.remove_container(container)
        raise
    console.step(f"cache bundle {path.name}: {manifest.describe()}")


def key_of(manifest: Manifest, image_id: str) -> BundleKey:
    """The key a bundle must match to go with ``image_id`` (its own model and arch)."""
    return BundleKey(image_id=image_id, recipe=manifest.recipe, model=manifest.model,
                     model_revision=manifest.model_revision, target=manifest.target,
                     cuda_arch=manifest.cuda_arch)


def check_for_image(bundle: Path, image_id: str) -> Manifest:
    """The whole check of a bundle that travels with the image ``image_id`` (copy, publish)."""
    from edgevllm.serve.cache.bundle import read_manifest

    return check_bundle(bundle, key_of(read_manifest(bundle), image_id))


def seed_node(engine: DockerEngine, image: str, image_id: str, bundle: Path,
              manifest: Manifest, jit_cache_root: str | None = None) -> str:
    """Fill a node's per-image cache folders from a checked bundle, through a container of the
    image that never starts (``docker create`` + ``docker cp``); returns the folder."""
    from edgevllm.serve.cache.bundle import image_folder
    from edgevllm.specs.targets import load_target

    root = (jit_cache_root or load_target(manifest.target).launch.jit_cache_root).rstrip("/")
    folder = f"{root}/{image_folder(image_id)}"
    # each cache folder at a path of edgevllm's own: nothing of the bundle names a mount point
    mounts = {name: f"{SEED_ROOT}/{name}" for name in sorted(manifest.caches)}
    options = RunOptions(image=image, command=["true"], entrypoint="",
                         volumes=[f"{folder}/{name}:{where}" for name, where in mounts.items()])
    container = engine.create_container(options)
    try:
        seed(engine, container, bundle, manifest, mounts)
    finally:
        engine.remove_container(container)
    return folder
