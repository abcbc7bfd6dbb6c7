"""``inv bundle``: one folder a site without network installs from (``inv deploy --from``).

The image as an OCI image layout (image/ocilayout.py), the recipe, the image's lock, the recipe's
model at a pinned commit from the local Hugging Face cache (serve/cache/hubfiles.py), a JIT cache
bundle where given (checked for this image first), the image's cosign signature and, with
``--attach``, its SBOM and SLSA provenance attestations in the layout (inspect/cosignlayout.py:
``skopeo copy`` out of it lands them where ``cosign verify`` looks), and one signed manifest of
every file's sha256 and size (serve/bundlefiles.py). The size is printed before a byte is
written; each file is written under a temporary name and renamed; a file already there with its
size and sha256 is kept (the signature in the layout excepted: signed anew), so a bundle cut
short is finished by running the same command again. The manifest is written last: a folder
without it is not a bundle.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from edgevllm.common import console
from edgevllm.common.archives import read_file
from edgevllm.common.errors import ConfigError, DiskSpaceError
from edgevllm.common.fsutil import atomic_write_text
from edgevllm.common.labels import LOCK_FILENAME, label_record
from edgevllm.containers.docker import DockerEngine
from edgevllm.image.ocilayout import save_layout
from edgevllm.image.progress import ByteProgress, human
from edgevllm.inspect import dsse
from edgevllm.inspect.cosignlayout import signature_blobs
from edgevllm.serve.bundlefiles import (
    BundleFile,
    BundleImage,
    BundleManifest,
    BundleModel,
    check_out_folder,
    copy_checked,
    hash_file,
    sign_manifest,
)
from edgevllm.serve.cache.bundle import bundle_name, model_revision
from edgevllm.serve.cache.harvest import check_for_image
from edgevllm.serve.cache.hubfiles import COMMIT, HubFile, snapshot_files
from edgevllm.serve.recipe.load import find_recipe, render_named

LOCK_LIMIT = 16 << 20  # a lock is tens of KiB


@dataclass
class BundleRequest:
    image: str
    recipe: str
    out: Path
    key: Path
    target: str | None = None
    hf_cache: Path | None = None   # default: the recipe's hf_cache
    revision: str | None = None    # default: the recipe's pinned revision, else main
    lock: Path | None = None       # default: the image's lock label
    caches: Path | None = None
    attach: Path | None = None     # the image's lock or SBOM: its stem's SBOM attested


@dataclass
class _Plan:
    image_id: str
    image_size: int
    lock_text: str | None
    commit: str
    ref: str | None
    hub: list[HubFile]
    serves_as: str | None


def make_bundle(engine: DockerEngine, request: BundleRequest) -> BundleManifest:
    dsse.load_private_key(request.key)  # a wrong key is one line before any work
    _check_attach(request.attach)
    check_out_folder(request.out)
    rendered = render_named(request.recipe, [], request.target)
    plan = _plan(engine, request, rendered)
    recipe_path = find_recipe(request.recipe)
    sizes = {"image": plan.image_size, "model": sum(f.source.stat().st_size for f in plan.hub),
             "caches": request.caches.stat().st_size if request.caches else 0}
    total = sum(sizes.values())
    console.info(f"bundle {request.out}: about {human(total)} (" + ", ".join(
        f"{name} {human(size)}" for name, size in sizes.items() if size) + ")")
    _check_disk(request.out, total)
    out = request.out
    out.mkdir(parents=True, exist_ok=True)
    layout = save_layout(engine, request.image, out / "image", plan.image_size, plan.image_id)
    replaced = signature_blobs(out / "image")  # a bundle written again: signed anew below
    layout = [name for name in layout if name not in replaced]
    layout += _sign_layout(engine, request, out / "image")
    files = [_entry(out, f"image/{name}") for name in sorted(set(layout))]
    files.append(_copy(recipe_path, out, f"recipe/{recipe_path.name}"))
    if plan.lock_text is not None:
        atomic_write_text(out / "lock" / LOCK_FILENAME, plan.lock_text)
        files.append(_entry(out, f"lock/{LOCK_FILENAME}"))
    files += _copy_model(plan.hub, out, sizes["model"])
    caches = None
    if request.caches is not None:
        caches = f"caches/{bundle_name(rendered.name, plan.image_id)}"
        files.append(_copy(request.caches, out, caches))
    manifest = BundleManifest(
        image=BundleImage(ref=request.image, id=plan.image_id, serves_as=plan.serves_as),
        recipe=f"recipe/{recipe_path.name}", target=rendered.target,
        lock=f"lock/{LOCK_FILENAME}" if plan.lock_text is not None else None, caches=caches,
        model=BundleModel(repo=rendered.model, commit=plan.commit, ref=plan.ref), files=files)
    sign_manifest(manifest, request.key, out)
    return manifest


def _check_attach(attach: Path | None) -> None:
    from edgevllm.inspect.provenance import artefact_paths, stem_of

    if attach is not None and not artefact_paths(stem_of(attach))[0].is_file():
        raise ConfigError(f"--attach {attach}: {artefact_paths(stem_of(attach))[0]} not found; "
                          "run inv sbom first")


def _sign_layout(engine: DockerEngine, request: BundleRequest, folder: Path) -> list[str]:
    """The image's cosign signature (and with ``--attach`` its attestations) in the layout,
    signed with the bundle's key; the layout's files written."""
    from edgevllm.common.keys import is_ed25519
    from edgevllm.inspect import attach, cosignlayout, provenance

    key = dsse.load_private_key(request.key)
    if is_ed25519(key):
        console.warn(f"--key {request.key}: {dsse.COSIGN_CANNOT}")
    dest = request.image.rsplit(":", 1)[0] if ":" in request.image.rsplit("/", 1)[-1] \
        else request.image
    predicates = {} if request.attach is None else attach.predicates(
        engine, request.image, dest, provenance.stem_of(request.attach))
    return cosignlayout.add_signatures(folder, dest, key, predicates)


def _plan(engine: DockerEngine, request: BundleRequest, rendered) -> _Plan:
    """Everything asked of the engine and the caches before a byte is written."""
    inspect = engine.image_inspect(request.image)
    image_id = inspect["Id"]
    hf_cache = request.hf_cache or Path(str(rendered.values.get("hf_cache"))).expanduser()
    revision = request.revision or model_revision(rendered.command, rendered.values) or None
    commit, hub = snapshot_files(hf_cache, rendered.model, revision)
    if request.caches is not None:
        check_for_image(request.caches, image_id)  # a bundle of another image: one line
    serves_as = rendered.image if rendered.image and rendered.image != request.image else None
    return _Plan(image_id, int(inspect.get("Size") or 0), _lock_text(request, inspect),
                 commit, None if revision and COMMIT.match(revision) else (revision or "main"),
                 hub, serves_as)


def _lock_text(request: BundleRequest, inspect: dict) -> str | None:
    if request.lock is not None:  # bounded: --lock /dev/zero is one line
        return read_file(request.lock, LOCK_LIMIT, "--lock", ConfigError).decode(errors="replace")
    record = label_record((inspect.get("Config") or {}).get("Labels"), "lock")
    if record is None:
        console.warn(f"{request.image}: no lock label (not an edgevllm build); the bundle carries "
                     "no lock (pass --lock FILE)")
        return None
    return json.dumps(record, indent=2, sort_keys=True) + "\n"


def _check_disk(out: Path, total: int) -> None:
    """Enough free space for what is not there yet (a bundle finished keeps its whole files)."""
    where = out if out.exists() else out.parent
    free = shutil.disk_usage(where if where.exists() else Path.cwd()).free
    present = sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) if out.is_dir() else 0
    if free < total - present:
        raise DiskSpaceError(f"--out {out}: {human(free)} free, the bundle needs about "
                             f"{human(total)}; free space or pick another folder")


def _entry(out: Path, relative: str) -> BundleFile:
    """A file just written: image blobs are named by their sha256 (checked while written)."""
    path = out / relative
    name = path.name
    sha = name if relative.startswith("image/blobs/sha256/") else hash_file(path)
    return BundleFile(path=relative, sha256=sha, size=path.stat().st_size)


def _copy(source: Path, out: Path, relative: str) -> BundleFile:
    sha = copy_checked(source, out / relative)
    return BundleFile(path=relative, sha256=sha, size=(out / relative).stat().st_size)


def _copy_model(hub: list[HubFile], out: Path, total: int) -> list[BundleFile]:
    files = []
    with ByteProgress("model", total) as progress:
        for item in hub:
            relative = f"model/{item.path}"
            sha = copy_checked(item.source, out / relative, progress,
                               want=item.blob if len(item.blob) == 64 else None)
            files.append(BundleFile(path=relative, sha256=sha, blob=item.blob,
                                    size=(out / relative).stat().st_size))
    return files
