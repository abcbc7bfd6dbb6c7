"""The SBOM of an image: CycloneDX 1.6 (cyclonedx-python-lib), from the lock and the image itself.

Components: every installed Debian package (purl ``pkg:deb/<distro>/<name>@<version>?arch=``, from
the image's dpkg status), every installed Python distribution (``inimage_dists.py``: name, version,
where, and the sha256 of its METADATA and RECORD files; a RECORD lists the hash of every file the
distribution installed, so its hash stands for them all), with the wheel's sha256 from the lock
where the lock pins it; the base images by digest; the vLLM / FlashInfer trees by commit (picks as
properties); the repositories vLLM's CMake would clone, by commit; the mods with their recorded
outcome. The document describes the image by its id.

``check`` holds an SBOM to an image: a distribution or Debian package installed but missing from
the SBOM, one the SBOM lists but the image lacks, or a hash or version that differs, is a problem
named in one line.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from edgevllm.common.dataload import JSON_MAX_BYTES, load_json, load_text
from edgevllm.common.errors import ConfigError, EngineError, SupplyChainError
from edgevllm.common.schema import describe_validation_error
from edgevllm.containers.docker import DockerEngine, RunOptions
from edgevllm.inspect.inimage_dists import canonical
from edgevllm.specs.lock import Lock

PROP = "edgevllm:"
DIST_GROUP = "python"
DEB_GROUP = "deb"
MOD_GROUP = "edgevllm-mod"


def dists_script() -> bytes:
    from importlib import resources

    return resources.files(__package__).joinpath("inimage_dists.py").read_bytes()


def installed_distributions(engine: DockerEngine, image: str, timeout: float = 300) -> list[dict]:
    """Every Python distribution installed in ``image``."""
    return installed_software(engine, image, timeout)[0]


def installed_software(engine: DockerEngine, image: str, timeout: float = 300
                       ) -> tuple[list[dict], list[dict]]:
    """Every Python distribution and Debian package installed in ``image``, found by a short
    script in a throw-away container (no network) run by the image's python3."""

    name = f"edgevllm-sbom-{uuid.uuid4().hex[:8]}"
    options = RunOptions(image=image, command=["-"], entrypoint="python3", name=name, remove=True,
                         network="none", extra=["-i"])
    try:
        proc = engine.run(options, timeout=timeout, input=dists_script())
    finally:  # --rm does not cover a docker client killed by a timeout or Ctrl-C
        engine.remove_container(name)
    listing = parse_listing(proc.stdout, image)
    if listing is not None:
        return listing
    tail = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
    raise EngineError(f"{image}: listing its Python distributions failed (python3 in the image "
                      f"exited {proc.returncode}: {tail[0]})")


class _Dist(BaseModel):
    name: str
    version: str
    path: str
    metadata_sha256: str
    record_sha256: str | None


class _Deb(BaseModel):
    name: str
    version: str
    arch: str
    distro: str
    codename: str


def parse_listing(stdout: bytes, image: str) -> tuple[list[dict], list[dict]] | None:
    """The in-image script's two lines (None when it printed none): whatever the image's own
    python3 printed is checked before it reaches the SBOM."""
    from edgevllm.inspect.inimage_dists import DEBS_MARKER, MARKER

    found: dict[str, list[dict]] = {}
    try:
        for line in stdout.decode(errors="replace").splitlines():
            for marker, model in ((MARKER, _Dist), (DEBS_MARKER, _Deb)):
                if line.startswith(marker):
                    entries: list[BaseModel] = TypeAdapter(
                        list[model]).validate_json(line[len(marker):])  # type: ignore[valid-type]
                    found[marker] = [entry.model_dump() for entry in entries]
    except ValidationError as exc:
        raise EngineError(f"{image}: the in-image listing of installed software is malformed "
                          f"({describe_validation_error(exc)})") from None
    if MARKER not in found:
        return None
    return found[MARKER], found.get(DEBS_MARKER, [])


@dataclass
class Subject:
    """The image an SBOM describes."""

    ref: str
    image_id: str
    repo_digests: list[str]


def _props(**values) -> list:
    from cyclonedx.model import Property

    return [Property(name=PROP + k, value=str(v)) for k, v in values.items() if v not in (None, "")]


def _sha256(hexdigest: str) -> list:
    from cyclonedx.model import HashAlgorithm, HashType

    return [HashType(alg=HashAlgorithm.SHA_256, content=hexdigest)]


