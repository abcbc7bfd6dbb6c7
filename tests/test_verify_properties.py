"""Property-based tests (Hypothesis) of every reader ``inv verify`` points at outside data: ELF,
fatbin, the LZ4/ZSTD payload decoders, wheels (zip), tarballs (docker save, OCI layout, root
filesystem; plain, gzip, zstd) and OCI index/manifest JSON.

Seeds are real: the fatbin sections of nvcc-built libraries (LZ4, ZSTD, uncompressed, two
translation units, relocatable device code; tests/support/cuda_libs.py) carried in a hand-built
ELF of a few KB. Each mutated input must give a result or one of edgevllm's own errors, never
another exception, within the memory bound of ``bounded`` and Hypothesis's deadline.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import json
import tarfile
import zipfile
from pathlib import Path

import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from edgevllm.specs.cuda import CudaArch
from edgevllm.verify.decompress import payload_bytes
from edgevllm.verify.elf import fatbin_sections_at, text_symbols
from edgevllm.verify.fatbin import parse_section
from edgevllm.verify.library import LibraryReport, inspect_buffer
from edgevllm.verify.oci import oci_layers
from edgevllm.verify.readers import scan_tar_stream, scan_wheel
from support.cuda_libs import compressed_libs, nvcc_libs
from support.fake_rootfs import tar_of
from support.properties import PROPERTY, bounded, json_values, mutated, replaced_field, tiny_elf

THOR, SPARK = CudaArch(11, 0), CudaArch(12, 1)
ROOT = Path(__file__).resolve().parent.parent
SITE = "usr/lib/python3/dist-packages"


@functools.lru_cache(maxsize=None)
def seeds() -> dict[str, bytes]:
    """name → a tiny ELF carrying the fatbin sections of one real nvcc-built library."""
    libs = {"lz4": nvcc_libs()["lz4"], "zstd": compressed_libs()["zstd"],
            "plain": nvcc_libs()["uncompressed"], "mixed": nvcc_libs()["mixed_tu"],
            "rdc": nvcc_libs()["rdc.o"], "zstd-lz4": compressed_libs()["lz4"]}
    out = {}
    for name, path in libs.items():
        data = path.read_bytes()
        out[name] = tiny_elf({sec: bytes(body) for sec, body, _ in fatbin_sections_at(data)})
    return out


@functools.lru_cache(maxsize=None)
def hot_spots(name: str) -> tuple[int, ...]:
    """Offsets worth mutating: the ELF header, the section headers, the fatbin container and
    entry headers (sizes, offsets, counts and flags live there)."""
    data = seeds()[name]
    shoff = int.from_bytes(data[0x28:0x30], "little")
    spots = set(range(0, 64, 2)) | set(range(shoff, len(data), 8))
    for _name, _body, start in fatbin_sections_at(data):
        spots |= set(range(start, start + 16, 2))
    report = inspect_buffer("seed.so", data)
    for entry in report.entries:
        spots |= set(range(max(0, entry.offset - 0x48), entry.offset, 4))
    return tuple(sorted(spots))


def _elf_cases():
    return st.sampled_from(sorted(seeds())).flatmap(
        lambda name: mutated(seeds()[name], hot_spots(name)))


def _inspect_both(data: bytes) -> list[LibraryReport]:
    return [inspect_buffer("lib.so", data, THOR), inspect_buffer("lib.so", data, SPARK)]


@PROPERTY
@given(_elf_cases())
def test_elf_and_fatbin_parse_or_say_corrupt(data):
    reports = bounded(_inspect_both, data)
    if isinstance(reports, list):  # inspect_buffer turns our errors into report rows
        for report in reports:
            assert report.status == "ok" or report.status in ("no device code",) \
                or report.corrupt, report.status


@PROPERTY
@given(st.sampled_from(sorted(seeds())).flatmap(
    lambda name: mutated(bytes(fatbin_sections_at(seeds()[name])[0][1]), range(0, 0x60, 2))))
def test_a_fatbin_section_alone(data):
    bounded(parse_section, data)


@PROPERTY
@given(_elf_cases())
def test_kernel_names_of_a_mutated_cubin(data):
    bounded(text_symbols, data)


def _payloads() -> list[tuple[str, bytes, int]]:
    """(compression, stored bytes, declared size) of every compressed entry of the seeds."""
    found = []
    for data in seeds().values():
        for entry in inspect_buffer("seed.so", data).entries:
            if entry.compression != "none":
                stored = data[entry.offset:entry.offset + entry.stored_size]
                found.append((entry.compression, stored, entry.full_size))
    return found


@PROPERTY
@given(st.sampled_from(range(8)).flatmap(lambda i: st.tuples(
    st.just(_payloads()[i % len(_payloads())]),
    mutated(_payloads()[i % len(_payloads())][1], range(0, 32)),
    st.sampled_from((64, 1 << 12, 1 << 20, 1 << 32, 1 << 62)))))
def test_lz4_and_zstd_payloads_decode_within_bounds(case):
    (compression, _, full_size), stored, limit = case
    bounded(payload_bytes, stored, compression, min(limit, full_size) if limit == 64 else limit)


# --- wheels ------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def wheel_seed() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("vllm/_C.abi3.so", seeds()["plain"])
        archive.writestr("vllm/x.cubin", seeds()["zstd"])
        archive.writestr("vllm-0.1.dist-info/METADATA", "Name: vllm\n")
    return out.getvalue()


def _zip_spots(data: bytes) -> tuple[int, ...]:
    spots = set()
    for magic in (b"PK\x03\x04", b"PK\x01\x02", b"PK\x05\x06"):
        at = data.find(magic)
        while at >= 0:
            spots |= set(range(at, at + 48, 2))
            at = data.find(magic, at + 1)
    return tuple(sorted(spots))


@PROPERTY
@given(mutated(wheel_seed(), _zip_spots(wheel_seed())))
def test_a_mutated_wheel(tmp_path_factory, data):
    wheel = tmp_path_factory.getbasetemp() / "fuzz-0.1-py3-none-any.whl"
    wheel.write_bytes(data)
    bounded(scan_wheel, wheel)


# --- tarballs ----------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def tar_seeds() -> dict[str, bytes]:
    layer = tar_of({f"{SITE}/vllm/_C.abi3.so": seeds()["plain"], "etc/.wh.gone": b""})
    digest = hashlib.sha256(layer).hexdigest()
    docker = tar_of({"manifest.json": json.dumps([{"Layers": ["l1/layer.tar"]}]).encode(),
                   "l1/layer.tar": layer})
    manifest = json.dumps({"layers": [{"digest": f"sha256:{digest}"}]}).encode()
    mdigest = hashlib.sha256(manifest).hexdigest()
    index = {"manifests": [{"digest": f"sha256:{mdigest}",
                            "platform": {"architecture": "arm64"}}]}
    oci = tar_of({"index.json": json.dumps(index).encode(), f"blobs/sha256/{mdigest}": manifest,
                f"blobs/sha256/{digest}": zstandard.ZstdCompressor().compress(layer)})
    rootfs = tar_of({f"{SITE}/torch/lib/libtorch_cuda.so": seeds()["mixed"]})
    return {"docker": docker, "oci": oci, "rootfs": rootfs, "docker.gz": gzip.compress(docker),
            "rootfs.zst": zstandard.ZstdCompressor(write_checksum=True).compress(rootfs)}


def _tar_spots(data: bytes) -> tuple[int, ...]:
    """Every 512-byte header's size, checksum and type fields (where tar keeps numbers)."""
    return tuple(spot for block in range(0, len(data), 512)
                 for spot in range(block + 100, block + 160, 4))


