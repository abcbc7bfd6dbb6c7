"""``inv deploy --from BUNDLE``: install an offline bundle (serve/offlinebundle.py) on a node
without network.

Order is the guarantee: the manifest's signature is checked with the site's public key, then
every listed file's size and sha256 (serve/bundlefiles.py); only then does a byte reach the engine
(``docker load`` of the OCI layout, without the layers the engine holds: image/ocilayout.py) or the
model folder (the hub cache layout the recipe's ``hf_cache`` mount serves as ``HF_HOME``:
serve/cache/hubfiles.py). The loaded image must be the manifest's image id. The JIT cache bundle
goes where ``inv serve`` looks for one by recipe and image. Nothing here opens a network
connection: the docker socket is a unix socket, and huggingface_hub is not asked.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from edgevllm.common import console
from edgevllm.common.errors import IntegrityError
from edgevllm.common.grammar import ImageRef, check
from edgevllm.containers.docker import DockerEngine
from edgevllm.image.ocilayout import load_layout
from edgevllm.image.progress import ByteProgress
from edgevllm.serve.bundlefiles import (
    BundleManifest,
    check_files,
    copy_checked,
    read_verified,
)
from edgevllm.serve.cache.bundle import bundles_dir
from edgevllm.serve.cache.hubfiles import check_names, place
from edgevllm.serve.recipe.load import render_named


@dataclass
class DeployResult:
    manifest: BundleManifest
    image: str
    snapshot: Path | None
    caches: Path | None
    serve_argv: list[str]


def verify_bundle(folder: Path, key: Path) -> BundleManifest:
    """The signed manifest, once every file it lists checks (nothing installed before)."""
    manifest = read_verified(folder, key)
    if manifest.model is not None:
        check_names(manifest.model.repo, manifest.model.commit, manifest.model.ref,
                    [(f.path.removeprefix("model/"), f.blob or "") for f in
                     manifest.under("model")], str(folder))
    check_files(folder, manifest)
    return manifest


def deploy(engine: DockerEngine, folder: Path, key: Path, hf_cache: Path | None = None,
           every_layer: bool = False) -> DeployResult:
    manifest = verify_bundle(folder, key)
    console.step(f"{folder}: signature and {len(manifest.files)} files checked")
    image = _load_image(engine, folder, manifest, every_layer)
    recipe = folder / manifest.recipe
    rendered = render_named(str(recipe), [], manifest.target)
    cache_root = hf_cache or Path(str(rendered.values.get("hf_cache"))).expanduser()
    snapshot = _place_model(folder, manifest, cache_root)
    caches = _install_caches(folder, manifest)
    argv = ["inv", "serve", str(recipe), "--target", manifest.target]
    if hf_cache is not None:
        argv += ["--set", f"hf_cache={hf_cache}"]
    if caches is not None:
        argv += ["--caches", str(caches)]
    return DeployResult(manifest, image, snapshot, caches, argv)


def serve_line(result: DeployResult) -> str:
    return shlex.join(result.serve_argv)


def _load_image(engine: DockerEngine, folder: Path, manifest: BundleManifest,
                every_layer: bool) -> str:
    files = [f.path.removeprefix("image/") for f in manifest.under("image")]
    loaded = load_layout(engine, folder / "image", files, every_layer)
    ids = {name if name.startswith("sha256:") else engine.image_id(name) for name in loaded}
    if ids != {manifest.image.id}:
        raise IntegrityError(f"{folder}: docker load made {', '.join(sorted(ids)) or 'nothing'}, "
                             f"the manifest names {manifest.image.id}")
    if manifest.image.serves_as:
        name = check(ImageRef, manifest.image.serves_as, f"{folder}: the image name",
                     IntegrityError)
        engine.tag(manifest.image.id, name)
    console.step(f"image {manifest.image.ref} ({manifest.image.id[:19]}) is in the engine")
    return manifest.image.serves_as or manifest.image.ref


def _place_model(folder: Path, manifest: BundleManifest, hf_cache: Path) -> Path | None:
    model = manifest.model
    entries = manifest.under("model")
    if model is None or not entries:
        return None
    with ByteProgress(f"model {model.repo}", sum(f.size for f in entries)) as progress:
        sha_of = {f.blob: f.sha256 for f in entries}
        snapshot = place(hf_cache, model.repo, model.commit, model.ref,
                         [(f.path.removeprefix("model/"), f.blob or "", folder / f.path)
                          for f in entries],
                         lambda source, final: copy_checked(source, final, progress,
                                                            want=sha_of[final.name]))
    console.step(f"model {model.repo}@{model.commit[:12]} is in {snapshot}")
    return snapshot


def _install_caches(folder: Path, manifest: BundleManifest) -> Path | None:
    if manifest.caches is None:
        return None
    entry = next(f for f in manifest.files if f.path == manifest.caches)
    final = bundles_dir() / Path(manifest.caches).name
    bundles_dir().mkdir(parents=True, exist_ok=True, mode=0o700)
    copy_checked(folder / entry.path, final, want=entry.sha256)
    console.step(f"JIT caches are in {final}")
    return final


def start(engine: DockerEngine, result: DeployResult) -> str:
    """``--serve``: what the printed ``inv serve`` line does."""
    from edgevllm.serve.launch import serve

    argv = result.serve_argv
    sets = [argv[i + 1] for i, word in enumerate(argv) if word == "--set"]
    rendered = render_named(argv[2], sets, result.manifest.target)
    return serve(rendered, engine, caches=result.caches, find_caches=True)
