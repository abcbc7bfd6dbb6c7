"""Property-based tests (Hypothesis) of what inspect reads from outside: a published set's
``docker save`` archive (read offline by the one layer reader), the listing the in-image script
prints (from whatever python3 the image holds), a dpkg status file, an SBOM and a signed
envelope beside a set. Seeds are real shapes (``support.fake_rootfs``'s two-layer archive, a
CycloneDX document and a DSSE envelope made by the code under test); each mutated input gives a
result or one of edgevllm's own errors in one line, within the memory and time bounds. Hostile
archives built on purpose (a declared size of a terabyte, a member that climbs out with ``..``,
symlinks where metadata should be, a cut stream, JSON nested 100,000 deep) are named cases."""

from __future__ import annotations

import io
import json
import tarfile

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from edgevllm.common.errors import EdgeVllmError, VerifyError
from edgevllm.inspect import dsse, inimage_dists, provenance, sbom
from edgevllm.inspect.offline import read_archive
from support.checks import present
from support.fake_rootfs import (
    INSTALLED,
    OS_RELEASE,
    SITE,
    docker_save_archive,
    dpkg_status,
    metadata,
    tar_of,
)
from support.properties import PROPERTY, bounded, json_values, mutated, replaced_field

ARCHIVE, IMAGE_ID = docker_save_archive({"org.opencontainers.image.title": "t"})


def _read(data: bytes):
    archive = read_archive(io.BytesIO(data), "set")
    assert all(isinstance(v, str) for v in archive.labels.values())
    assert all(d["path"].startswith("/") and ".." not in d["path"].split("/")
               for d in archive.dists)
    return archive


def test_the_seed_reads_whole():
    archive = _read(ARCHIVE)
    assert archive.problems == [] and archive.config_sha256 == IMAGE_ID and archive.debs


@PROPERTY
@given(mutated(ARCHIVE, [124, 136, 148, 512 + 124, 1024 + 124]))  # tar header size/sum fields
def test_an_archive_with_its_bytes_mutated(data):
    bounded(_read, data)


def _members(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: present(tar.extractfile(m)).read() for m in tar.getmembers() if m.isfile()}


SEED_FILES = _members(ARCHIVE)
MANIFEST = json.loads(SEED_FILES["manifest.json"])
CONFIG_NAME = MANIFEST[0]["Config"]
CONFIG = json.loads(SEED_FILES[CONFIG_NAME])


@PROPERTY
@given(replaced_field({"manifest": MANIFEST}), replaced_field(CONFIG))
@example({"manifest": [{"Config": CONFIG_NAME, "Layers": "blobs"}]}, CONFIG)
@example({"manifest": MANIFEST}, {**CONFIG, "config": ["not", "a", "mapping"]})
@example({"manifest": MANIFEST}, {**CONFIG, "config": {"Labels": {"a": 1}}})
@example({"manifest": MANIFEST}, {**CONFIG, "rootfs": {"diff_ids": "sha256:x"}})
def test_an_archive_with_its_manifest_or_config_replaced(manifest, config):
    files = dict(SEED_FILES, **{"manifest.json": json.dumps(manifest.get("manifest")).encode(),
                                CONFIG_NAME: json.dumps(config).encode()})
    bounded(_read, tar_of(files))


def _layer_archive(layer: bytes) -> bytes:
    """A docker-save archive of one layer, its config naming the layer's real diff id."""
    import hashlib

    config = json.dumps({"rootfs": {"type": "layers", "diff_ids": [
        "sha256:" + hashlib.sha256(layer).hexdigest()]}}).encode()
    manifest = json.dumps([{"Config": "config.json", "Layers": ["l/layer.tar"]}]).encode()
    return tar_of({"config.json": config, "l/layer.tar": layer, "manifest.json": manifest})


def _declared(name: str, size: int) -> bytes:
    """A tar whose one member declares ``size`` bytes and holds none of them."""
    info = tarfile.TarInfo(name)
    info.size = size
    return info.tobuf(tarfile.GNU_FORMAT) + bytes(1024)


