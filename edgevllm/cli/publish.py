"""``inv publish`` / ``inv load`` / ``inv push``: share images as verified tarballs or through
a registry.

The engine is docker's current one, or the one ``--engine`` names (``ssh://me@spark``, a docker
context): the image is read where it was built.
"""

from __future__ import annotations

from pathlib import Path

from edgevllm.cli._common import cli_task
from edgevllm.common.grammar import flag_int
from edgevllm.common.kv import split_csv


@cli_task(
    help={
        "image": "local image to publish (tag or id)",
        "out": "folder for <name>.tar.zst (or parts) and <name>.manifest.json",
        "name": "file name stem (default: from the image tag, repo:tag → repo_tag)",
        "format": "zst (default, multi-threaded zstd) or gz (for 'docker load <' users)",
        "level": "compression level (default: zst 3, gz 6)",
        "part_size": "split into parts of at most this size, e.g. 1900M or 2G",
        "threads": "compression threads (default: one per CPU)",
        "force": "replace an existing set of the same name",
        "long": "zstd long-distance window as a power of two (default 27 = 128 MiB; 0: off)",
        "no_layer_cache": "compress the plain docker save stream (no per-layer cache)",
        "layer_cache": "layer cache folder (default: $EDGEVLLM_LAYER_CACHE or <cache>/layers)",
        "sbom": "also write <name>.sbom.cdx.json beside the manifest (docs/inside.md)",
        "sign_key": "also sign the provenance with this key (P-256 or Ed25519): "
        "<name>.provenance.dsse.json (implies --sbom)",
        "prime_cache": "only compress the image's layers into the cache (no --out; e.g. after a "
        "build)",
        "with_caches": "also put this JIT cache bundle (inv warm) beside the set as "
        "<name>.jitcache.tar with its .sha256; it must be the image's",
        "engine": "the engine the image is on: ssh://[user@]host[:port] or a docker context "
        "(default: this one)",
    }
)
def publish(
    c,
    image=None,
    out=None,
    name=None,
    format="zst",
    level=None,
    part_size=None,
    threads="-1",
    force=False,
    long="27",
    no_layer_cache=False,
    layer_cache=None,
    prime_cache=False,
    sbom=False,
    sign_key=None,
    with_caches=None,
    engine=None,
):
    """Save an image as compressed, checksummed tarball part(s) plus a manifest."""
    _use_engine(engine)
    level, threads, long = _codec_flags("zst" if prime_cache else format, level, threads, long)
    if prime_cache:
        return _prime(image, level, threads, long, layer_cache)
    require(image=image, out=out)
    from edgevllm.image.publish import PublishOptions, parse_size
    from edgevllm.image.publish import publish as run_publish

    options = PublishOptions(
        image=image,
        out_dir=Path(out),
        name=name,
        format=format,
        level=level, threads=threads,
        part_size=parse_size(part_size),
        force=force,
        long=long,
        use_layer_cache=not no_layer_cache,
        layer_cache=Path(layer_cache) if layer_cache else None,
    )
    bundle = _checked_bundle(image, with_caches) if with_caches else None
    result = run_publish(_engine(), options)
    _print_result(result, Path(out), bundle)
    if sbom or sign_key:
        _supply_chain(image, result.manifest_path, sign_key)


def _print_result(result, out: Path, bundle: Path | None) -> None:
    """The sizes on stderr; every file written on stdout (the bundle and its checksum last)."""
    from edgevllm.common import console
    from edgevllm.image.progress import human

    manifest = result.manifest
    layers = result.layers
    reuse = (
        (
            f", layers: {layers.cached_layers} from the cache, {layers.compressed_layers} "
            f"compressed{'' if layers.saved else ', no docker save'}"
        )
        if layers
        else ""
    )
    console.info(
        f"{human(manifest['uncompressed_size'])} → {human(manifest['total_size'])} in "
        f"{len(result.part_paths)} part(s), {result.seconds:.1f}s{reuse}"
    )
    for path in result.part_paths:
        print(path)
    print(result.manifest_path)
    if bundle is not None:
        from edgevllm.serve.cache.distribute import bundle_beside

        for path in bundle_beside(bundle, out, result.manifest["name"]):
            print(path)


def _checked_bundle(image: str, bundle: str) -> Path:
    """A JIT cache bundle checked for the image before the (long) publish starts."""
    from edgevllm.serve.cache.bundle import read_manifest
    from edgevllm.serve.cache.harvest import check_for_image

    read_manifest(bundle)  # a bad file is one line before the engine is asked
    check_for_image(Path(bundle), _engine().image_id(image))
    return Path(bundle)


def _supply_chain(image: str, manifest_path: Path, sign_key: str | None) -> None:
    """The SBOM (and signed statement) of the image, beside its manifest: the set's image id
    is the image's, so ``inv verify-supply-chain --tarball`` checks them offline."""
    from edgevllm.inspect.provenance import stem_of
    from edgevllm.inspect.supplychain import sign, view_of_image, write_sbom

    view = view_of_image(_engine(), image)
    stem = stem_of(manifest_path)
    print(write_sbom(view, stem)[0])
    if sign_key:
        print(sign(view, stem, Path(sign_key)))


