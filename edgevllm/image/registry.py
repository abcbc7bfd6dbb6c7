"""Push an image under its immutable, lock-derived tag (plus optional moving tags).

An immutable tag names one image forever: before pushing it, the registry is asked what the tag
already holds. The same image (same manifest digest, or a manifest whose config is this image's
id) → nothing to do; a different image → refused. Moving tags (``latest-spark``) are overwritten.

Credentials stay with docker: pushes and registry reads go through the docker CLI
(``docker push``, ``docker buildx imagetools``), which use the user's Docker configuration and
credential helpers. Nothing here reads, writes or prints a token.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field

import requests

from edgevllm.common import console, labels
from edgevllm.common.errors import ConfigError, DockerUnavailableError, LockError, RegistryError
from edgevllm.common.grammar import SHA256_DIGEST
from edgevllm.common.http import is_loopback
from edgevllm.common.schema import json_object
from edgevllm.containers.docker import DockerEngine
from edgevllm.image.records import read_records
from edgevllm.specs.lock import image_tag, parse_lock

TAG_LABEL = labels.TAG
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\Z")
_REGISTRY_RE = re.compile(r"^[A-Za-z0-9.-]+(:\d+)?(/[a-z0-9]+(?:[._-][a-z0-9]+)*)*\Z")
REPO_RE = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(/[a-z0-9]+(?:[._-][a-z0-9]+)*)*\Z")
INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
MANIFEST_ACCEPT = ", ".join(
    INDEX_TYPES
    + (
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)


@dataclass
class PushedTag:
    ref: str
    digest: str
    action: str  # "pushed" | "unchanged"


@dataclass
class PushResult:
    image_id: str
    immutable: PushedTag
    moving: list[PushedTag] = field(default_factory=list)


# --- names -------------------------------------------------------------------------------------
def check_registry(registry: str) -> str:
    """``HOST[:PORT][/NAMESPACE...]``, no scheme, no tag."""
    registry = registry.strip().rstrip("/")
    if "://" in registry:
        raise ConfigError(
            f"--registry '{registry}': give HOST[/NAMESPACE] without a scheme "
            "(e.g. ghcr.io/me or 127.0.0.1:5000/team)"
        )
    host = registry.split("/")[0]
    # Without a dot or a port docker would read the host as a Docker Hub namespace.
    looks_like_host = "." in host or ":" in host or host == "localhost"
    if not _REGISTRY_RE.match(registry) or not looks_like_host:
        raise ConfigError(
            f"--registry '{registry}': expected HOST[:PORT][/NAMESPACE] with a "
            "host that has a dot or a port (e.g. ghcr.io/me, registry:5000/team); "
            "namespaces are lower case"
        )
    return registry


def check_tag(tag: str, flag: str) -> str:
    if not _TAG_RE.match(tag):
        raise ConfigError(
            f"{flag} '{tag}': a tag is letters, digits, '_', '.' and '-' "
            "(at most 128, not starting with '.' or '-')"
        )
    return tag


def default_repo(image: str, inspect: dict) -> str:
    """The last path component of the image's repository: ``edgevllm/vllm-spark:x`` →
    ``vllm-spark``."""
    candidates = [image] if not image.startswith("sha256:") else []
    candidates += list(inspect.get("RepoTags") or [])
    for ref in candidates:
        last = ref.split("@")[0].split("/")[-1]
        name = last.split(":")[0]
        if name and REPO_RE.match(name) and not re.fullmatch(r"[0-9a-f]{12,64}", name):
            return name
    raise ConfigError(f"cannot derive a repository name from '{image}': pass --repo NAME")


def immutable_tag(engine: DockerEngine, image: str, labels: dict[str, str]) -> str | None:
    """The lock's tag (``edgevllm.lock.image_tag``), else the ``io.edgevllm.tag`` label."""
    lock_json = read_records(engine, image, labels).get("lock")
    if lock_json is not None:
        tag = _tag_from_lock(lock_json)
        if tag:
            return tag
    label = labels.get(TAG_LABEL)
    if label:
        return label.rsplit(":", 1)[-1] if "/" in label or label.count(":") == 1 else label
    return None


def _tag_from_lock(lock_json: object) -> str | None:
    try:
        return image_tag(parse_lock(json.dumps(lock_json), "label io.edgevllm.lock"))
    except LockError as exc:
        console.warn(f"the image's lock is not readable ({exc}); using the io.edgevllm.tag label")
        return None


# --- what the registry holds -------------------------------------------------------------------
def remote_manifest(engine: DockerEngine, ref: str) -> bytes | None:
    """Raw manifest bytes for ``ref`` via docker (its credentials); HTTP API if buildx is absent."""
    try:
        engine.check_buildx()
    except DockerUnavailableError:
        return _http_manifest(ref)
    return engine.registry_manifest(ref)


