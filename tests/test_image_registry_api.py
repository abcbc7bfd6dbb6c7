"""image/registry.py's registry API v2 calls and name rules, without the Docker engine: against
a real registry on 127.0.0.1 (Debian's docker-registry: blobs and manifests up and back, the
registry's own refusals named in one line) and hand-written servers on 127.0.0.1 for answers a
real registry gives only when something is wrong (a refusal, no upload location, an error body
that is no JSON or carries a line break), a registry that is down."""

from __future__ import annotations

import hashlib
import http.server
import json

import pytest

from edgevllm.common.errors import ConfigError, RegistryError
from edgevllm.image.registry import (
    _repository_of,
    _split_ref,
    blob_exists,
    check_registry,
    check_tag,
    default_repo,
    describes,
    get_blob,
    get_manifest,
    put_blob,
    put_manifest,
)
from support.localhttp import serve_handler
from support.registry import free_port, local_registry

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def registry():
    with local_registry() as host:
        yield host


def manifest_of(config: bytes, layer: bytes) -> bytes:
    return json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                       "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                  "digest": digest(config), "size": len(config)},
                       "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                                   "digest": digest(layer), "size": len(layer)}]}).encode()


def test_blobs_go_up_once_and_come_back_byte_for_byte(registry, tmp_path):
    data = b"a layer's bytes " * 1000
    assert not blob_exists(registry, "api/blobs", digest(data))
    source = tmp_path / "blob"
    source.write_bytes(data)
    with open(source, "rb") as handle:  # an open file is streamed
        put_blob(registry, "api/blobs", digest(data), handle, len(data))
    assert blob_exists(registry, "api/blobs", digest(data))
    put_blob(registry, "api/blobs", digest(data), b"never sent", len(data))  # held: no upload
    response = get_blob(registry, "api/blobs", digest(data))
    assert response is not None and response.content == data
    assert get_blob(registry, "api/blobs", digest(b"absent")) is None


def test_a_manifest_goes_up_under_its_tag_and_its_digest(registry):
    config, layer = b'{"architecture":"arm64","os":"linux"}', b"layer"
    for blob in (config, layer):
        put_blob(registry, "api/image", digest(blob), blob, len(blob))
    raw = manifest_of(config, layer)
    assert put_manifest(registry, "api/image", "v1", raw, OCI_MANIFEST) == digest(raw)
    assert get_manifest(registry, "api/image", "v1", OCI_MANIFEST) == raw
    assert get_manifest(registry, "api/image", digest(raw), OCI_MANIFEST) == raw
    assert get_manifest(registry, "api/image", "v2", OCI_MANIFEST) is None


def test_a_manifest_naming_blobs_the_registry_lacks_is_the_registry_s_own_word(registry):
    raw = manifest_of(b"{}", b"a layer never pushed")
    with pytest.raises(RegistryError) as raised:
        put_manifest(registry, "api/missing", "v1", raw, OCI_MANIFEST)
    message = str(raised.value)
    assert message.startswith(f"{registry}/api/missing: HTTP 400 MANIFEST_BLOB_UNKNOWN")
    assert "(PUT http://" in message and "\n" not in message


def test_a_blob_whose_bytes_are_not_its_digest_is_refused_by_the_registry(registry):
    with pytest.raises(RegistryError, match="HTTP 400 DIGEST_INVALID"):
        put_blob(registry, "api/bad", digest(b"what was promised"), b"other bytes", 11)
    assert not blob_exists(registry, "api/bad", digest(b"what was promised"))


def test_a_registry_that_is_down_is_one_line_naming_it():
    host = f"127.0.0.1:{free_port()}"
    with pytest.raises(RegistryError) as raised:
        get_manifest(host, "x", "v1", OCI_MANIFEST)
    assert str(raised.value).startswith(f"cannot reach the registry {host} (ConnectionError)")