def _codec_flags(format, level, threads, long) -> tuple[int | None, int, int]:
    """--level (zstd 1-22, gzip 0-9), --threads (-1: one per CPU), --long (a window of 2^10 to
    2^31 bytes; 0: off)."""
    low, high = (0, 9) if format == "gz" else (1, 22)
    level = flag_int(level, "--level", low, high) if level is not None else None
    # 0 turns the long window off; otherwise zstd takes a window log of 10 to 31
    long = 0 if str(long).strip() == "0" else flag_int(long, "--long", 10, 31)
    return level, flag_int(threads, "--threads", -1, 1024), long


def _prime(image, level, threads, long, layer_cache) -> None:
    from edgevllm.common import console

    require(image=image)
    from edgevllm.image.layercache import ZstdSettings
    from edgevllm.image.publish import prime_layer_cache

    settings = ZstdSettings(3 if level is None else level, long, threads)
    stats = prime_layer_cache(
        _engine(), image, settings, Path(layer_cache) if layer_cache else None
    )
    console.info(
        f"{image}: {stats.compressed_layers} layer(s) compressed into the cache, "
        f"{stats.cached_layers} already there"
    )


@cli_task(
    help={"path": "a <name>.manifest.json, a part, or a .tar / .tar.gz / .tar.zst tarball",
          "every_layer": "send docker load every layer, also those the engine's images hold "
          "(by default they are left out of the stream)"},
    positional=["path"],
)
def load(c, path, every_layer=False):
    """Check every part's sha256, then stream the image into the engine; prints the loaded tags."""
    _use_engine(None)
    from edgevllm.common import console
    from edgevllm.image.load import load as run_load

    result = run_load(_engine(), Path(path), every_layer=every_layer)
    console.info(
        f"loaded {result.image_id or 'image'} from {result.source}"
        + ("" if result.verified else " (unverified)")
    )
    for name in result.loaded:
        print(name)


@cli_task(
    help={
        "image": "local image to push",
        "registry": "HOST[:PORT][/NAMESPACE], e.g. ghcr.io/me or 127.0.0.1:5000/team",
        "tag": "immutable tag (default: from the image's lock / io.edgevllm.tag label)",
        "moving_tag": "also push this moving tag, e.g. latest-spark (repeatable, or a,b)",
        "repo": "repository name under the registry (default: the image's repository name)",
        "attach": "the image's SBOM (X.sbom.cdx.json, or its lock X.lock.json): with --key, the "
        "pushed image is signed and the SBOM and SLSA provenance attested in cosign's layout "
        "(<repo>:sha256-<digest>.sig / .att; cosign verify-attestation reads them; "
        "docs/inside.md)",
        "key": "--attach: the signing key (ECDSA P-256 PEM; inv keygen makes one)",
        "engine": "the engine the image is on: ssh://[user@]host[:port] or a docker context "
        "(default: this one)",
    },
    iterable=["moving_tag"],
)
def push(c, image=None, registry=None, tag=None, moving_tag=None, repo=None, attach=None,
         key=None, engine=None):
    """Push the immutable lock-derived tag (never overwriting another image) and moving tags."""
    _use_engine(engine)
    require(image=image, registry=registry)
    from edgevllm.image.registry import push as run_push

    stem = _attach_stem(attach, key) if attach else None

    result = run_push(
        _engine(), image, registry, tag=tag, moving_tags=split_csv(moving_tag), repo=repo
    )
    for pushed in [result.immutable] + result.moving:
        print(f"{pushed.ref} {pushed.digest} {pushed.action}")
    if stem is not None:
        from edgevllm.inspect.attach import push_attachment

        for ref, digest in push_attachment(_engine(), image, result.immutable.ref,
                                           result.immutable.digest, stem, Path(key)):
            print(f"{ref} {digest} attached")


def _attach_stem(attach: str, key: str | None) -> Path:
    """Checked before anything is pushed: the SBOM and the key must be there."""
    from edgevllm.common.errors import ConfigError
    from edgevllm.inspect.dsse import load_private_key
    from edgevllm.inspect.provenance import artefact_paths, stem_of

    if not key:
        raise ConfigError("--attach needs --key: the private key that signs the image and its "
                          "attestations (inv keygen makes one)")
    load_private_key(key)
    stem = stem_of(Path(attach))
    if not artefact_paths(stem)[0].is_file():
        raise ConfigError(f"--attach {attach}: {artefact_paths(stem)[0]} not found; run inv sbom "
                          "(and inv sign) first")
    return stem


def require(**flags) -> None:
    """Required flags are checked here, not by Invoke, so that `inv publish --help` still works."""
    from edgevllm.common.errors import ConfigError

    for name, value in flags.items():
        if value in (None, ""):
            raise ConfigError(
                f"--{name.replace('_', '-')} is required (inv --help TASK lists the flags)"
            )


# The engine this process's task reads from (each task sets it first, from its --engine).
_ENGINE: dict[str, str | None] = {"spec": None}


def _use_engine(spec: str | None) -> None:
    from edgevllm.containers.docker import DockerEngine

    DockerEngine.named(spec)  # a bad --engine is one line before anything else
    _ENGINE["spec"] = spec


def _engine():
    from edgevllm.containers.docker import DockerEngine

    return DockerEngine.named(_ENGINE["spec"])