def _scan(data: bytes):
    return scan_tar_stream(io.BytesIO(data), "fuzz.tar", lambda path, buf: inspect_buffer(
        path, buf, SPARK))


@PROPERTY
@given(st.sampled_from(sorted(tar_seeds())).flatmap(
    lambda name: mutated(tar_seeds()[name], _tar_spots(tar_seeds()[name]))))
def test_a_mutated_tarball(data):
    bounded(_scan, data)


# --- OCI JSON ----------------------------------------------------------------------------------
def _oci_seed() -> tuple[dict, dict[str, bytes]]:
    manifest = {"layers": [{"digest": "sha256:" + "a" * 64}, {"digest": "sha256:" + "b" * 64}]}
    text = json.dumps(manifest).encode()
    name = "blobs/sha256/" + "c" * 64
    index = {"manifests": [{"digest": "sha256:" + "c" * 64,
                            "platform": {"architecture": "arm64"}}]}
    return index, {name: text}


@PROPERTY
@given(replaced_field(_oci_seed()[0]), st.sampled_from((None, b"{", b"[]", b"[[[[[[" * 400)))
def test_an_oci_index_with_any_field_replaced(index, blob):
    _, blobs = _oci_seed()
    if blob is not None:
        blobs = {name: blob for name in blobs}
    bounded(oci_layers, index, blobs, "fuzz.tar")


@PROPERTY
@given(json_values())
def test_an_oci_index_of_any_json(document):
    bounded(oci_layers, document, {}, "fuzz.tar")


def test_found_by_search_a_wheel_zipfile_fails_on_with_index_error():
    from edgevllm.common.errors import NotATarballError

    found = ROOT / "tests" / "fixtures" / "property-regressions" / \
        "wheel-extra-field-index-error.whl"
    with pytest.raises(NotATarballError, match="not a readable wheel"):
        scan_wheel(found)
