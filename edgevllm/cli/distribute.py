"""``inv copy | model-fetch``: put the image and the weights on every node of a cluster."""

from __future__ import annotations

from pathlib import Path

from edgevllm.cli._common import cli_task
from edgevllm.common import console
from edgevllm.common.errors import RecipeError
from edgevllm.common.kv import split_csv
from edgevllm.common.paths import host_hf_cache

_NODES = "nodes: ssh://[user@]host[:port], comma-separated or repeated"


def _report(results, what: str) -> None:
    width = max([len(r.node) for r in results] + [4])
    for r in results:
        print(f"{r.node:<{width}}  {r.status:<10} {r.detail}")
    failed = [r.node for r in results if r.status == "failed"]
    if failed:
        raise RecipeError(f"{what} failed on {', '.join(failed)}; run again (done nodes are "
                          "skipped)")


@cli_task(name="copy", help={"image": "the image to copy (tag or id on the source engine)",
                             "to": f"the {_NODES}",
                             "engine": "source engine: 'local' (default), a context or a URL",
                             "with-caches": "also fill each node's JIT cache folders of the image "
                                            "from this bundle (inv warm), checked first",
                             "jit-cache-root": "with --with-caches: the nodes' JIT cache root "
                                               "(default: the target's launch.jit_cache_root)"},
          iterable=["to"], auto_shortflags=False)
def copy_image(c, image, to=None, engine=None, with_caches=None, jit_cache_root=None):
    """Stream an image to every node in parallel; skip nodes with the same image id; verify."""
    from edgevllm.containers.docker import DockerEngine
    from edgevllm.serve.cache.distribute import copy_caches
    from edgevllm.serve.cache.distribute import copy_image as copy

    nodes = split_csv(to)
    if not nodes:
        raise RecipeError("say where to: --to ssh://node2,ssh://node3")
    source = DockerEngine.named(engine)
    targets = [DockerEngine.named(n) for n in nodes]
    manifest = _checked_bundle(with_caches, source, image) if with_caches else None
    _report(copy(image, source, targets), f"copying {image}")
    if manifest is not None:
        _report(copy_caches(Path(with_caches), manifest, image, manifest.image_id, targets,
                            jit_cache_root), f"filling the JIT caches of {image}")


def _checked_bundle(bundle: str, engine, image: str):
    """The bundle's manifest once every file checked out for ``image`` (before any copy)."""
    from edgevllm.serve.cache.bundle import read_manifest
    from edgevllm.serve.cache.harvest import check_for_image

    read_manifest(bundle)  # a bad file is one line before the engine is asked
    return check_for_image(Path(bundle), engine.image_id(image))


@cli_task(name="model-fetch",
          help={"model": "Hugging Face repo id (org/name)",
                "nodes": f"also copy it to these {_NODES} (rsync over ssh)",
                "hf-cache": "the Hugging Face cache folder here (default $HF_HOME or "
                            "~/.cache/huggingface)",
                "remote-cache": "the cache folder on the nodes (default: the same path)",
                "revision": "branch, tag or commit (default: main)",
                "token-env": "the environment variable holding the token (default HF_TOKEN); "
                             "its value is never printed"},
          iterable=["nodes"], positional=["model"], auto_shortflags=False)
def model_fetch(c, model, nodes=None, hf_cache=None, remote_cache=None, revision=None,
                token_env="HF_TOKEN"):
    """Download a model once into the HF cache (resumable), then rsync it to every node."""
    from edgevllm.serve.cache.distribute import SshNode, fetch_model, hub_folder, sync_model

    cache = Path(hf_cache).expanduser() if hf_cache else host_hf_cache()
    snapshot = fetch_model(model, cache, revision=revision, token_env=token_env)
    console.step(f"{model} is in {snapshot}")
    targets = [SshNode.parse(n) for n in split_csv(nodes)]
    if not targets:
        return
    remote = (str(hub_folder(Path(remote_cache), model)) if remote_cache else None)
    _report(sync_model(hub_folder(cache, model), targets, remote), f"copying {model}")
