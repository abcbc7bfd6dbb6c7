"""The compiled-wheels artifact (image/wheelcache.py) against a real registry (Debian's
docker-registry on 127.0.0.1) with real PyPI wheels: its format, publish and fetch by compile
key, and every refusal (a flipped byte in the registry's storage, another key's artifact, a list
that does not match the layers, an image that is not an artifact). A refusal leaves nothing."""

from __future__ import annotations

import hashlib
import http.server
import json
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from edgevllm.common.errors import ConfigError, RegistryError, WheelCacheError
from edgevllm.image import registry as api
from edgevllm.image.wheelcache import (
    ARTIFACT_TYPE,
    COMPILE_KEY_NOTE,
    TITLE,
    check_layers,
    check_ref,
    config_of,
    fetch,
    manifest_for,
    publish,
    read_list,
    wheel_list,
)
from support.downloads import pypi_download
from support.localhttp import serve_handler
from support.registry import blob_file, local_registry_storage

KEY, OTHER_KEY = "0123456789abcdef", "fedcba9876543210"
SIGNER = Ed25519PrivateKey.generate()  # the builder's key (EDGEVLLM_SIGNING_KEY in a build)
TRUSTED = [SIGNER.public_key()]


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> Path:
    """A folder of two real wheels, as a compile exports them."""
    folder = tmp_path_factory.mktemp("wheels")
    for spec in ("six==1.16.0", "typing_extensions==4.15.0"):
        wheel = pypi_download(spec)
        shutil.copyfile(wheel, folder / wheel.name)
    return folder


def repo(registry: str, name: str) -> str:
    return f"{registry}/wheelcache25/{name}"


def same_files(one: Path, two: Path) -> bool:
    names = sorted(p.name for p in one.glob("*.whl"))
    return names == sorted(p.name for p in two.glob("*.whl")) and all(
        (one / n).read_bytes() == (two / n).read_bytes() for n in names)


def test_the_format_is_an_oci_artifact_with_a_sha256_list(wheels):
    listing = wheel_list(wheels, KEY)
    manifest = json.loads(manifest_for(listing))
    assert manifest["artifactType"] == ARTIFACT_TYPE
    assert manifest["annotations"] == {COMPILE_KEY_NOTE: KEY}
    assert manifest["config"]["digest"] == "sha256:" + hashlib.sha256(listing.raw()).hexdigest()
    titles = [layer["annotations"][TITLE] for layer in manifest["layers"]]
    assert titles == sorted(p.name for p in wheels.glob("*.whl"))
    for layer in manifest["layers"]:
        data = (wheels / layer["annotations"][TITLE]).read_bytes()
        assert layer["digest"] == "sha256:" + hashlib.sha256(data).hexdigest()
        assert layer["size"] == len(data)
    assert json.loads(listing.raw())["compile_key"] == KEY


def test_publish_then_fetch_gives_the_same_wheels(registry, wheels, tmp_path):
    ref = repo(registry, "roundtrip")
    sent = publish(ref, KEY, wheels, SIGNER)
    assert sent.action == "pushed" and sent.ref == f"{ref}:{KEY}"
    assert publish(ref, KEY, wheels, SIGNER).action == "unchanged"
    got = fetch(ref, KEY, tmp_path / "got", TRUSTED)
    assert got is not None and got.digest == sent.digest
    assert same_files(wheels, tmp_path / "got")


def test_a_p256_builder_republishing_its_wheels_finds_them_unchanged(registry, wheels):
    """An ECDSA signature differs at every signing: the same wheels signed again by the same
    P-256 key are the tag's own ("unchanged"); another builder's key finds them "kept"."""
    ref = repo(registry, "p256")
    signer = ec.generate_private_key(ec.SECP256R1())
    assert publish(ref, KEY, wheels, signer).action == "pushed"
    assert publish(ref, KEY, wheels, signer).action == "unchanged"
    other = ec.generate_private_key(ec.SECP256R1())
    assert publish(ref, KEY, wheels, other).action == "kept"


def test_an_existing_key_is_never_overwritten(registry, wheels, tmp_path):
    ref = repo(registry, "immutable")
    publish(ref, KEY, wheels, SIGNER)
    other = tmp_path / "other"
    other.mkdir()
    shutil.copyfile(next(wheels.glob("six-*.whl")), other / "six-1.16.0-py2.py3-none-any.whl")
    assert publish(ref, KEY, other, SIGNER).action == "kept"
    fetch(ref, KEY, tmp_path / "got", TRUSTED)
    assert same_files(wheels, tmp_path / "got")


def test_a_key_the_registry_lacks_is_none_and_leaves_nothing(registry, tmp_path):
    assert fetch(repo(registry, "empty"), KEY, tmp_path / "got", TRUSTED) is None
    assert not (tmp_path / "got").exists()