def _dist_components(dists: list[dict], lock: Lock | None) -> list:
    from cyclonedx.model.component import Component, ComponentType
    from packageurl import PackageURL

    locked = {canonical(w.name): w for w in (lock.closure.wheels if lock and lock.closure else [])}
    found = []
    for dist in sorted(dists, key=lambda d: (d["name"], d["path"])):
        wheel = locked.get(dist["name"])
        wheel_sha = wheel.sha256 if wheel and wheel.version == dist["version"] else None
        found.append(Component(
            type=ComponentType.LIBRARY, group=DIST_GROUP, name=dist["name"],
            version=dist["version"], bom_ref=f"python:{dist['path']}",
            purl=PackageURL("pypi", None, dist["name"], dist["version"] or None),
            hashes=_sha256(wheel_sha) if wheel_sha else [],
            properties=_props(location=dist["path"], **{
                "metadata-sha256": dist["metadata_sha256"],
                "record-sha256": dist["record_sha256"], "wheel-sha256": wheel_sha})))
    return found


def _deb_components(debs: list[dict]) -> list:
    from cyclonedx.model.component import Component, ComponentType
    from packageurl import PackageURL

    return [Component(
        type=ComponentType.LIBRARY, group=DEB_GROUP, name=deb["name"], version=deb["version"],
        bom_ref=f"deb:{deb['name']}:{deb['arch']}",
        purl=PackageURL("deb", deb["distro"] or None, deb["name"], deb["version"] or None,
                        qualifiers={k: v for k, v in (("arch", deb["arch"]),
                                                      ("distro", deb["codename"])) if v}),
        properties=_props(arch=deb["arch"]))
        for deb in sorted(debs, key=lambda d: (d["name"], d["arch"]))]


def _lock_components(lock: Lock | None, mods_record: list | None) -> list:
    from cyclonedx.model.component import Component, ComponentType

    if lock is None:
        return []
    found = [Component(type=ComponentType.CONTAINER, group="base-image", name=img.ref,
                       version=img.digest or "", bom_ref=f"base:{stage}",
                       properties=_props(stage=stage, digest=img.digest))
             for stage, img in sorted(lock.base_images.items())]
    for name, src in lock.sources().items():
        picks = [f"{p.spec} {p.head_sha} diff-sha256:{p.diff_sha256}"
                 + (" skipped" if p.skipped else "") for p in src.picks]
        found.append(Component(
            type=ComponentType.LIBRARY, group="source", name=name, version=src.commit,
            bom_ref=f"source:{name}", properties=_props(
                repo=src.repo, tree=src.tree, **{"base-sha": src.base_sha,
                                                 "release-version": src.version})
            + [p for pick in picks for p in _props(pick=pick)]))
    for name, dep in sorted(lock.cmake_deps.items()):
        # A supplied folder (--cmake-dep, no lock) has no commit: it stands in for repo + ref.
        found.append(Component(type=ComponentType.LIBRARY, group="cmake-dep", name=name,
                               version=dep.commit or f"tree-{dep.tree}",
                               bom_ref=f"cmake-dep:{name}",
                               properties=_props(repo=dep.repo, ref=dep.ref, tree=dep.tree,
                                                 supplied="stands in, unproven"
                                                 if dep.supplied else None)))
    outcomes = {m.get("name"): m.get("outcome") or m.get("status")
                for m in mods_record or [] if isinstance(m, dict)}
    for mod in lock.mods:
        found.append(Component(type=ComponentType.LIBRARY, group=MOD_GROUP, name=mod.name,
                               version=mod.version, bom_ref=f"mod:{mod.name}",
                               properties=_props(outcome=outcomes.get(mod.name))))
    return found


def build_sbom(subject: Subject, lock: Lock | None, dists: list[dict],
               mods_record: list | None = None, debs: list[dict] | None = None) -> str:
    """The CycloneDX JSON document (1.6) for one image."""
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.output.json import JsonV1Dot6

    bom = Bom()
    bom.metadata.component = Component(
        type=ComponentType.CONTAINER, name=subject.ref, version=subject.image_id,
        bom_ref="image", hashes=_sha256(subject.image_id.split(":", 1)[-1]),
        properties=_props(**{"image-id": subject.image_id, "lock-target": lock and lock.target})
        + [p for d in subject.repo_digests for p in _props(**{"repo-digest": d})])
    for component in (_deb_components(debs or []) + _dist_components(dists, lock)
                      + _lock_components(lock, mods_record)):
        bom.components.add(component)
    bom.register_dependency(bom.metadata.component, list(bom.components))
    return JsonV1Dot6(bom).output_as_string(indent=1)


# --- reading one back, and holding it to an image -------------------------------------------
def _prop(component: dict, key: str) -> str | None:
    return next((p.get("value") for p in component.get("properties") or []
                 if p.get("name") == PROP + key), None)


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Property(_Open):
    name: str
    value: str


class _Hash(_Open):
    content: str


class _Component(_Open):
    name: str
    version: str = ""
    group: str | None = None
    properties: list[_Property] = []
    hashes: list[_Hash] = []