def _split_ref(ref: str) -> tuple[str, str, str]:
    """``host/name:tag`` or ``host/name@digest`` → (host, name, tag-or-digest)."""
    host, _, rest = ref.partition("/")
    if "@" in rest:
        name, reference = rest.split("@", 1)
    else:
        name, _, reference = rest.rpartition(":")
    return host, name, reference


def _http_manifest(ref: str) -> bytes | None:
    """Anonymous registry API v2 read (docker, like us, allows plain HTTP only on loopback)."""
    host, name, tag = _split_ref(ref)
    return get_manifest(host, name, tag, MANIFEST_ACCEPT)


# --- the registry API v2 itself (artifacts: edgevllm/image/wheelcache.py) --------------------
def registry_request(method: str, host: str, path: str, **kwargs) -> requests.Response:
    """One request to ``host``'s API v2 (``path`` after ``/v2/``, or a full upload URL the
    registry gave); plain HTTP on loopback only, as docker does. A 401 is answered once with
    docker's login for the host (image/registryauth.py), which later calls to the same
    repository reuse. A registry that is down is one RegistryError line."""
    scheme = "http" if is_loopback(host) else "https"
    url = path if "://" in path else f"{scheme}://{host}/v2/{path}"
    repository = _repository_of(url)
    headers = dict(kwargs.pop("headers", None) or {})
    known = _LOGINS.get((host, repository))
    response = _send(method, url, host, headers, known, kwargs)
    challenge = response.headers.get("WWW-Authenticate", "")
    if response.status_code == 401 and challenge:  # no login yet, or a token that expired
        from edgevllm.image.registryauth import authorization

        login = authorization(challenge, host, repository)
        if login and login != known:
            _LOGINS[(host, repository)] = login
            if hasattr(kwargs.get("data"), "seek"):
                kwargs["data"].seek(0)
            response = _send(method, url, host, headers, login, kwargs)
    return response


# Answers to a registry's 401 in this process, by (host, repository): never written anywhere.
_LOGINS: dict[tuple[str, str], str] = {}


def _send(method: str, url: str, host: str, headers: dict, login: str | None,
          kwargs: dict) -> requests.Response:
    from edgevllm.common.http import credential_session

    sent = headers | ({"Authorization": login} if login else {})
    origin = f"{'http' if is_loopback(host) else 'https'}://{host}/"
    try:  # the login goes to the registry's own origin only (not an upload Location elsewhere)
        return credential_session(origin).request(method, url, headers=sent,
                                            timeout=kwargs.pop("timeout", 300), **kwargs)
    except requests.RequestException as exc:
        raise RegistryError(
            f"cannot reach the registry {host} ({type(exc).__name__}); "
            "check the registry address and the network"
        ) from None


def _repository_of(url: str) -> str:
    path = url.split("://", 1)[-1].split("/", 1)[-1].split("?", 1)[0].removeprefix("v2/")
    return re.split(r"/(?:blobs|manifests)/", path, maxsplit=1)[0]


def answered(response: requests.Response, host: str, name: str,
        codes: tuple[int, ...] = (200,)) -> requests.Response:
    if response.status_code in (401, 403):
        raise RegistryError(
            f"{host} refused to let this machine read or write {name} (HTTP "
            f"{response.status_code}): `docker login {host}` with an account that may"
        )
    if response.status_code not in codes:
        raise RegistryError(f"{host}/{name}: HTTP {response.status_code}{_error_code(response)} "
                            f"from the registry ({response.request.method} "
                            f"{response.url.split('?')[0]})")
    return response


def _error_code(response: requests.Response) -> str:
    """`` MANIFEST_BLOB_UNKNOWN``: the registry's own word for what went wrong, where it says."""
    try:
        code = response.json()["errors"][0]["code"]
    except (ValueError, KeyError, IndexError, TypeError):
        return ""
    return f" {code}" if isinstance(code, str) and code.replace("_", "").isalnum() else ""


def get_manifest(host: str, name: str, reference: str, accept: str) -> bytes | None:
    """A manifest's raw bytes, None where the registry has none under ``reference``."""
    response = registry_request("GET", host, f"{name}/manifests/{reference}",
                                headers={"Accept": accept})
    return None if response.status_code == 404 else answered(response, host, name).content


def blob_exists(host: str, name: str, digest: str) -> bool:
    response = registry_request("HEAD", host, f"{name}/blobs/{digest}")
    return answered(response, host, name, (200, 404)).status_code == 200


def put_blob(host: str, name: str, digest: str, data, size: int) -> None:
    """Upload one blob (``data``: bytes or an open file, streamed) unless the registry has it."""
    if blob_exists(host, name, digest):
        return
    started = answered(registry_request("POST", host, f"{name}/blobs/uploads/"), host, name, (202,))
    location = started.headers.get("Location", "")
    if not location:
        raise RegistryError(f"{host}/{name}: the registry gave no upload location")
    if "://" not in location:
        location = f"{'http' if is_loopback(host) else 'https'}://{host}{location}"
    joiner = "&" if "?" in location else "?"
    answered(registry_request("PUT", host, f"{location}{joiner}digest={digest}", data=data,
                         headers={"Content-Type": "application/octet-stream",
                                  "Content-Length": str(size)}), host, name, (201,))


