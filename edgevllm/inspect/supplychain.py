"""``inv sbom``, ``inv sign`` and ``inv verify-supply-chain``: the SBOM and the signed statement
written beside the lock or a published set, and both held to the image.

The check, online (a local image) or offline (a published set, read once): the envelope's
signature by the given key; the statement's subject is this image's id; the SBOM is the one the
statement names (sha256); the lock in the image is the one the statement names; and the SBOM
matches the image's installed distributions, Debian packages and the lock's wheel hashes
(``sbom.check_sbom``).
Offline, every part is checked against the manifest first, the config must hash to the image id
and each layer to its diff id. The first problem is raised as one line; the others are listed.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from edgevllm.common import console, labels
from edgevllm.common.dataload import load_json
from edgevllm.common.errors import ConfigError, SupplyChainError
from edgevllm.common.fsutil import atomic_write_text
from edgevllm.containers.docker import DockerEngine
from edgevllm.inspect import dsse, provenance, sbom
from edgevllm.inspect.facts import lock_from_label
from edgevllm.specs.lock import Lock, lock_hash


@dataclass
class ImageView:
    """What the supply-chain files are made from and checked against, for one image."""

    ref: str
    image_id: str
    repo_digests: list[str]
    lock: Lock | None
    mods_record: list | None
    dists: list[dict]
    problems: list[str] = field(default_factory=list)  # offline: parts, config, layer hashes
    debs: list[dict] = field(default_factory=list)  # Debian packages (dpkg status)


def view_of_image(engine: DockerEngine, ref: str) -> ImageView:
    inspect = engine.image_inspect(ref)
    found = (inspect.get("Config") or {}).get("Labels") or {}
    dists, debs = sbom.installed_software(engine, ref)
    return ImageView(ref, inspect["Id"], list(inspect.get("RepoDigests") or []),
                     lock_from_label(found.get(labels.LOCK), f"label {labels.LOCK} of {ref}"),
                     _json_list(found.get(labels.MODS)), dists, debs=debs)


def _json_list(text: str | None) -> list | None:
    try:
        value = load_json(text, "a label", ConfigError) if text else None
    except ConfigError:
        return None
    return value if isinstance(value, list) else None


def view_of_tarball(manifest_path: Path) -> ImageView:
    """A published set read offline: parts against the manifest, then the archive in one pass."""
    from edgevllm.image.progress import ByteProgress
    from edgevllm.image.tarball import open_tarball
    from edgevllm.inspect.offline import read_archive

    tarset = open_tarball(manifest_path)
    if tarset.manifest is None:
        raise SupplyChainError(f"{manifest_path}: no manifest; give the .manifest.json that "
                               "inv publish wrote")
    with ByteProgress(f"check {Path(tarset.describe()).name}", tarset.total_size) as progress:
        tarset.check(progress)
    with ByteProgress("check the image archive", tarset.total_size) as progress:
        tarset.check_contents(progress)  # exactly the one image the manifest names
    with ByteProgress("read the image archive", tarset.total_size) as progress:
        with tarset.tar_stream(progress) as tar:
            archive = read_archive(tar, str(manifest_path))
    found = archive.labels
    view = ImageView(str(manifest_path), archive.config_sha256,
                     list(tarset.manifest.image.get("repo_digests") or []),
                     lock_from_label(found.get(labels.LOCK), f"{manifest_path}: the image's lock"),
                     _json_list(found.get(labels.MODS)), archive.dists, list(archive.problems),
                     archive.debs)
    if tarset.manifest.image.get("id") != archive.config_sha256:
        view.problems.insert(0, f"{manifest_path}: manifest: image id "
                             f"{tarset.manifest.image.get('id')} is not the archive's "
                             f"({archive.config_sha256})")
    if tarset.manifest.labels != found:
        view.problems.append(f"{manifest_path}: manifest: field 'labels' differs from the "
                             "image's own labels")
    return view


def write_sbom(view: ImageView, stem: Path) -> tuple[Path, float]:
    started = time.perf_counter()
    text = sbom.build_sbom(sbom.Subject(view.ref, view.image_id, view.repo_digests), view.lock,
                           view.dists, view.mods_record, view.debs)
    path, _ = provenance.artefact_paths(stem)
    atomic_write_text(path, text)
    return path, time.perf_counter() - started


def sign(view: ImageView, stem: Path, key_path: Path) -> Path:
    """The DSSE envelope over the statement for ``view``; the SBOM beside it must exist."""
    sbom_path, envelope_path = provenance.artefact_paths(stem)
    key = dsse.load_private_key(key_path)
    sbom_text = sbom.read_sbom_text(sbom_path)
    if sbom_text is None:
        raise SupplyChainError(f"{sbom_path}: no SBOM to sign; run inv sbom first")
    found = sbom.parse_sbom(sbom_text, str(sbom_path))
    if sbom.sbom_image_id(found) != view.image_id:
        raise SupplyChainError(f"{sbom_path}: the SBOM describes image "
                               f"{sbom.sbom_image_id(found)}, not {view.image_id}; run inv sbom")
    statement = provenance.statement(view.ref, view.image_id, view.lock, view.mods_record,
                                     sbom_text)
    envelope = dsse.sign(provenance.canonical(statement), key)
    atomic_write_text(envelope_path, json.dumps(envelope, indent=1) + "\n")
    return envelope_path


def check(view: ImageView, stem: Path, public_key: Path) -> list[str]:
    """Every problem with the image, its SBOM and its signed statement; empty when all hold."""
    sbom_path, envelope_path = provenance.artefact_paths(stem)
    problems = list(view.problems)
    payload = dsse.verify(dsse.read_envelope(envelope_path), dsse.load_public_key(public_key),
                          str(envelope_path))
    found = provenance.parse_statement(payload, str(envelope_path))
    if provenance.subject_id(found) != view.image_id:
        problems.append(f"{envelope_path}: statement: signed for image "
                        f"{provenance.subject_id(found)}, not {view.image_id}")
    sbom_text = sbom.read_sbom_text(sbom_path)
    if sbom_text is None:
        return problems + [f"{sbom_path}: the SBOM is missing"]
    if hashlib.sha256(sbom_text.encode()).hexdigest() != provenance.sbom_digest(found):
        problems.append(f"{sbom_path}: SBOM: not the one the statement was signed with "
                        "(its sha256 differs)")
    locked = lock_hash(view.lock) if view.lock else None
    if provenance.lock_digest(found) != locked:
        problems.append(f"{envelope_path}: statement: lock sha256 "
                        f"{provenance.lock_digest(found)}, the image's lock is {locked}")
    problems += sbom.check_sbom(sbom.parse_sbom(sbom_text, str(sbom_path)), str(sbom_path),
                                view.image_id, view.dists, view.lock, view.debs)
    return problems


def raise_first(problems: list[str]) -> None:
    if not problems:
        return
    for line in problems[1:]:
        console.warn(line)
    more = f" (and {len(problems) - 1} more above)" if len(problems) > 1 else ""
    raise SupplyChainError(problems[0] + more)


def supply_chain_after_build(engine: DockerEngine, image: str, lock_file: Path,
                             key: Path | None = None) -> dict:
    """The build's tail: the SBOM (and, given a key, the signed statement) beside the lock."""
    started = time.perf_counter()
    view = view_of_image(engine, image)
    stem = provenance.stem_of(Path(lock_file))
    sbom_path, _ = write_sbom(view, stem)
    record = {"sbom": str(sbom_path), "distributions": len(view.dists),
              "debian_packages": len(view.debs)}
    if key is not None:
        record["provenance"] = str(sign(view, stem, key))
    record["seconds"] = round(time.perf_counter() - started, 2)
    return record
