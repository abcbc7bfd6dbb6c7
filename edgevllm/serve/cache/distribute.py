"""Put what a cluster needs on every node: the image (``inv copy``) and the weights
(``inv model-fetch``).

``copy_image``: one ``docker save`` on the source engine is streamed to ``docker load`` on every
node that needs it at once; a node whose engine already holds the same image id is skipped, and
after the load each node's image id must equal the source's (else the copy failed). Nodes are
Docker engines (``ssh://user@host``, contexts), as for ``inv serve --nodes``.

``fetch_model``: huggingface_hub downloads the model once into the local Hugging Face cache
(``<hf_cache>/hub``) with its progress bars; a dropped connection continues with a ``Range``
request from where it stopped, and a second run fetches only files not yet complete. The token is
read from the environment variable it is *named* by (the value is never printed or logged).
``sync_model``: rsync over ssh copies the model's cache folder to every node in parallel; a node
whose copy is already complete (``rsync --dry-run`` lists nothing to do) is skipped.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from edgevllm.common import console
from edgevllm.common.errors import (
    ConfigError,
    EdgeVllmError,
    EngineError,
    MissingToolError,
    RecipeError,
)
from edgevllm.containers.docker import DockerEngine
from edgevllm.containers.enginespec import parse_ssh_url

CHUNK = 1 << 20
_REPO_ID = re.compile(r"^[\w.-]+/[\w.-]+\Z")


@dataclass
class NodeResult:
    node: str
    status: str  # copied | up to date | failed
    detail: str = ""


# -- images -------------------------------------------------------------------------------------
def copy_image(image: str, source: DockerEngine, nodes: list[DockerEngine]) -> list[NodeResult]:
    """Stream ``image`` from ``source`` to every node lacking it; verify the id after load."""
    want = source.image_id(image)
    results: dict[str, NodeResult] = {}
    todo: list[DockerEngine] = []
    for node in nodes:
        have = _image_id_or_none(node, image)
        if have == want:
            results[node.describe()] = NodeResult(node.describe(), "up to date", want[:19])
        else:
            todo.append(node)
    if todo:
        console.step(f"streaming {image} ({want[:19]}) to {', '.join(n.describe() for n in todo)}")
        failed = _stream(image, source, todo)
        for node in todo:
            results[node.describe()] = _verify(node, image, want, failed.get(node.describe()))
    return [results[n.describe()] for n in nodes]


def _image_id_or_none(engine: DockerEngine, image: str) -> str | None:
    try:
        return engine.image_id(image)
    except EdgeVllmError:
        return None


def _stream(image: str, source: DockerEngine, nodes: list[DockerEngine]) -> dict[str, str]:
    """One save, fanned out to every node's load; a node that breaks is dropped, not fatal."""
    failed: dict[str, str] = {}
    with ExitStack() as stack:
        sinks: dict[str, IO[bytes]] = {}
        for node in nodes:
            try:
                sinks[node.describe()] = stack.enter_context(_guarded(node, failed))
            except EdgeVllmError as exc:
                failed[node.describe()] = str(exc)
        with source.save_stream([image]) as stream:
            while sinks and (chunk := stream.read(CHUNK)):
                for name, sink in list(sinks.items()):
                    try:
                        sink.write(chunk)
                    except OSError as exc:
                        failed[name] = f"the stream broke ({exc.strerror or exc})"
                        del sinks[name]
    return failed


class _guarded:
    """``engine.load_stream()`` whose failure is recorded for its node instead of raised."""

    def __init__(self, engine: DockerEngine, failed: dict[str, str]):
        self.engine, self.failed = engine, failed
        self.inner = engine.load_stream()

    def __enter__(self) -> IO[bytes]:
        return self.inner.__enter__()

    def __exit__(self, *exc_info) -> bool:
        try:
            self.inner.__exit__(*exc_info)
        except EngineError as exc:
            self.failed.setdefault(self.engine.describe(), str(exc))
            return exc_info[0] is None
        return False


def _verify(node: DockerEngine, image: str, want: str, error: str | None) -> NodeResult:
    have = _image_id_or_none(node, image)
    if have == want:
        return NodeResult(node.describe(), "copied", want[:19])
    reason = error or f"after the load it holds {have[:19] if have else 'no such image'}"
    return NodeResult(node.describe(), "failed", reason)


# -- JIT cache bundles (inv warm) ---------------------------------------------------------------
def copy_caches(bundle: Path, manifest, image: str, image_id: str, nodes: list[DockerEngine],
                jit_cache_root: str | None = None) -> list[NodeResult]:
    """Fill each node's per-image JIT cache folders from a bundle checked for ``image_id``."""
    from edgevllm.serve.cache.harvest import seed_node

    results = []
    for node in nodes:
        try:
            folder = seed_node(node, image, image_id, bundle, manifest, jit_cache_root)
        except EdgeVllmError as exc:
            results.append(NodeResult(node.describe(), "failed", f"caches: {exc}"))
            continue
        results.append(NodeResult(node.describe(), "caches", f"{len(manifest.entries)} files in "
                                  f"{folder}"))
    return results


