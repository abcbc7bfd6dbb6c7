"""``inv bundle`` and ``inv deploy --from``: an image, its recipe, lock, model and JIT caches as
one signed folder, installed on a node without network (docs/offline.md)."""

from __future__ import annotations

from pathlib import Path

from edgevllm.cli._common import cli_task
from edgevllm.common import console
from edgevllm.common.errors import ConfigError
from edgevllm.common.grammar import ImageRef, check
from edgevllm.containers.docker import DockerEngine

_ENGINE = "docker engine: 'local' (default), a docker context name or ssh://user@host"


@cli_task(help={"image": "the image to carry (tag or id)",
                "recipe": "the recipe it serves (name or YAML path): its file and its model go in",
                "out": "the bundle folder (new, or a bundle's: finished or written again)",
                "key": "your private key (PEM) the manifest is signed with",
                "target": "the recipe's target (thor, spark) where it has several",
                "hf-cache": "the Hugging Face cache the model is read from (default: the "
                            "recipe's hf_cache)",
                "revision": "the model's branch or commit (default: the recipe's, else main)",
                "lock": "the lock file to carry (default: the image's lock label)",
                "with-caches": "a JIT cache bundle of this image (inv warm) to carry",
                "attach": "the image's lock or SBOM (out/X.lock.json, as inv push --attach): "
                          "its SBOM and SLSA provenance attested in the layout beside the "
                          "signature (default: the signature alone)",
                "engine": _ENGINE},
          auto_shortflags=False)
def bundle(c, image=None, recipe=None, out=None, key=None, target=None, hf_cache=None,
           revision=None, lock=None, with_caches=None, attach=None, engine=None):
    """Write one signed folder (OCI image layout, recipe, lock, model, caches) to deploy offline."""
    from edgevllm.serve.offlinebundle import BundleRequest, make_bundle

    for flag, value in (("--image", image), ("--recipe", recipe), ("--out", out),
                        ("--key", key)):
        if not value:
            raise ConfigError(f"bundle: {flag} required (inv bundle --image IMG --recipe NAME "
                              "--out DIR --key KEY)")
    request = BundleRequest(
        image=check(ImageRef, image, "--image"), recipe=recipe, out=Path(out), key=Path(key),
        target=target, hf_cache=Path(hf_cache).expanduser() if hf_cache else None,
        revision=revision, lock=Path(lock) if lock else None,
        caches=Path(with_caches) if with_caches else None,
        attach=Path(attach) if attach else None)
    manifest = make_bundle(DockerEngine.named(engine), request)
    console.step(f"bundle {out}: {len(manifest.files)} files, signed; on the node: "
                 f"inv deploy --from {out} --key PUBLIC_KEY")


@cli_task(name="deploy",
          help={"from": "the bundle folder (inv bundle)",
                "key": "the signer's public key (PEM)",
                "hf-cache": "where the model goes (default: the recipe's hf_cache)",
                "every-layer": "send docker load every layer, also those the engine holds",
                "serve": "start the server once installed (else print the inv serve line)",
                "engine": _ENGINE},
          auto_shortflags=False)
def deploy(c, from_=None, key=None, hf_cache=None, every_layer=False, serve=False, engine=None):
    """Check a bundle's signature and every file, then load its image, model and caches."""
    from edgevllm.serve import deploy as installing

    if not from_ or not key:
        raise ConfigError("deploy: --from BUNDLE and --key PUBLIC_KEY required")
    folder = Path(from_)
    if not folder.is_dir():
        raise ConfigError(f"--from {folder}: no such bundle folder")
    docker = DockerEngine.named(engine)
    result = installing.deploy(docker, folder, Path(key),
                               Path(hf_cache).expanduser().absolute() if hf_cache else None,
                               every_layer=bool(every_layer))
    if not serve:
        print(installing.serve_line(result))
        return
    installing.start(docker, result)
