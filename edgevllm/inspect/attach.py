"""The SBOM and the SLSA provenance pushed beside an image, in cosign's registry layout
(``inspect/cosign.py``): ``inv push --attach X --key KEY`` signs the pushed manifest digest
(``<repo>:sha256-<hex>.sig``) and attests, in ``<repo>:sha256-<hex>.att``, an in-toto Statement
about that digest with the CycloneDX SBOM (``https://cyclonedx.org/bom``) and one with the
build's SLSA v1 provenance (``https://slsa.dev/provenance/v1``: the lock's inputs by digest, the
build's parameters, the builder). ``cosign verify --key`` and ``cosign verify-attestation --key
--type cyclonedx|slsaprovenance1`` check them, and ``inv verify --supply-chain --attached``.
``inv sign --attach REF`` does the same for an image pushed before.
"""

from __future__ import annotations

import re
from pathlib import Path

from edgevllm.common import console, labels
from edgevllm.common.dataload import load_json
from edgevllm.common.errors import ConfigError, RegistryError, SupplyChainError
from edgevllm.common.keys import is_ed25519
from edgevllm.containers.docker import DockerEngine
from edgevllm.image.registry import MANIFEST_ACCEPT, get_manifest, holds_image
from edgevllm.inspect import cosign, dsse, provenance, sbom
from edgevllm.inspect.facts import lock_from_label

_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}\Z")


def attachment_tag(dest: str, digest: str) -> str:
    """``registry/repo`` + ``sha256:abc…`` → ``registry/repo:sha256-abc….att``."""
    if not _DIGEST_RE.match(digest):
        raise ConfigError(f"'{digest}' is not a sha256 manifest digest")
    return f"{dest}:{cosign.tag_for(digest, 'att')}"


def predicates(engine: DockerEngine, image: str, dest: str, stem: Path) -> dict[str, object]:
    """The SBOM beside ``stem`` (it must describe ``image``) and the provenance built from the
    image's own lock and mods labels, by predicate type."""
    sbom_path, _ = provenance.artefact_paths(stem)
    sbom_text = sbom.read_sbom_text(sbom_path)
    if sbom_text is None:
        raise ConfigError(f"--attach: {sbom_path} not found; run inv sbom first")
    doc = sbom.parse_sbom(sbom_text, str(sbom_path))
    inspect = engine.image_inspect(image)
    if sbom.sbom_image_id(doc) != inspect["Id"]:
        raise SupplyChainError(f"{sbom_path}: the SBOM describes image {sbom.sbom_image_id(doc)},"
                               f" not {inspect['Id']}; run inv sbom")
    found = (inspect.get("Config") or {}).get("Labels") or {}
    lock = lock_from_label(found.get(labels.LOCK), f"label {labels.LOCK} of {image}")
    mods = _json_list(found.get(labels.MODS))
    slsa = provenance.statement(dest, inspect["Id"], lock, mods, sbom_text)["predicate"]
    return {cosign.SLSA_PROVENANCE_1: slsa, cosign.CYCLONEDX: doc}


def _json_list(text: str | None) -> list | None:
    try:
        value = load_json(text, "a label", ConfigError) if text else None
    except ConfigError:
        return None
    return value if isinstance(value, list) else None


def push_attachment(engine: DockerEngine, image: str, ref: str, digest: str, stem: Path,
                    key_path: Path) -> list[tuple[str, str]]:
    """Sign and attest the image pushed as ``ref`` (manifest ``digest``); the refs written."""
    key = dsse.load_private_key(key_path)
    if is_ed25519(key):
        console.warn(f"--key {key_path}: {dsse.COSIGN_CANNOT}")
    host, name, _ = cosign.split_ref(ref)
    return cosign.attach(ref, digest, key, predicates(engine, image, f"{host}/{name}", stem))


def attach_pushed(engine: DockerEngine, image: str, ref: str, stem: Path,
                  key_path: Path) -> list[tuple[str, str]]:
    """``inv sign --attach REF``: the image already pushed as ``ref`` (it must be this local
    image) signed and attested in place."""
    host, name, digest = cosign.resolve(ref)
    raw = get_manifest(host, name, digest, MANIFEST_ACCEPT)
    if raw is None or not holds_image(engine, f"{host}/{name}", raw, engine.image_inspect(image)):
        raise RegistryError(f"--attach {ref}: the registry's image ({digest}) is not {image}; "
                            "push it first (inv push)")
    return push_attachment(engine, image, ref, digest, stem, key_path)
