"""Images for the inspect tests (inv diff, SBOM, provenance), built from the local Debian + Python
test image with the real engine. ``variant_image``: a venv holding one real PyPI wheel (six, at
the version asked) and the labels a built edgevllm image carries: the lock (the wheel pinned by
its sha256, one mod) and the mods record. Two variants differ in exactly one wheel and one mod.
``scratch_variant``: the same distribution files and labels FROM scratch (a few hundred KB, no
Python): small enough to publish in a test, read offline only."""

from __future__ import annotations

import hashlib
import json

from edgevllm.common.fsutil import sha256_file
from edgevllm.containers.docker import DockerEngine
from support.downloads import pypi_download
from support.inside_locks import lock_data
from support.publish_images import _build

PREFIX = "edgevllm-test-inside-"
SITE = "/opt/venv/lib/python3.11/site-packages"

VARIANT_DOCKERFILE = """FROM {base}
COPY {wheel} /tmp/wheels/{wheel}
RUN python3 -m venv /opt/venv && /opt/venv/bin/pip install -q --no-index --no-deps \\
    /tmp/wheels/{wheel} && rm -rf /tmp/wheels
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
"""
SCRATCH_DOCKERFILE = """FROM {source} AS src
FROM scratch
COPY --from=src {site}/ {site}/
"""


def variant_labels(six_version: str, wheel_sha256: str, wheel_name: str, mod_version: str
                   ) -> dict[str, str]:
    lock = lock_data(six=six_version, mod_version=mod_version)
    lock["closure"]["wheels"] = [{"name": "six", "version": six_version, "filename": wheel_name,
                                  "sha256": wheel_sha256}]
    mods = [{"name": "fastsafetensors", "version": mod_version, "outcome": "applied"}]
    return {"io.edgevllm.lock": json.dumps(lock, sort_keys=True),
            "io.edgevllm.mods": json.dumps(mods),
            "org.opencontainers.image.title": "edgevllm inspect test image"}


def variant_image(engine: DockerEngine, base: str, six_version: str, mod_version: str) -> str:
    wheel = pypi_download(f"six=={six_version}")
    labels = variant_labels(six_version, sha256_file(wheel), wheel.name, mod_version)
    text = VARIANT_DOCKERFILE.format(base=base, wheel=wheel.name)
    key = hashlib.sha256(repr((text, sorted(labels.items()))).encode()).hexdigest()[:10]
    tag = f"{PREFIX}variant:{six_version}-{key}"
    if not engine.image_exists(tag):
        _build(engine, text, {wheel.name: wheel.read_bytes()}, tag, labels)
    return tag


def scratch_variant(engine: DockerEngine, source: str) -> str:
    labels = engine.image_labels(source)
    text = SCRATCH_DOCKERFILE.format(source=source, site=SITE)
    key = hashlib.sha256(repr((text, engine.image_id(source))).encode()).hexdigest()[:10]
    tag = f"{PREFIX}scratch:{key}"
    if not engine.image_exists(tag):
        _build(engine, text, {}, tag, labels)
    return tag
