"""The SBOM and signed statement pushed beside an image in its registry.

They travel as a one-layer image tagged ``<repo>:sha256-<hex>.att`` (the tag convention cosign
uses for attestations: the pushed manifest's digest, ``:`` as ``-``), holding
``/edgevllm/sbom.cdx.json`` and ``/edgevllm/provenance.dsse.json``. It is made with ``docker
import`` and pushed with ``docker push``, so credentials stay with docker as for every push.
Fetch them with ``docker create`` + ``docker cp`` (docs/inside.md).
"""

from __future__ import annotations

import io
import re
import tarfile
import tempfile
from pathlib import Path

from edgevllm.common.errors import ConfigError
from edgevllm.containers.docker import DockerEngine
from edgevllm.inspect.provenance import artefact_paths

FOLDER = "edgevllm"
NAMES = ("sbom.cdx.json", "provenance.dsse.json")
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}\Z")


def attachment_tag(dest: str, digest: str) -> str:
    """``registry/repo`` + ``sha256:abc…`` → ``registry/repo:sha256-abc….att``."""
    if not _DIGEST_RE.match(digest):
        raise ConfigError(f"'{digest}' is not a sha256 manifest digest")
    return f"{dest}:{digest.replace(':', '-')}.att"


def _rootfs(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        folder = tarfile.TarInfo(FOLDER)
        folder.type, folder.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(folder)
        for name, data in files.items():
            info = tarfile.TarInfo(f"{FOLDER}/{name}")
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def push_attachment(engine: DockerEngine, dest: str, digest: str, stem: Path) -> tuple[str, str]:
    """Push the SBOM (and the statement, when signed) for the image pushed as ``dest@digest``;
    returns (the attachment's ref, its digest)."""
    sbom_path, envelope_path = artefact_paths(stem)
    if not sbom_path.is_file():
        raise ConfigError(f"--attach: {sbom_path} not found; run inv sbom (and inv sign) first")
    files = {NAMES[0]: sbom_path.read_bytes()}
    if envelope_path.is_file():
        files[NAMES[1]] = envelope_path.read_bytes()
    ref = attachment_tag(dest, digest)
    with tempfile.TemporaryDirectory(prefix="edgevllm-attach-") as tmp:
        rootfs = Path(tmp) / "attach.tar"
        rootfs.write_bytes(_rootfs(files))
        engine.import_rootfs(rootfs, ref, changes=[f"LABEL io.edgevllm.attached-to={digest}"])
    try:
        return ref, engine.push(ref)
    finally:
        engine.remove_image(ref)
