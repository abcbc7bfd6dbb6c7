"""The one reader of the records a build leaves in an image (lock, mods, verify, probe): the
label holding each one's JSON, else its file under /opt/edgevllm (``labels.HOME``).

The in-image probe script (probe/inimage_check.py) checks those files from inside a running
container; everything on the host reads them here.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from edgevllm.common import console, labels
from edgevllm.common.dataload import load_json
from edgevllm.common.errors import ConfigError, EngineError
from edgevllm.containers.docker import DockerEngine

RECORDS = labels.RECORDS
RECORD_DIR = labels.HOME


def _json_or_none(text: str, where: str) -> object | None:
    try:
        return load_json(text, where, ConfigError)
    except ConfigError:
        console.warn(f"{where} is not JSON; read as no record")
        return None


def label_records(ref: str, image_labels: dict[str, str]) -> dict[str, object]:
    """The records the image's labels hold (no container is created): key → JSON."""
    found = {}
    for key, (label, _) in RECORDS.items():
        if label in image_labels:
            found[key] = labels.label_record(image_labels, key)
            if found[key] is None:
                console.warn(f"label {label} of {ref} is not JSON; read as no record")
    return found


def read_records(engine: DockerEngine, ref: str, labels: dict[str, str]) -> dict[str, object]:
    """lock / mods / verify / probe from the image's labels, else from files in RECORD_DIR;
    None for a record the image has in neither."""
    records = label_records(ref, labels)
    missing = [key for key in RECORDS if key not in records]
    if missing:
        records.update(_records_from_files(engine, ref, missing))
    return {key: records.get(key) for key in RECORDS}


def read_image_record(engine: DockerEngine, image: str, path: str) -> dict | None:
    """One JSON record the build left at ``path`` in the image (the mods or warm record): None
    when the image has none, or when it is no JSON object (with a warning)."""
    from edgevllm.containers.docker import RunOptions

    proc = engine.run(RunOptions(image=image, remove=True, entrypoint="cat", command=[path]),
                      timeout=120)
    if proc.returncode != 0:
        return None
    found = _json_or_none(proc.stdout.decode(errors="replace"), f"{path} in {image}")
    if found is not None and not isinstance(found, dict):
        console.warn(f"{path} in {image} is no JSON object; read as no record")
        return None
    return found


def _records_from_files(engine: DockerEngine, ref: str, keys: list[str]) -> dict[str, object]:
    found: dict[str, object] = {}
    container = engine.create(ref)
    try:
        with tempfile.TemporaryDirectory(prefix="edgevllm-records-") as tmp:
            try:
                engine.copy_from(container, f"{RECORD_DIR}/.", Path(tmp))
            except EngineError:
                return found  # the image has no record folder: nothing to add
            for key in keys:
                for name in RECORDS[key][1]:
                    path = Path(tmp) / name
                    if path.is_file():
                        found[key] = _json_or_none(
                            path.read_text(errors="replace"), f"{RECORD_DIR}/{name} in {ref}"
                        )
                        break
    finally:
        engine.remove_container(container)
    return found