class _Metadata(_Open):
    component: _Component | None = None


class _Document(_Open):
    """What ``check_sbom`` reads of a CycloneDX document; the rest is CycloneDX's own."""

    bomFormat: Literal["CycloneDX"]
    metadata: _Metadata | None = None
    components: list[_Component] = []


def read_sbom_text(path: Path) -> str | None:
    """The SBOM file's text, None where there is no such file; a file that is not UTF-8 or is
    larger than a JSON document may be is one SupplyChainError line naming it."""
    try:
        return load_text(path, SupplyChainError, JSON_MAX_BYTES)
    except OSError:
        return None


def parse_sbom(text: str, origin: str) -> dict:
    from edgevllm.common.schema import parse_model

    try:
        doc = load_json(text, origin, ConfigError)
    except ConfigError:
        raise SupplyChainError(f"{origin}: the SBOM is not JSON") from None
    if not isinstance(doc, dict) or doc.get("bomFormat") != "CycloneDX":
        raise SupplyChainError(f"{origin}: not a CycloneDX SBOM")
    parse_model(_Document, doc, f"{origin}: SBOM", SupplyChainError)
    return doc


def sbom_image_id(doc: dict) -> str | None:
    return _prop((doc.get("metadata") or {}).get("component") or {}, "image-id")


def sbom_dists(doc: dict) -> dict[str, dict]:
    """The SBOM's Python distributions by location."""
    return {_prop(c, "location") or "": {
        "name": c.get("name"), "version": c.get("version") or "",
        "metadata_sha256": _prop(c, "metadata-sha256"), "record_sha256": _prop(c, "record-sha256"),
        "wheel_sha256": next((h.get("content") for h in c.get("hashes") or []), None)}
        for c in doc.get("components") or [] if c.get("group") == DIST_GROUP}


def sbom_debs(doc: dict) -> dict[tuple[str, str], str]:
    """The SBOM's Debian packages: (name, architecture) -> version."""
    return {(c.get("name") or "", _prop(c, "arch") or ""): c.get("version") or ""
            for c in doc.get("components") or [] if c.get("group") == DEB_GROUP}


def check_debs(doc: dict, origin: str, debs: list[dict]) -> list[str]:
    """Every installed Debian package the SBOM leaves out or gives another version, and every
    one it lists that the image does not have."""
    listed = sbom_debs(doc)
    problems = []
    for deb in debs:
        version = listed.pop((deb["name"], deb["arch"]), None)
        if version is None:
            problems.append(f"{origin}: Debian package {deb['name']} {deb['version']} "
                            f"({deb['arch']}) is installed but missing from the SBOM")
        elif version != deb["version"]:
            problems.append(f"{origin}: Debian package {deb['name']} ({deb['arch']}): version "
                            f"{version} in the SBOM, {deb['version']} in the image")
    return problems + [f"{origin}: the SBOM lists Debian package {name} {version} ({arch}), "
                       "which the image does not have" for (name, arch), version in listed.items()]


def check_sbom(doc: dict, origin: str, image_id: str, dists: list[dict],
               lock: Lock | None, debs: list[dict] | None = None) -> list[str]:
    """Every way ``doc`` disagrees with the image (its id, installed distributions and, given
    ``debs``, Debian packages, lock)."""
    problems = []
    if sbom_image_id(doc) != image_id:
        problems.append(f"{origin}: the SBOM describes image {sbom_image_id(doc)}, not {image_id}")
    listed = sbom_dists(doc)
    for dist in dists:
        entry = listed.pop(dist["path"], None)
        if entry is None:
            problems.append(f"{origin}: {dist['name']} {dist['version']} is installed at "
                            f"{dist['path']} but missing from the SBOM")
            continue
        for key in ("name", "version", "metadata_sha256", "record_sha256"):
            if entry[key] != dist[key]:
                problems.append(f"{origin}: {dist['name']} at {dist['path']}: {key} "
                                f"{entry[key]} in the SBOM, {dist[key]} in the image")
    problems += [f"{origin}: the SBOM lists {e['name']} {e['version']} at {path}, which the "
                 "image does not have" for path, e in listed.items()]
    locked = {canonical(w.name): w.sha256
              for w in (lock.closure.wheels if lock and lock.closure else [])}
    for entry in sbom_dists(doc).values():
        wheel = entry["wheel_sha256"]
        if wheel and locked.get(entry["name"]) != wheel:
            problems.append(f"{origin}: wheel {entry['name']} {entry['version']}: sha256 "
                            f"{wheel[:12]}… in the SBOM, {str(locked.get(entry['name']))[:12]}… "
                            f"in the image's lock")
    return problems + (check_debs(doc, origin, debs) if debs is not None else [])