def _links(links: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, target in links.items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return buffer.getvalue()


META = f"{SITE}/evil-1.0.dist-info/METADATA"
HOSTILE = {
    "a METADATA declaring a terabyte": (_layer_archive(_declared(META, 1 << 40)),
                                        "over the 16 MiB a package's metadata may hold"),
    "a dpkg status declaring a terabyte": (
        _layer_archive(_declared("var/lib/dpkg/status", 1 << 40)), "var/lib/dpkg/status"),
    "a member climbing out with ..": (
        _layer_archive(tar_of({f"../../{META}": metadata("evil", "1.0")})), "climbs out"),
    "the archive cut inside a layer": (_layer_archive(tar_of({META: b"x" * 4000}))[:3000],
                                       "truncated"),
    "manifest.json nested 100,000 deep": (tar_of({"manifest.json": b"[" * 100_000}),
                                          "no docker-save manifest.json"),
    "not a tar at all": (b"\x89PNG\r\n" + bytes(600), "not a tar archive"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_archive_is_one_line_with_verify_s_exit_code(case):
    data, needle = HOSTILE[case]
    error = bounded(_read, data)
    assert isinstance(error, VerifyError) and error.exit_code == 8, error
    assert needle in str(error)


def test_symlinks_where_metadata_or_the_dpkg_status_should_be_are_not_followed():
    """A layer's symlinks name paths of the image, never of the machine reading it."""
    layer = _links({META: "/etc/passwd", "var/lib/dpkg/status": "/var/lib/dpkg/status"})
    archive = _read(_layer_archive(layer))
    assert archive.dists == [] and archive.debs == [] and archive.problems == []


def _listing(data: bytes):
    return sbom.parse_listing(data, "img")


LISTING = (inimage_dists.MARKER + json.dumps([inimage_dists.entry(
    "/site/six-1.16.0.dist-info", metadata("six", "1.16.0"), b"six.py,,\n")]) + "\n"
    + inimage_dists.DEBS_MARKER + json.dumps(inimage_dists.deb_packages(
        dpkg_status(("libc6", "2.41-12", "amd64", INSTALLED)), OS_RELEASE)) + "\n").encode()


@PROPERTY
@given(mutated(LISTING), json_values())
def test_what_the_images_python3_prints(data, value):
    """A hostile image may print anything where the script's listing should be."""
    for out in (data, inimage_dists.MARKER.encode() + json.dumps(value).encode()):
        found = bounded(_listing, out)
        assert found is None or isinstance(found, EdgeVllmError) or all(
            isinstance(d["name"], str) for d in found[0] + found[1])


@PROPERTY
@given(mutated(dpkg_status(("libc6", "2.41-12", "amd64", INSTALLED),
                           ("curl", "8.14.1-2", "arm64", "deinstall ok config-files"))),
       st.binary(max_size=200))
def test_a_dpkg_status_and_os_release_of_any_bytes(status, release):
    found = bounded(inimage_dists.deb_packages, status, release)
    assert all(set(d) == {"name", "version", "arch", "distro", "codename"} for d in found)


DOC = json.loads(sbom.build_sbom(sbom.Subject("img:1", IMAGE_ID, []), None, [inimage_dists.entry(
    "/site/six-1.16.0.dist-info", metadata("six", "1.16.0"), b"six.py,,\n")], None,
    inimage_dists.deb_packages(dpkg_status(("libc6", "2.41-12", "amd64", INSTALLED)),
                               OS_RELEASE)))


def _check(text: str):
    return sbom.check_sbom(sbom.parse_sbom(text, "s"), "s", IMAGE_ID, [], None, [])


@PROPERTY
@given(replaced_field(DOC), mutated(json.dumps(DOC).encode()))
@example({**DOC, "metadata": ["x"]}, b"{}")
@example({**DOC, "components": [1, "x", {"properties": [7]}]}, b"{}")
def test_an_sbom_beside_a_set(document, data):
    """The SBOM file is checked against the image even when its hash already differs from the
    statement's: whatever it holds is a list of problems or one line."""
    for text in (json.dumps(document), data.decode("utf-8", "replace")):
        found = bounded(_check, text)
        assert isinstance(found, (list, EdgeVllmError))


def _envelope_and_key():
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    statement = provenance.statement("img:1", IMAGE_ID, None, None, json.dumps(DOC))
    return dsse.sign(provenance.canonical(statement), key), key.public_key(), statement


ENVELOPE, PUBLIC, STATEMENT = _envelope_and_key()


def _verify(envelope: dict, statement: dict | None):
    payload = dsse.verify(envelope, PUBLIC, "e")
    found = provenance.parse_statement(payload if statement is None else
                                       provenance.canonical(statement), "e")
    return provenance.subject_id(found), provenance.sbom_digest(found), \
        provenance.lock_digest(found)


@PROPERTY
@given(replaced_field(ENVELOPE), replaced_field(STATEMENT))
@example(ENVELOPE, {**STATEMENT, "predicate": ["x"]})
@example(ENVELOPE, {**STATEMENT, "predicate": {"runDetails": {"byproducts": [1, None]}}})
def test_an_envelope_and_a_statement_with_any_field_replaced(envelope, statement):
    """The envelope as it lies beside a set; the statement as a signer may have written it."""
    bounded(_verify, envelope, None)
    bounded(_verify, ENVELOPE, statement)
