"""Signed provenance: an in-toto Statement (SLSA provenance v1 predicate) in a DSSE envelope.

Subject: the image, by id (the sha256 of its config, the same on every engine that loads it).
Predicate: the build's inputs by digest from the lock (vLLM / FlashInfer trees and picks, CMake
dependencies, base images, every locked wheel), the build arguments and settings, the mods with
their outcome, the builder (edgevllm and its version) and, as a byproduct, the SBOM's sha256, so
that one signature covers the SBOM as well.

File names, beside the lock (``X.lock.json``) or a published set (``X.manifest.json``):
``X.sbom.cdx.json`` and ``X.provenance.dsse.json``.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from edgevllm import __version__
from edgevllm.common.dataload import load_json
from edgevllm.common.errors import ConfigError, SupplyChainError
from edgevllm.specs.lock import Lock, lock_hash

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://edgevllm.invalid/build/v1"
SBOM_SUFFIX = ".sbom.cdx.json"
PROVENANCE_SUFFIX = ".provenance.dsse.json"
SBOM_MEDIA_TYPE = "application/vnd.cyclonedx+json"
_STEM_SUFFIXES = (".manifest.json", ".lock.json", ".lock.yaml", ".lock.yml", ".sbom.cdx.json",
                  ".provenance.dsse.json", ".json")


def stem_of(path: Path) -> Path:
    """``out/X.lock.json``, ``out/X.manifest.json`` or one of the artefacts → ``out/X``."""
    name = path.name
    for suffix in _STEM_SUFFIXES:
        if name.endswith(suffix):
            return path.with_name(name[: -len(suffix)])
    return path.with_name(path.stem)


def artefact_paths(stem: Path) -> tuple[Path, Path]:
    return stem.with_name(stem.name + SBOM_SUFFIX), stem.with_name(stem.name + PROVENANCE_SUFFIX)


def image_stem(out_dir: Path, ref: str) -> Path:
    """A file-name-safe stem for an image ref, in ``out_dir``."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", ref.split("@")[0].split("/")[-1]).strip("._-")
    return Path(out_dir) / (safe or "image")


def _dependencies(lock: Lock | None) -> list[dict]:
    if lock is None:
        return []
    deps = [{"name": f"base-image:{stage}", "uri": f"docker://{img.ref}",
             **({"digest": {"sha256": img.digest.split(":", 1)[-1]}} if img.digest else {})}
            for stage, img in sorted(lock.base_images.items())]
    for name, src in lock.sources().items():
        deps.append({"name": name, "uri": f"git+{src.repo}",
                     "digest": {"gitCommit": src.commit, "gitTree": src.tree}})
        deps += [{"name": f"{name}:pick:{p.spec}", "uri": f"git+{p.repo}",
                  "digest": {"gitCommit": p.head_sha, "sha256": p.diff_sha256},
                  "annotations": {"skipped": p.skipped}} for p in src.picks]
    deps += [_cmake_dep(name, dep) for name, dep in sorted(lock.cmake_deps.items())]
    for closure in (lock.closure, lock.build_closure):
        deps += [{"name": f"wheel:{w.filename}", "uri": w.url or f"pypi:{w.name}=={w.version}",
                  "digest": {"sha256": w.sha256}} for w in (closure.wheels if closure else [])]
    return deps


def _cmake_dep(name: str, dep) -> dict:
    """A fetched dependency by commit and tree; a supplied folder (``--cmake-dep``) by its tree
    only, said to stand in for the repository and ref, unproven."""
    if not dep.supplied:
        return {"name": f"cmake-dep:{name}", "uri": f"git+{dep.repo}",
                "digest": {"gitCommit": dep.commit, "gitTree": dep.tree}}
    return {"name": f"cmake-dep:{name}", "uri": f"supplied-folder:{name}",
            "digest": {"gitTree": dep.tree},
            "annotations": {"supplied": True, "standsInFor": f"git+{dep.repo}@{dep.ref}",
                            "proven": False}}


def statement(ref: str, image_id: str, lock: Lock | None, mods_record: list | None,
              sbom_text: str) -> dict:
    sbom_sha = hashlib.sha256(sbom_text.encode()).hexdigest()
    outcomes = {m.get("name"): m.get("outcome") for m in mods_record or [] if isinstance(m, dict)}
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": ref, "digest": {"sha256": image_id.split(":", 1)[-1]}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {
                    "target": lock.target if lock else None,
                    "mode": lock.mode if lock else None,
                    "lock_sha256": lock_hash(lock) if lock else None,
                    "mods": [{"name": m.name, "version": m.version,
                              "outcome": outcomes.get(m.name)} for m in lock.mods] if lock else [],
                    "build_args": dict(lock.build_args) if lock else {},
                },
                "internalParameters": {"settings": dict(lock.settings) if lock else {}},
                "resolvedDependencies": _dependencies(lock),
            },
            "runDetails": {
                "builder": {"id": f"pkg:pypi/edgevllm@{__version__}",
                            "version": {"edgevllm": __version__}},
                "byproducts": [{"name": "sbom", "mediaType": SBOM_MEDIA_TYPE,
                                "digest": {"sha256": sbom_sha}}],
            },
        },
    }


def canonical(payload: dict) -> bytes:
    return json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()


def parse_statement(payload: bytes, origin: str) -> dict:
    try:
        found = load_json(payload, origin, ConfigError)
    except ConfigError:
        raise SupplyChainError(f"{origin}: the signed payload is not JSON") from None
    if not isinstance(found, dict) or found.get("_type") != STATEMENT_TYPE or \
            found.get("predicateType") != PREDICATE_TYPE:
        raise SupplyChainError(f"{origin}: not an in-toto provenance statement")
    return found


def subject_id(found: dict) -> str | None:
    try:
        return "sha256:" + found["subject"][0]["digest"]["sha256"]
    except (KeyError, IndexError, TypeError):
        return None


def _at(node: object, *keys: str) -> object:
    """``node[k1][k2]...``, or None where a level is missing or not a mapping (a signer may
    have signed any JSON)."""
    for key in keys:
        node = node.get(key) if isinstance(node, dict) else None
    return node


def sbom_digest(found: dict) -> str | None:
    byproducts = _at(found, "predicate", "runDetails", "byproducts")
    for item in byproducts if isinstance(byproducts, list) else []:
        if _at(item, "name") == "sbom":
            digest = _at(item, "digest", "sha256")
            return digest if isinstance(digest, str) else None
    return None


def lock_digest(found: dict) -> str | None:
    digest = _at(found, "predicate", "buildDefinition", "externalParameters", "lock_sha256")
    return digest if isinstance(digest, str) else None
