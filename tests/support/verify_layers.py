"""Layers that stack like a real image's, holding real nvcc-built libraries (cuda_libs), for the
verify cache's tests: the lower layer holds five libraries; the ``middle`` overwrites one with
another library, one with a file that is no ELF, deletes one (whiteout) and empties a folder
(opaque); the ``top`` adds a library. ``save_archive`` wraps layers as ``docker save`` does
(OCI blobs named by diff id, manifest.json), loadable with ``docker load``."""

from __future__ import annotations

import hashlib
import json

from .cuda_libs import nvcc_libs
from .fake_rootfs import tar_of

SITE = "usr/local/lib/python3.12/dist-packages"
OVERWRITTEN = f"{SITE}/vllm/_C.abi3.so"  # by another library
NOT_ELF_NOW = f"{SITE}/torch/lib/libtorch_cuda.so"  # by a linker script
DELETED = f"{SITE}/gone/libgone.so"  # its folder whited out
HIDDEN = f"{SITE}/opq/libopq.so"  # its folder made opaque


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def layer_tars() -> dict[str, bytes]:
    """``{"lower": tar, "middle": tar, "top": tar}``."""
    libs = {name: path.read_bytes() for name, path in nvcc_libs().items()}
    lower = {OVERWRITTEN: libs["sm_121a"], NOT_ELF_NOW: libs["sm_110a"],
             f"{SITE}/flashinfer/libfi.so": libs["multi_gencode"], DELETED: libs["lz4"],
             HIDDEN: libs["sm_121"], "etc/notes.txt": b"not a library"}
    middle = {OVERWRITTEN: libs["sm_120a"], NOT_ELF_NOW: b"a linker script, not ELF\n"}
    whiteouts = [f"{SITE}/.wh.gone", f"{SITE}/opq/.wh..wh..opq"]
    top = {f"{SITE}/vllm/libnew.so": libs["ptx_compute_121a"]}
    return {"lower": tar_of(lower), "middle": tar_of(middle, whiteouts), "top": tar_of(top)}


def save_archive(layers: list[bytes], tag: str = "x:1", arch: str = "amd64") -> bytes:
    config = json.dumps({"architecture": arch, "os": "linux", "config": {},
                         "rootfs": {"type": "layers", "diff_ids": [sha(x) for x in layers]}})
    names = [f"blobs/sha256/{sha(b)[7:]}" for b in [config.encode(), *layers]]
    manifest = json.dumps([{"Config": names[0], "RepoTags": [tag], "Layers": names[1:]}])
    return tar_of({**dict(zip(names, [config.encode(), *layers], strict=True)),
                   "manifest.json": manifest.encode()})


def facts(reports) -> list:
    """Everything a library report holds, offsets and kernel names included."""
    return [(r.to_json(), r.unit_kernels, [(e.offset, e.stored_size, e.full_size)
                                          for e in r.entries]) for r in reports]
