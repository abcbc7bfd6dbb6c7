"""Python distributions on a synthetic filesystem, and the same filesystem as a ``docker save``
archive of two layers (the second deletes one distribution with a whiteout and adds another), for
the SBOM tests that need no engine."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Sequence
from pathlib import Path

SITE = "usr/lib/python3/dist-packages"
VENV = "opt/venv/lib/python3.11/site-packages"


def metadata(name: str, version: str) -> bytes:
    return f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nlong text\n".encode()


def dpkg_status(*packages: tuple[str, str, str, str]) -> bytes:
    """A dpkg status file in Debian's own shape (continuation lines, conffiles) of
    (name, version, architecture, status) entries."""
    return "".join(
        f"Package: {name}\nStatus: {status}\nPriority: optional\nArchitecture: {arch}\n"
        f"Version: {version}\nConffiles:\n /etc/{name}.conf 0123\nDescription: {name}\n"
        " a package\n .\n more text: Version: 9.9\n\n"
        for name, version, arch, status in packages).encode()


OS_RELEASE = b'PRETTY_NAME="Debian GNU/Linux 13 (trixie)"\nID=debian\nVERSION_CODENAME=trixie\n'
INSTALLED = "install ok installed"
LAYER1 = {
    f"{SITE}/six-1.16.0.dist-info/METADATA": metadata("six", "1.16.0"),
    f"{SITE}/six-1.16.0.dist-info/RECORD": b"six.py,sha256=abc,10\n",
    f"{SITE}/six.py": b"# six\n",
    f"{SITE}/Old_Pkg.egg-info/PKG-INFO": metadata("Old_Pkg", "0.1"),
    f"{SITE}/flat-2.0.egg-info": metadata("flat", "2.0"),
    f"{SITE}/nometa-1.0.dist-info/RECORD": b"",  # no METADATA: not a distribution
    f"{VENV}/idna-3.10.dist-info/METADATA": metadata("idna", "3.10"),
    f"{VENV}/idna-3.10.dist-info/RECORD": b"idna/__init__.py,,\n",
    # vendored inside a package: part of that package, not a distribution of its own
    f"{VENV}/pip/_vendor/site-packages/inner-1.0.dist-info/METADATA": metadata("inner", "1.0"),
    "usr/lib/os-release": OS_RELEASE,
    "var/lib/dpkg/status": dpkg_status(("libc6", "2.41-12", "amd64", INSTALLED),
                                       ("curl", "8.14.1-2", "amd64", INSTALLED)),
}
# The second layer removes idna and installs six 1.17.0 over 1.16.0; it removes curl (its
# config files stay) and installs zlib1g.
LAYER2_FILES = {
    "var/lib/dpkg/status": dpkg_status(("libc6", "2.41-12", "amd64", INSTALLED),
                                       ("curl", "8.14.1-2", "amd64", "deinstall ok config-files"),
                                       ("zlib1g", "1:1.3.dfsg+really1.3.1-1", "amd64", INSTALLED)),
    f"{SITE}/six-1.17.0.dist-info/METADATA": metadata("six", "1.17.0"),
    f"{SITE}/six-1.17.0.dist-info/RECORD": b"six.py,sha256=def,10\n",
}
LAYER2_WHITEOUTS = [f"{VENV}/.wh.idna-3.10.dist-info", f"{SITE}/.wh.six-1.16.0.dist-info"]


def write_tree(root: Path, files: dict[str, bytes]) -> Path:
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    return root


def final_files() -> dict[str, bytes]:
    files = {k: v for k, v in LAYER1.items() if "idna" not in k and "six-1.16" not in k}
    return {**files, **LAYER2_FILES}


def tar_of(entries: dict[str, bytes], whiteouts: Sequence[str] = ()) -> bytes:
    """A plain tar of regular files (and empty whiteout markers), in order."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path, data in list(entries.items()) + [(w, b"") for w in whiteouts]:
            info = tarfile.TarInfo(path)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def docker_save_archive(labels: dict[str, str] | None = None, corrupt_layer: bool = False
                        ) -> tuple[bytes, str]:
    """(the archive, the image id): OCI-style blobs, manifest.json naming config and layers."""
    layers = [tar_of(LAYER1), tar_of(LAYER2_FILES, LAYER2_WHITEOUTS)]
    config = json.dumps({"config": {"Labels": labels or {}},
                         "rootfs": {"type": "layers",
                                    "diff_ids": ["sha256:" + sha(x) for x in layers]}}).encode()
    names = [f"blobs/sha256/{sha(b)}" for b in [config] + layers]
    if corrupt_layer:  # the blob keeps its name; its bytes change
        layers[1] = layers[1].replace(b"six.py,sha256=def", b"six.py,sha256=XYZ")
    blobs = dict(zip(names, [config] + layers, strict=True))
    manifest = json.dumps([{"Config": names[0], "RepoTags": ["x:1"], "Layers": names[1:]}])
    return tar_of({**blobs, "manifest.json": manifest.encode()}), "sha256:" + sha(config)