def get_blob(host: str, name: str, digest: str) -> requests.Response | None:
    """A blob's streamed response (the caller checks its bytes), None where there is none."""
    response = registry_request("GET", host, f"{name}/blobs/{digest}", stream=True)
    if response.status_code == 404:
        return None
    return answered(response, host, name)


def put_manifest(host: str, name: str, tag: str, raw: bytes, media_type: str) -> str:
    """Put a manifest under ``tag``; returns its digest."""
    answered(registry_request("PUT", host, f"{name}/manifests/{tag}", data=raw,
                         headers={"Content-Type": media_type}), host, name, (201,))
    return _digest(raw)


def _digest(raw: bytes) -> str:
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def holds_image(engine: DockerEngine, dest: str, raw: bytes, inspect: dict) -> bool:
    """Does the manifest ``raw`` (from repository ``dest``) describe the local image?"""
    if f"{dest}@{_digest(raw)}" in (inspect.get("RepoDigests") or []):
        return True
    found = describes(raw, inspect, dest)
    if isinstance(found, str):  # an index: its child for this image's platform
        child_raw = remote_manifest(engine, f"{dest}@{found}")
        return child_raw is not None and describes(child_raw, inspect, f"{dest}@{found}") is True
    return found is True


def describes(raw: bytes, inspect: dict, where: str) -> bool | str | None:
    """What a registry's manifest answer says of the local image: True/False for an image
    manifest (its config is the image's, or not), the digest of the platform's child for an
    index, None for an index without one. A registry's answer is outside data: any other shape
    is one RegistryError line."""
    manifest = json_object(raw, f"{where}: the registry's manifest", RegistryError)
    if manifest.get("mediaType") in INDEX_TYPES or "manifests" in manifest:
        return _platform_child(manifest, inspect)
    config = manifest.get("config")
    return isinstance(config, dict) and config.get("digest") == inspect.get("Id")


def _platform_child(index: dict, inspect: dict) -> str | None:
    entries = index.get("manifests")
    for entry in entries if isinstance(entries, list) else []:
        platform = entry.get("platform") if isinstance(entry, dict) else None
        if not isinstance(platform, dict):
            continue
        if (platform.get("os"), platform.get("architecture")) == (
            inspect.get("Os"),
            inspect.get("Architecture"),
        ):
            digest = entry.get("digest")
            return digest if isinstance(digest, str) and SHA256_DIGEST.fullmatch(digest) else None
    return None


# --- push --------------------------------------------------------------------------------------
def push(
    engine: DockerEngine,
    image: str,
    registry: str,
    tag: str | None = None,
    moving_tags: list[str] | tuple = (),
    repo: str | None = None,
) -> PushResult:
    registry = check_registry(registry)
    inspect = engine.image_inspect(image)
    labels = (inspect.get("Config") or {}).get("Labels") or {}
    tag = tag or immutable_tag(engine, image, labels)
    if not tag:
        raise ConfigError(
            f"image '{image}' carries no lock and no {TAG_LABEL} label: pass "
            "--tag TAG for its immutable tag"
        )
    check_tag(tag, "--tag")
    for moving in moving_tags:
        check_tag(moving, "--moving-tag")
        if moving == tag:
            raise ConfigError(f"--moving-tag '{moving}' is the immutable tag itself")
    repo = repo or default_repo(image, inspect)
    if not REPO_RE.match(repo):
        raise ConfigError(f"--repo '{repo}': lower-case letters, digits and . _ - / only")
    dest = f"{registry}/{repo}"
    result = PushResult(inspect["Id"], _push_immutable(engine, image, dest, tag, inspect))
    for moving in moving_tags:
        ref = f"{dest}:{moving}"
        engine.tag(image, ref)
        console.step(f"pushing moving tag {ref}")
        result.moving.append(PushedTag(ref, engine.push(ref), "pushed"))
    return result


def _push_immutable(
    engine: DockerEngine, image: str, dest: str, tag: str, inspect: dict
) -> PushedTag:
    ref = f"{dest}:{tag}"
    existing = remote_manifest(engine, ref)
    if existing is not None:
        if holds_image(engine, dest, existing, inspect):
            console.info(f"{ref} already holds this image ({_digest(existing)}); nothing to push")
            return PushedTag(ref, _digest(existing), "unchanged")
        raise RegistryError(
            f"{ref} already exists with digest {_digest(existing)}, a different image than "
            f"{image} ({inspect['Id'][:19]}): an immutable tag is never overwritten; rebuild "
            "from a new lock or push with another --tag"
        )
    engine.tag(image, ref)
    console.step(f"pushing {ref}")
    digest = engine.push(ref)
    after = remote_manifest(engine, ref)
    if after is None or _digest(after) != digest:
        raise RegistryError(
            f"{ref}: the registry does not return the pushed digest {digest}; check the registry"
        )
    return PushedTag(ref, digest, "pushed")
