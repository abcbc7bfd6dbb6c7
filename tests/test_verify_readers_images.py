"""Reading libraries straight out of docker-save tarballs and images, on the real Docker engine.

A tiny image is built FROM scratch with nvcc-built libraries and the real aarch64 libnvjpeg in
two layers; a third layer deletes a file and a folder (whiteouts) with a static helper, and a
later layer overrides a library. The saved archive is read as .tar, .tar.gz, .tar.zst, split
.tar.zst.partNNN + manifest (`inv publish`'s writer; damaged parts fail as in `inv load`),
repacked with zstd/gzip layer blobs and
in the old ``<id>/layer.tar`` layout, through ``docker save`` directly, and as a ``docker export``.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import zstandard

from edgevllm.common.errors import ArchGateFailed, ImageNotFoundError, IntegrityError
from edgevllm.containers.docker import BuildOptions, DockerEngine
from edgevllm.verify import scan_image, scan_tarball, verify, verify_image
from support.checks import present
from support.cuda_libs import aarch64_cuda_lib, cuobjdump_binary, nvcc_libs

pytestmark = pytest.mark.e2e  # builds and saves images on the real Docker engine

SITE = "opt/venv/lib/python3.12/site-packages"
RM_TOOL = r"""
#define _XOPEN_SOURCE 500
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
static int rm(const char *p, const struct stat *s, int f, struct FTW *w) { return remove(p); }
/* rmtool PATH... removes each PATH recursively; "-m DIR" removes DIR and makes it again (opaque) */
int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    int remake = !strcmp(argv[i], "-m") && ++i < argc;
    if (nftw(argv[i], rm, 8, FTW_DEPTH | FTW_PHYS)) return 1;
    if (remake && mkdir(argv[i], 0755)) return 1;
  }
  return 0;
}
"""
DOCKERFILE = """FROM scratch
COPY rmtool /rmtool
COPY layer1/ /
COPY layer2/ /
RUN ["/rmtool", "/opt/doomed/libgone.so", "/opt/gone_dir", "-m", "/opt/opaque"]
COPY layer3/ /
RUN ["/rmtool"]
"""
# The last step changes nothing: its layer is an empty tar (1024 zero bytes), as for thor's
# `pip uninstall flashinfer-cubin` when the closure has none; verify must stack it, not call the
# archive incomplete (it did, on the real thor image).
EXPECTED = {  # path → SASS arches once the layers are stacked
    f"{SITE}/vllm/_C.abi3.so": ["sm_121a"],
    f"{SITE}/torch/lib/libtorch_cuda.so": ["sm_120f"],
    "usr/lib/libnvjpeg.so.13": [
        "sm_75",
        "sm_80",
        "sm_86",
        "sm_89",
        "sm_90",
        "sm_100",
        "sm_103",
        "sm_107",
        "sm_110",
        "sm_120",
        "sm_121",
    ],
    "usr/lib/libover.so": ["sm_121a"],  # layer3 replaces layer1's sm_110a build
    "opt/opaque/libnew.so": ["sm_121f"],  # opt/opaque was emptied (opaque whiteout), then refilled
}


def _context(root: Path) -> None:
    libs = nvcc_libs()
    files = {
        f"layer1/{SITE}/vllm/_C.abi3.so": libs["sm_121a"],
        f"layer1/{SITE}/torch/lib/libtorch_cuda.so": libs["sm_120f"],
        "layer1/usr/lib/libover.so": libs["sm_110a"],
        "layer1/opt/doomed/libgone.so": libs["sm_110a"],
        "layer1/opt/doomed/libkept.txt": None,
        "layer2/usr/lib/libnvjpeg.so.13": aarch64_cuda_lib(),
        "layer2/opt/gone_dir/sub/libx.so": libs["sm_121f"],
        "layer3/usr/lib/libover.so": libs["sm_121a"],
        "layer1/opt/opaque/libold.so": libs["sm_110a"],
        "layer3/opt/opaque/libnew.so": libs["sm_121f"],
    }
    for name, source in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        if source is None:
            (root / name).write_text("kept\n")
        else:
            shutil.copyfile(source, root / name)
    (root / "rmtool.c").write_text(RM_TOOL)
    subprocess.run(
        ["gcc", "-static", "-O2", "-o", str(root / "rmtool"), str(root / "rmtool.c")], check=True
    )
    (root / "Dockerfile").write_text(DOCKERFILE)


@functools.lru_cache(maxsize=None)
def _image(work: Path) -> str:
    engine = DockerEngine()
    engine.check_daemon()
    context = work / "context"
    _context(context)
    digest = hashlib.sha256(DOCKERFILE.encode() + RM_TOOL.encode())
    for lib in sorted(nvcc_libs().values()) + [aarch64_cuda_lib()]:
        digest.update(lib.name.encode() + lib.read_bytes()[:4096])
    tag = f"edgevllm-test/archinspect:{digest.hexdigest()[:12]}"
    if not engine.image_exists(tag):
        lines: list[str] = []
        rc = engine.build(
            BuildOptions(context=context, dockerfile=context / "Dockerfile", tags=[tag]),
            lines.append,
        )
        assert rc == 0, "\n".join(lines[-30:])
    return tag


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> str:
    return _image(tmp_path_factory.mktemp("archimage"))


@pytest.fixture(scope="module")
def saved(image, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("saved") / "image.tar"
    with DockerEngine().save_stream([image]) as stream, open(out, "wb") as handle:
        shutil.copyfileobj(stream, handle)
    return out


def _arches(reports) -> dict[str, list[str]]:
    return {r.path: r.arches("sass") for r in reports if r.has_device_code}


def test_docker_save_tar(saved):
    assert _arches(scan_tarball(saved)) == EXPECTED


def test_gzip_and_zstd_tarballs(saved, tmp_path):
    gz = tmp_path / "image.tar.gz"
    with open(saved, "rb") as src, gzip.open(gz, "wb", compresslevel=1) as dst:
        shutil.copyfileobj(src, dst)
    zst = tmp_path / "image.tar.zst"
    with open(saved, "rb") as src, open(zst, "wb") as dst:
        zstandard.ZstdCompressor(level=1).copy_stream(src, dst)
    assert _arches(scan_tarball(gz)) == EXPECTED
    assert _arches(scan_tarball(zst)) == EXPECTED


def _publish(image: str, folder: Path):
    from edgevllm.image.publish import PublishOptions, publish

    return publish(
        DockerEngine(),
        PublishOptions(image=image, out_dir=folder, name="arch", part_size=1 << 20, threads=1),
    )


@pytest.mark.parametrize(
    "fault,needle", [("missing", "part is missing"), ("flipped", "sha256 mismatch")]
)
def test_damaged_parts_fail_as_inv_load_fails(image, tmp_path, fault, needle):
    """verify --tarball reads parts through the reader inv load uses: same error, same code."""
    from edgevllm.image.load import load

    result = _publish(image, tmp_path)
    part = result.part_paths[1]
    if fault == "missing":
        part.unlink()
    else:
        data = bytearray(part.read_bytes())
        data[len(data) // 2] ^= 0xFF
        part.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match=needle) as scanned:
        scan_tarball(result.manifest_path)
    with pytest.raises(IntegrityError, match=needle) as loaded:
        load(DockerEngine(), result.manifest_path)
    assert str(scanned.value) == str(loaded.value)
    assert scanned.value.exit_code == loaded.value.exit_code == 10


def _layer_blobs(saved: Path) -> tuple[list[str], dict[str, bytes]]:
    with tarfile.open(saved) as tar:
        manifest = json.load(present(tar.extractfile("manifest.json")))
        layers = manifest[0]["Layers"]
        return layers, {name: present(tar.extractfile(name)).read() for name in layers}


def _plain(blob: bytes) -> bytes:
    if blob[:2] == b"\x1f\x8b":
        return gzip.decompress(blob)
    if blob[:4] == b"\x28\xb5\x2f\xfd":
        return zstandard.ZstdDecompressor().stream_reader(io.BytesIO(blob)).read()
    return blob


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _repack(saved: Path, out: Path, codec, old_layout: bool) -> Path:
    """The same layers, recompressed with ``codec`` and named in the old or the OCI layout."""
    layers, blobs = _layer_blobs(saved)
    names = []
    with tarfile.open(out, "w") as tar:
        for index, layer in enumerate(layers):
            blob = codec(_plain(blobs[layer]))
            name = (
                f"{index:02d}layer/layer.tar"
                if old_layout
                else f"blobs/sha256/{hashlib.sha256(blob).hexdigest()}"
            )
            _add(tar, name, blob)
            names.append(name)
        _add(tar, "manifest.json", json.dumps([{"Config": "c.json", "Layers": names}]).encode())
    return out


@pytest.mark.parametrize(
    "codec,old_layout",
    [
        (lambda b: zstandard.ZstdCompressor().compress(b), False),
        (gzip.compress, False),
        (lambda b: b, True),
    ],
    ids=["oci-zstd-layers", "oci-gzip-layers", "old-layer-tar"],
)
def test_layer_formats(saved, tmp_path, codec, old_layout):
    repacked = _repack(saved, tmp_path / "repacked.tar", codec, old_layout)
    assert _arches(scan_tarball(repacked)) == EXPECTED


def test_whiteouts_and_overrides_are_honoured(saved):
    paths = {r.path for r in scan_tarball(saved)}
    assert "opt/doomed/libgone.so" not in paths
    assert "opt/gone_dir/sub/libx.so" not in paths
    assert "opt/opaque/libold.so" not in paths
    layers, blobs = _layer_blobs(saved)
    plain = [_plain(blob) for blob in blobs.values()]
    assert any(b".wh.libgone.so" in layer for layer in plain), "no whiteout recorded for libgone.so"
    assert any(b".wh..wh..opq" in layer for layer in plain), "no opaque whiteout for opt/opaque"


def test_scan_image_through_docker_save(image):
    assert _arches(scan_image(DockerEngine(), image)) == EXPECTED


def test_docker_export_rootfs(image, tmp_path):
    engine = DockerEngine()
    container = engine.create(image)
    try:
        out = tmp_path / "rootfs.tar"
        with engine.export_stream(container) as stream, open(out, "wb") as handle:
            shutil.copyfileobj(stream, handle)
    finally:
        engine.remove_container(container)
    assert _arches(scan_tarball(out)) == EXPECTED


def test_missing_image_and_bad_tarballs(tmp_path):
    with pytest.raises(ImageNotFoundError):
        scan_image(DockerEngine(), "edgevllm-test/no-such-image:0")
    not_tar = tmp_path / "notes.tar"
    not_tar.write_text("hello\n" * 200)
    with pytest.raises(IntegrityError, match="neither a tar, gzip nor zstd"):
        scan_tarball(not_tar)
    plain = io.BytesIO()
    with tarfile.open(fileobj=plain, mode="w") as tar:
        _add(tar, "usr/lib/data.bin", bytes(range(256)) * 400)
    squeezed = gzip.compress(plain.getvalue())
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(squeezed[: len(squeezed) // 2])
    with pytest.raises(IntegrityError, match="gzip stream is truncated"):
        scan_tarball(broken)


def test_verify_image_for_the_build_driver(image, tmp_path):
    out = tmp_path / "arch.json"
    verdict = verify_image(DockerEngine(), image, "spark", json_out=out)
    assert verdict.passed and json.loads(out.read_text())["passed"]
    with pytest.raises(ArchGateFailed, match="FAIL: image .* for thor"):
        verify_image(DockerEngine(), image, "thor", json_out=out)
    assert not json.loads(out.read_text())["passed"]  # the failing verdict is still written


def test_cuobjdump_cross_check_on_a_tarball(saved, monkeypatch):
    monkeypatch.setenv("EDGEVLLM_CUOBJDUMP", str(cuobjdump_binary()))
    verdict = verify("12.1a", tarball=saved, cuobjdump=True)
    assert verdict.cuobjdump_checked and verdict.passed, verdict.summary()
    assert not [lib.note for lib in verdict.libraries if lib.note]


def test_reads_what_inv_publish_writes(image, tmp_path):
    """The split .tar.zst.partNNN set and manifest from edgevllm.publish, read as it lies."""
    result = _publish(image, tmp_path)
    assert len(result.part_paths) > 2
    assert _arches(scan_tarball(result.manifest_path)) == EXPECTED
    assert _arches(scan_tarball(result.part_paths[0])) == EXPECTED


def test_oci_layout_without_docker_manifest(saved, tmp_path):
    """Layer order from index.json → manifest blob, as in an OCI archive (no manifest.json)."""
    oci = tmp_path / "oci.tar"
    with tarfile.open(saved) as src, tarfile.open(oci, "w") as dst:
        for member in src:
            if member.name != "manifest.json":
                dst.addfile(member, src.extractfile(member) if member.isfile() else None)
    assert _arches(scan_tarball(oci)) == EXPECTED