def bundle_beside(bundle: Path, out_dir: Path, stem: str) -> tuple[Path, Path]:
    """Copy a checked bundle to ``<out_dir>/<stem>.jitcache.tar`` with its ``.sha256`` file
    (``sha256sum -c`` reads it), each under a temporary name first."""
    import hashlib

    from edgevllm.common.fsutil import atomic_open, atomic_write_text
    from edgevllm.serve.cache.bundle import SUFFIX

    out = Path(out_dir) / f"{stem}{SUFFIX}"
    digest = hashlib.sha256()
    with open(bundle, "rb") as source, atomic_open(out, "wb") as target:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
            target.write(chunk)
    checksum = atomic_write_text(out.with_name(out.name + ".sha256"),
                                 f"{digest.hexdigest()}  {out.name}\n")
    return out, checksum


# -- models -------------------------------------------------------------------------------------
def hub_folder(hf_cache: Path, model: str) -> Path:
    """Where huggingface_hub keeps ``org/name``: ``<hf_cache>/hub/models--org--name``."""
    return Path(hf_cache) / "hub" / ("models--" + model.replace("/", "--"))


def fetch_model(model: str, hf_cache: Path, revision: str | None = None,
                token_env: str = "HF_TOKEN") -> Path:
    """Download (or finish downloading) ``model`` into the local cache; return its snapshot."""
    if not _REPO_ID.match(model) or ".." in model:
        raise RecipeError(f"model '{model}': expected a Hugging Face repo id such as org/name")
    # imported here, not at the top: huggingface_hub takes a second to import, and only
    # model-fetch needs it
    from huggingface_hub import snapshot_download

    token = os.environ.get(token_env) or None
    try:
        path = snapshot_download(model, revision=revision, cache_dir=str(Path(hf_cache) / "hub"),
                                 token=token)
    except Exception as exc:  # noqa: BLE001 - the hub client's errors: one line
        raise _download_problem(exc, model, token_env) from None
    return Path(path)


def _download_problem(exc: Exception, model: str, token_env: str) -> RecipeError:
    """One line for a failed download. huggingface_hub answers a hub it could not ask (refused,
    an HTTP error it does not raise itself) with 'not in the local cache' and the reason as its
    cause: the line names that reason, so an unreachable hub and a missing model differ."""
    from huggingface_hub.errors import HfHubHTTPError

    cause = exc.__cause__ if isinstance(exc.__cause__, Exception) else exc
    if isinstance(cause, HfHubHTTPError):
        status = getattr(getattr(cause, "response", None), "status_code", "?")
        return RecipeError(f"downloading {model} failed (HTTP {status}); check the name, and "
                           f"that ${token_env} holds a token with access")
    said = (str(cause).strip().splitlines() or [""])[0][:160]
    return RecipeError(f"downloading {model} failed ({cause.__class__.__name__}"
                       f"{': ' + said if said else ''}); check that the hub (HF_ENDPOINT) "
                       "answers and run again: complete files are kept")


@dataclass
class SshNode:
    """``ssh://[user@]host[:port]`` as rsync and ssh take it."""

    user_host: str
    port: int | None = None

    @classmethod
    def parse(cls, spec: str) -> SshNode:
        try:
            return cls(*parse_ssh_url(spec))
        except ConfigError:
            raise RecipeError(f"node '{spec}': expected ssh://[user@]host[:port]") from None

    def ssh_command(self) -> str:
        return "ssh" + (f" -p {self.port}" if self.port else "")

    def describe(self) -> str:
        return f"ssh://{self.user_host}" + (f":{self.port}" if self.port else "")


def sync_model(folder: Path, nodes: list[SshNode], remote_folder: str | None = None,
               jobs: int = 4) -> list[NodeResult]:
    """rsync ``folder`` to the same (or ``remote_folder``) path on every node, in parallel."""
    if shutil.which("rsync") is None:
        raise MissingToolError("copying a model to nodes needs rsync here and on every node: "
                               "apt-get install rsync")
    remote = (remote_folder or str(folder)).rstrip("/") + "/"
    with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(nodes)))) as pool:
        return list(pool.map(lambda node: _sync_one(folder, node, remote), nodes))


def _sync_one(folder: Path, node: SshNode, remote: str) -> NodeResult:
    parent = str(Path(remote.rstrip("/")).parent)
    base = ["rsync", "-a", "--partial", "-e", node.ssh_command(),
            f"--rsync-path=mkdir -p {shlex.quote(parent)} && rsync",
            f"{folder}/", f"{node.user_host}:{remote}"]
    check = subprocess.run(base[:1] + ["--dry-run", "--itemize-changes"] + base[1:],
                           capture_output=True, text=True, check=False)
    if check.returncode == 0 and not _changes(check.stdout):
        return NodeResult(node.describe(), "up to date")
    proc = subprocess.run(base, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return NodeResult(node.describe(), "failed", last)
    return NodeResult(node.describe(), "copied")


def _changes(itemized: str) -> list[str]:
    """Lines of ``rsync --itemize-changes`` that mean work (not the root folder's own times)."""
    return [line for line in itemized.splitlines() if line.strip() and not line.endswith(" ./")]