def test_a_flipped_byte_in_the_registry_is_refused(registry, registry_storage, wheels, tmp_path):
    ref = repo(registry, "flipped")
    sent = publish(ref, KEY, wheels, SIGNER)
    victim = sent.wheels[-1]
    data = blob_file(registry_storage[1], victim.sha256)
    original = data.read_bytes()
    try:
        data.write_bytes(original[:1000] + bytes([original[1000] ^ 1]) + original[1001:])
        with pytest.raises(WheelCacheError, match=f"{victim.name} is not the wheel its list"):
            fetch(ref, KEY, tmp_path / "got", TRUSTED)
    finally:
        data.write_bytes(original)
    assert not (tmp_path / "got").exists()
    assert not list(tmp_path.iterdir()), "a refused fetch left a temporary folder"


def test_another_keys_artifact_under_this_key_is_refused(registry, wheels, tmp_path):
    ref = repo(registry, "otherkey")
    sent = publish(ref, OTHER_KEY, wheels, SIGNER)
    host, name = check_ref(ref)
    raw = api.get_manifest(host, name, OTHER_KEY, "application/vnd.oci.image.manifest.v1+json")
    assert raw is not None and api.put_manifest(host, name, KEY, raw, json.loads(raw)[
        "mediaType"]) == sent.digest
    with pytest.raises(WheelCacheError, match=f"compile key {OTHER_KEY}, not {KEY}"):
        fetch(ref, KEY, tmp_path / "got", TRUSTED)
    assert not (tmp_path / "got").exists()


def test_a_list_that_is_not_the_layers_is_refused(wheels):
    listing = wheel_list(wheels, KEY)
    manifest = json.loads(manifest_for(listing))
    manifest["layers"][0]["annotations"][TITLE] = "vllm-0.1.0-cp38-abi3-linux_x86_64.whl"
    with pytest.raises(WheelCacheError, match="layers are not the wheel list"):
        check_layers(json.dumps(manifest).encode(), listing, "r:k")


def test_a_list_with_another_digest_or_a_path_for_a_name_is_refused(wheels):
    listing = wheel_list(wheels, KEY)
    raw = listing.raw()
    digest = "sha256:" + hashlib.sha256(raw).hexdigest()
    assert read_list(raw, digest, KEY, "r:k") == listing
    with pytest.raises(WheelCacheError, match="sha256 is not the manifest's"):
        read_list(raw + b" ", digest, KEY, "r:k")
    data = json.loads(raw)
    data["wheels"][0]["name"] = "../../etc/cron.d/x.whl"
    evil = json.dumps(data).encode()
    with pytest.raises(WheelCacheError, match="wheels.0.name"):
        read_list(evil, "sha256:" + hashlib.sha256(evil).hexdigest(), KEY, "r:k")


def test_an_image_manifest_is_not_an_artifact():
    image = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
             "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                        "digest": "sha256:" + "0" * 64, "size": 2}, "layers": []}
    with pytest.raises(WheelCacheError, match="not a compiled-wheels artifact"):
        config_of(json.dumps(image).encode(), "r:k")
    with pytest.raises(WheelCacheError, match="not valid JSON"):
        config_of(b"{", "r:k")


@pytest.mark.parametrize("ref", ["https://reg.lan/w", "me:pa55w0rd@reg.lan:5000/w",
                                 "reg.lan:5000", "wheels", "reg.lan/Upper"])
def test_a_wheel_cache_ref_is_host_and_repository_without_credentials(ref):
    with pytest.raises(ConfigError) as caught:
        check_ref(ref)
    assert "pa55w0rd" not in str(caught.value)
    assert check_ref("reg.lan:5000/edgevllm/wheels") == ("reg.lan:5000", "edgevllm/wheels")


def test_a_registry_that_is_down_is_one_line(tmp_path):
    from support.registry import free_port

    with pytest.raises(RegistryError, match="cannot reach the registry 127.0.0.1"):
        fetch(f"127.0.0.1:{free_port()}/w", KEY, tmp_path / "got", TRUSTED)
    assert not (tmp_path / "got").exists()


def test_a_registry_that_asks_for_a_login_gets_dockers_and_nothing_shows_it(
        wheels, tmp_path, monkeypatch):
    """htpasswd (HTTP Basic) on the real registry: without docker's login, one line saying to
    `docker login`; with the login `docker login` writes (auths in $DOCKER_CONFIG/config.json),
    publish and fetch work. The password is in no message, no Transfer and no file written."""
    import base64

    from edgevllm.image import registry as registry_module

    password = "pw-" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:12]
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    monkeypatch.setattr(registry_module, "_LOGINS", {})
    with local_registry_storage(("builder", password)) as (host, storage):
        ref = f"{host}/wheelcache25/login"
        with pytest.raises(RegistryError, match=f"docker login {host}") as refused:
            publish(ref, KEY, wheels, SIGNER)
        assert password not in str(refused.value)

        (tmp_path / "docker").mkdir()
        auth = base64.b64encode(f"builder:{password}".encode()).decode()
        (tmp_path / "docker" / "config.json").write_text(
            json.dumps({"auths": {host: {"auth": auth}}}))
        sent = publish(ref, KEY, wheels, SIGNER)
        monkeypatch.setattr(registry_module, "_LOGINS", {})  # a new process: asked again
        got = fetch(ref, KEY, tmp_path / "got", TRUSTED)
        assert got is not None and got.digest == sent.digest and sent.action == "pushed"
        assert same_files(wheels, tmp_path / "got")
        assert password not in repr(sent) + repr(got)
        written = [p.read_bytes() for p in (tmp_path / "got").iterdir()]
        assert not [b for b in written if password.encode() in b]


