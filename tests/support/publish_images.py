"""Images for the publish / load / push tests, built locally from the Debian + Python test image.

``small_image``: ~40 MB of real content (Python packages and shared libraries copied out of the
base image) with the records a built edgevllm image carries: lock, verify and probe as labels,
mods as a file under /opt/edgevllm. Cached in the engine under a tag keyed by its inputs.
``unique_image``: a few-MB image with one random file, different on every call, for tests that
need an image nobody else has (registry collisions, remove-and-pull round trips).
``derived_image``: a new image on top of another (shares all its layers, adds one of its own).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from edgevllm.containers.docker import BuildOptions, DockerEngine

from .platforms import multiarch_libdir, native_arch, native_platform

PREFIX = "edgevllm-test-publish-"
LOCK = {"schema_version": 1, "target": "spark", "packages": {"torch": "2.13.0"}}
VERIFY = {"target": "spark", "passed": True, "libraries": 12, "failures": 0}
PROBE = {"level": 1, "passed": True, "vllm": "0.0.0+test"}
MODS = [{"name": "fastsafetensors", "version": "0.3.2", "status": "applied"}]

class NoSaveEngine(DockerEngine):
    """The real engine with ``docker save`` taken away: a warm publish must not need it."""

    def save_stream(self, refs):
        raise AssertionError(f"docker save {refs} was called")


SMALL_DOCKERFILE = """FROM {base} AS src
FROM scratch
COPY --from=src /usr/lib/python3/dist-packages/ /usr/lib/python3/dist-packages/
COPY --from=src {libdir}/libpython3.11.so.1.0 \\
    {libdir}/libcrypto.so.3 {libdir}/
COPY mods.json /opt/edgevllm/mods.json
"""


def records_labels(extra: dict[str, str] | None = None) -> dict[str, str]:
    labels = {
        "io.edgevllm.lock": json.dumps(LOCK, sort_keys=True),
        "io.edgevllm.verify": json.dumps(VERIFY, sort_keys=True),
        "io.edgevllm.probe": json.dumps(PROBE, sort_keys=True),
        "org.opencontainers.image.title": "edgevllm test image",
    }
    return {**labels, **(extra or {})}


def _build(
    engine: DockerEngine,
    dockerfile_text: str,
    files: dict[str, bytes],
    tag: str,
    labels: dict[str, str],
) -> str:
    with tempfile.TemporaryDirectory(prefix=PREFIX) as tmp:
        context = Path(tmp)
        (context / "Dockerfile").write_text(dockerfile_text)
        for name, data in files.items():
            (context / name).write_bytes(data)
        lines: list[str] = []
        code = engine.build(
            BuildOptions(
                context=context,
                dockerfile=context / "Dockerfile",
                platform=native_platform(),   # the bases are this host's
                tags=[tag],
                labels=labels,
            ),
            lines.append,
        )
        if code != 0:
            raise RuntimeError(f"building {tag} failed:\n" + "\n".join(lines[-30:]))
    return tag


def small_image(engine: DockerEngine, base: str) -> str:
    """Tag of the ~40 MB records-carrying test image (built once, then reused)."""
    text = SMALL_DOCKERFILE.format(base=base, libdir=multiarch_libdir(native_arch()))
    labels = records_labels()
    key = hashlib.sha256(repr((text, sorted(labels.items()), MODS)).encode()).hexdigest()[:10]
    tag = f"{PREFIX}small:{key}"
    if not engine.image_exists(tag):
        _build(engine, text, {"mods.json": json.dumps(MODS).encode()}, tag, labels)
    return tag


def unique_image(engine: DockerEngine, name: str, labels: dict[str, str] | None = None) -> str:
    """A new image (a random 2 MB file FROM scratch) tagged ``edgevllm-test-publish-<name>``."""
    token = os.urandom(6).hex()
    tag = f"{PREFIX}{name}:{token}"
    text = "FROM scratch\nCOPY blob /blob\n"
    return _build(engine, text, {"blob": os.urandom(2 << 20)}, tag, labels or {})


def derived_image(engine: DockerEngine, base: str, name: str) -> str:
    """A new image FROM ``base`` plus one random 1 MB layer: it shares every layer of ``base``."""
    tag = f"{PREFIX}{name}:{os.urandom(6).hex()}"
    text = f"FROM {base}\nCOPY extra /opt/extra\n"
    return _build(engine, text, {"extra": os.urandom(1 << 20)}, tag, {})


def remove_everything(engine: DockerEngine, image_id: str) -> None:
    """Remove an image under all its tags (and so the image itself)."""
    if not engine.image_exists(image_id):
        return
    for ref in engine.image_inspect(image_id).get("RepoTags") or []:
        engine.remove_image(ref, force=True)
    engine.remove_image(image_id, force=True)
