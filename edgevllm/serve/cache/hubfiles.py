"""A model's files in a Hugging Face hub cache, read without the network (``inv bundle``) and put
back in the same layout on another machine (``inv deploy --from``).

huggingface_hub keeps ``<hf_cache>/hub/models--org--name/``: ``blobs/<etag>`` (the bytes),
``snapshots/<commit>/<path>`` (a relative link to the blob) and ``refs/<branch>`` (the commit).
``snapshot_download(local_files_only=True)`` resolves a revision to its snapshot without asking
the hub; the bundle carries exactly that snapshot's files, each with its blob name, so the node
gets the same layout and vLLM (``HF_HUB_OFFLINE=1``) finds the model by its name.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from edgevllm.common.errors import IntegrityError, MissingInputError, RecipeError
from edgevllm.common.fsutil import StagedFile, atomic_write_text, move_into_place
from edgevllm.serve.cache.distribute import hub_folder

COMMIT = re.compile(r"[0-9a-f]{40}\Z")
_BLOB_NAME = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?\Z")  # a git sha1 or a sha256 etag
_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,127}\Z")


@dataclass
class HubFile:
    path: str      # inside the snapshot, '/'-separated
    blob: str      # its blob's name (the etag)
    source: Path   # the blob's bytes on this machine


def snapshot_files(hf_cache: Path, model: str, revision: str | None) -> tuple[str, list[HubFile]]:
    """The commit ``revision`` (default main) is in the local cache, and that snapshot's files."""
    from huggingface_hub import snapshot_download

    folder = hub_folder(hf_cache, model)
    try:
        snapshot = Path(snapshot_download(model, revision=revision, local_files_only=True,
                                          cache_dir=str(Path(hf_cache) / "hub")))
    except Exception:  # noqa: BLE001 - huggingface_hub's "not cached" has several classes
        raise MissingInputError(f"{model} (revision {revision or 'main'}) is not in the Hugging "
                                f"Face cache {hf_cache}; run 'inv model-fetch {model}' first, "
                                "or pass --hf-cache") from None
    files = [_hub_file(path, snapshot, folder) for path in sorted(snapshot.rglob("*"))
             if not path.is_dir()]
    if not files:
        raise MissingInputError(f"{snapshot}: the snapshot holds no files")
    return snapshot.name, files


def _hub_file(path: Path, snapshot: Path, folder: Path) -> HubFile:
    relative = path.relative_to(snapshot).as_posix()
    target = path.resolve()
    if target.parent != (folder / "blobs").resolve() or not _BLOB_NAME.match(target.name):
        raise RecipeError(f"{path}: not a link into {folder}/blobs; the cache was not written "
                          "by huggingface_hub (run 'inv model-fetch' again)")
    if not target.is_file():
        raise MissingInputError(f"{path}: its blob is missing (a download cut short); run "
                                "'inv model-fetch' again to finish it")
    return HubFile(relative, target.name, target)


def check_names(model: str, commit: str, ref: str | None, files: list[tuple[str, str]],
                origin: str) -> None:
    """What a bundle says of the model, before a path is made of it: a repo id, a commit, a
    branch name, blob names and relative paths without ``..``."""
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", model) or ".." in model:
        raise IntegrityError(f"{origin}: model '{model[:80]}' is not a repo id")
    if not COMMIT.match(commit) or (ref is not None and (not _REF.match(ref) or ".." in ref)):
        raise IntegrityError(f"{origin}: the model's revision is not a commit and a branch")
    for path, blob in files:
        parts = path.split("/")
        if not _BLOB_NAME.match(blob) or any(p in ("", ".", "..") for p in parts) \
                or any(ord(c) < 32 for c in path):
            raise IntegrityError(f"{origin}: model file {path[:80]!r} is not a plain path")


def place(hf_cache: Path, model: str, commit: str, ref: str | None,
          files: list[tuple[str, str, Path]], copy) -> Path:
    """Put ``files`` (path, blob name, checked bytes here) into the hub layout under
    ``hf_cache``: each blob by ``copy(source, final)`` (which keeps one already there whole),
    each snapshot link made under a temporary name and renamed; ``refs/<ref>`` last."""
    folder = hub_folder(hf_cache, model)
    snapshot = folder / "snapshots" / commit
    for path, blob, source in files:
        final = folder / "blobs" / blob
        copy(source, final)  # keeps a blob already there with its sha256
        _link(snapshot / path, final)
    if ref:
        atomic_write_text(folder / "refs" / ref, commit)
    return snapshot


def _link(link: Path, blob: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    target = os.path.relpath(blob, link.parent)
    if link.is_symlink() and os.readlink(link) == target:
        return
    with StagedFile(link) as staged:
        os.symlink(target, staged.tmp)
        move_into_place(staged.tmp, link)
        staged.committed = True