def answering(status: int, body: bytes = b"", headers: dict[str, str] | None = None):
    """A server answering every request with ``status``, ``body`` and ``headers``."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self):
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_HEAD = do_POST = do_PUT = _answer  # noqa: N815 (http.server's names)

        def log_message(self, *args):
            pass

    return serve_handler(Handler)


@pytest.mark.parametrize("status", [401, 403])
def test_a_refusal_without_a_challenge_says_to_log_in(status):
    with answering(status) as base:
        host = base.removeprefix("http://")
        with pytest.raises(RegistryError) as raised:
            get_manifest(host, "team/x", "v1", OCI_MANIFEST)
    assert str(raised.value) == (f"{host} refused to let this machine read or write team/x "
                                 f"(HTTP {status}): `docker login {host}` with an account that "
                                 "may")


@pytest.mark.parametrize("body, shown", [
    (b'{"errors": [{"code": "NAME_UNKNOWN"}]}', " NAME_UNKNOWN"),
    (b'{"errors": [{"code": "EVIL\\nerror: forged line"}]}', ""),
    (b'{"errors": []}', ""), (b"<html>gateway</html>", ""), (b'{"errors": [{"code": 7}]}', ""),
])
def test_an_error_body_adds_the_registry_s_code_only_when_it_is_one_word(body, shown):
    with answering(500, body) as base:
        host = base.removeprefix("http://")
        with pytest.raises(RegistryError) as raised:
            get_manifest(host, "x", "v1", OCI_MANIFEST)
    assert str(raised.value).startswith(f"{host}/x: HTTP 500{shown} from the registry (GET ")
    assert "\n" not in str(raised.value)


def test_an_upload_start_without_a_location_is_one_line():
    with answering(202) as base:  # HEAD: 202, not 200/404: the blob check refuses first
        host = base.removeprefix("http://")
        with pytest.raises(RegistryError, match="HTTP 202"):
            put_blob(host, "x", digest(b"b"), b"b", 1)


def test_an_upload_location_relative_to_the_registry_is_followed():
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def _reply(self, status: int, headers: dict[str, str] | None = None):
            seen.append(f"{self.command} {self.path}")
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_HEAD(self):  # noqa: N802
            self._reply(404)

        def do_POST(self):  # noqa: N802
            self._reply(202, {"Location": "/v2/x/blobs/uploads/u1?state=s"})

        def do_PUT(self):  # noqa: N802
            self._reply(201)

        def log_message(self, *args):
            pass

    with serve_handler(Handler) as base:
        put_blob(base.removeprefix("http://"), "x", digest(b"b"), b"b", 1)
    assert seen == [f"HEAD /v2/x/blobs/{digest(b'b')}", "POST /v2/x/blobs/uploads/",
                    f"PUT /v2/x/blobs/uploads/u1?state=s&digest={digest(b'b')}"]


def test_no_upload_location_is_said_as_such():
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):  # noqa: N802
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_POST(self):  # noqa: N802
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    with serve_handler(Handler) as base:
        host = base.removeprefix("http://")
        with pytest.raises(RegistryError, match=f"^{host}/x: the registry gave no upload loc"):
            put_blob(host, "x", digest(b"b"), b"b", 1)


@pytest.mark.parametrize("given, kept", [
    ("ghcr.io/me", "ghcr.io/me"), ("127.0.0.1:5000", "127.0.0.1:5000"),
    ("localhost/team", "localhost/team"), (" registry:5000/a/b-c/ ", "registry:5000/a/b-c"),
    ("reg.example.com/a.b_c", "reg.example.com/a.b_c"), ("docker.io", "docker.io"),
    ("ghcr.io/me\n", "ghcr.io/me")])
def test_a_registry_is_a_host_with_a_dot_or_a_port_and_lower_case_namespaces(given, kept):
    assert check_registry(given) == kept


@pytest.mark.parametrize("bad", ["https://ghcr.io/me", "me/team", "ghcr.io/Me", "ghcr.io/me:v1",
                                 "ghcr.io/me/../x", "ghcr.io/me\nerror: x", "", "reg:5000/a//b",
                                 "ghcr.io/-me", "me"])
def test_a_registry_that_is_no_host_or_namespace_is_one_line_naming_the_flag(bad):
    with pytest.raises(ConfigError) as raised:
        check_registry(bad)
    assert str(raised.value).startswith("--registry '") and raised.value.exit_code == 2


@pytest.mark.parametrize("tag, ok", [
    ("v1", True), ("0.33.0-spark", True), ("_x", True), ("a" * 128, True), ("a" * 129, False),
    (".hidden", False), ("-x", False), ("a:b", False), ("a/b", False), ("", False),
    ("v1\n", False), ("é", False)])
def test_a_tag_is_what_docker_accepts(tag, ok):
    if ok:
        assert check_tag(tag, "--tag") == tag
    else:
        with pytest.raises(ConfigError, match="^--tag '"):
            check_tag(tag, "--tag")


@pytest.mark.parametrize("image, tags, repo", [
    ("edgevllm/vllm-spark:x", [], "vllm-spark"),
    ("ghcr.io/me/vllm@sha256:" + "a" * 64, [], "vllm"),
    ("sha256:" + "b" * 64, ["local/vllm-thor:1"], "vllm-thor"),
    ("0123456789ab", ["vllm:1"], "vllm"),  # an image id's prefix is no name
    ("Bad_Name:1", ["good:1"], "good"),
])
def test_the_repository_name_comes_from_the_image_or_its_tags(image, tags, repo):
    assert default_repo(image, {"RepoTags": tags}) == repo


def test_an_image_with_no_name_asks_for_repo():
    with pytest.raises(ConfigError, match="pass --repo NAME"):
        default_repo("sha256:" + "c" * 64, {"RepoTags": None})


@pytest.mark.parametrize("ref, parts", [
    ("reg:5000/team/x:v1", ("reg:5000", "team/x", "v1")),
    ("reg/x@sha256:" + "d" * 64, ("reg", "x", "sha256:" + "d" * 64)),
    ("127.0.0.1:5000/x:sha256-abc.att", ("127.0.0.1:5000", "x", "sha256-abc.att"))])
def test_a_ref_splits_into_host_name_and_reference(ref, parts):
    assert _split_ref(ref) == parts


@pytest.mark.parametrize("url, repository", [
    ("http://h/v2/team/x/manifests/v1", "team/x"),
    ("https://h/v2/x/blobs/sha256:ab", "x"),
    ("http://h/v2/a/b/c/blobs/uploads/u1?state=1", "a/b/c")])
def test_the_repository_a_request_is_for_keys_its_login(url, repository):
    assert _repository_of(url) == repository


IMAGE = {"Id": "sha256:" + "e" * 64, "Os": "linux", "Architecture": "arm64"}


def test_a_manifest_describes_the_image_whose_config_it_names():
    same = json.dumps({"config": {"digest": IMAGE["Id"]}}).encode()
    other = json.dumps({"config": {"digest": "sha256:" + "f" * 64}}).encode()
    assert describes(same, IMAGE, "r/x:v1") is True
    assert describes(other, IMAGE, "r/x:v1") is False
    assert describes(b'{"config": "x"}', IMAGE, "r/x:v1") is False


def test_an_index_answers_with_this_platform_s_child_only():
    child = "sha256:" + "1" * 64
    index: dict = {"mediaType": OCI_INDEX, "manifests": [
        {"platform": {"os": "linux", "architecture": "amd64"}, "digest": "sha256:" + "2" * 64},
        "not an entry", {"platform": None},
        {"platform": {"os": "linux", "architecture": "arm64"}, "digest": child}]}
    assert describes(json.dumps(index).encode(), IMAGE, "r/x") == child
    index["manifests"][-1]["digest"] = "sha256:../../etc"
    assert describes(json.dumps(index).encode(), IMAGE, "r/x") is None
    assert describes(json.dumps({"manifests": "x"}).encode(), IMAGE, "r/x") is None


@pytest.mark.parametrize("raw", [b"not json", b"[1]", b"\xff", b'"text"'])
def test_a_registry_answer_that_is_no_json_object_is_one_line(raw):
    with pytest.raises(RegistryError, match="^r/x:v1: the registry's manifest"):
        describes(raw, IMAGE, "r/x:v1")