class _Forward(http.server.BaseHTTPRequestHandler):
    """A registry's front: forwards every request to the real registry ``upstream`` and points
    an upload's ``Location`` at ``elsewhere`` (another origin: another loopback port stands in
    for another host). ``seen`` records what reached ``elsewhere``."""

    upstream = elsewhere = ""
    seen: list[dict] = []

    def _handle(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        port = str(self.server.server_address[1])  # type: ignore[index]  # an (host, port) pair
        if port == self.elsewhere.rsplit(":", 1)[1]:
            self.seen.append({"path": self.path, "headers": dict(self.headers), "body": body})
            self.send_response(201)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host",)}
        answer = requests.request(self.command, f"http://{self.upstream}{self.path}",
                                  headers=headers, data=body, allow_redirects=False, timeout=30)
        self.send_response(answer.status_code)
        for key, value in answer.headers.items():
            if key.lower() == "location" and "/blobs/uploads/" in value:
                value = f"http://{self.elsewhere}{urlsplit(value).path}?{urlsplit(value).query}"
            if key.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(answer.content)))
        self.end_headers()
        self.wfile.write(answer.content if self.command != "HEAD" else b"")

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = _handle  # noqa: N815 (http.server's names)

    def log_message(self, *args):
        pass


@contextmanager
def _serving(handler: type) -> Iterator[str]:
    """``handler`` on 127.0.0.1, as the registry's ``HOST:PORT``."""
    with serve_handler(handler) as base:
        yield base.removeprefix("http://")


def test_docker_s_login_goes_to_the_registry_s_origin_only(wheels, tmp_path, monkeypatch):
    """The real registry asks for a login (htpasswd); its front names an upload Location on
    another origin (another loopback port). The login reaches the registry and never the other
    origin: the upload there arrives without Authorization and without the password."""
    import base64

    from edgevllm.image import registry as registry_module

    password = "pw-" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:12]
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    monkeypatch.setattr(registry_module, "_LOGINS", {})
    _Forward.seen = []
    with local_registry_storage(("builder", password)) as (upstream, _storage), \
            _serving(_Forward) as front, _serving(_Forward) as elsewhere:
        _Forward.upstream, _Forward.elsewhere = upstream, elsewhere
        (tmp_path / "docker").mkdir()
        auth = base64.b64encode(f"builder:{password}".encode()).decode()
        (tmp_path / "docker" / "config.json").write_text(
            json.dumps({"auths": {front: {"auth": auth}}}))
        with pytest.raises(RegistryError):  # the stand-in stores nothing: the manifest fails
            publish(f"{front}/wheelcache25/origin", KEY, wheels, SIGNER)
    assert _Forward.seen, "the upload never went to the Location's origin"
    for request in _Forward.seen:
        assert "Authorization" not in request["headers"]
        assert password not in json.dumps(request["headers"])
        assert auth.encode() not in request["body"] and password.encode() not in request["body"]


def test_a_key_written_first_by_someone_else_is_not_taken_on_faith(registry, wheels, tmp_path):
    """Anyone who can push may write a compile key's artifact first (keys are computable from
    public inputs): unsigned, or signed by a key nobody trusts, it is refused, and with no
    trusted key at all nothing is taken; the builder's own signature is."""
    stranger = Ed25519PrivateKey.generate()
    for name, signer in (("unsigned", None), ("stranger", stranger)):
        ref = repo(registry, name)
        publish(ref, KEY, wheels, signer)
        with pytest.raises(WheelCacheError, match="is not signed") as refused:
            fetch(ref, KEY, tmp_path / "got", TRUSTED)
        assert "whoever wrote it first" in str(refused.value)
        assert not (tmp_path / "got").exists()
    ref = repo(registry, "signed")
    publish(ref, KEY, wheels, SIGNER)
    with pytest.raises(WheelCacheError, match="no key is trusted"):
        fetch(ref, KEY, tmp_path / "got", [])
    assert fetch(ref, KEY, tmp_path / "got", [stranger.public_key(), *TRUSTED]) is not None
    assert same_files(wheels, tmp_path / "got")
