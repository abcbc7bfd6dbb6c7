"""A published image set's manifest and names: what ``inv publish`` writes and readers trust.

``<name>.manifest.json`` lists every part of a set with its size and sha256 (``ManifestModel``,
read and validated by ``read_manifest``: one line naming the file and the field on any problem);
a split set's parts are ``<file>.part000``, ``.part001``, ... (``part_name``, ``part_glob``,
``is_part_name``), written by image/parts.py, found by image/publish.py and recognised by
verify/diff.py through this module alone; ``manifest_name_for`` gives the manifest beside a
tarball or any of its parts. Reading the bytes the manifest describes (the part set, the checks,
the decompressed stream) is image/tarball.py's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from edgevllm.common.archives import read_file
from edgevllm.common.dataload import load_json
from edgevllm.common.errors import IntegrityError, MissingInputError
from edgevllm.common.schema import parse_model

SCHEMA_VERSION = 1
MAX_MANIFEST_BYTES = 16 << 20  # parts, tags and the image's records: real ones under 1 MiB
MAX_PARTS = 100_000  # parts of at least 1 MiB: a 97 GiB image at the smallest part size
MANIFEST_SUFFIX = ".manifest.json"
FORMAT_SUFFIX = {"zst": ".tar.zst", "gz": ".tar.gz", "tar": ".tar"}
ZSTD_WINDOW_LOGS = range(10, 32)  # ZSTD_WINDOWLOG_MIN .. ZSTD_WINDOWLOG_MAX (64-bit)


# --- the manifest ------------------------------------------------------------------------------
SHA256_HEX = r"^[0-9a-fA-F]{64}$"


class PartModel(BaseModel):
    """One part: its checksum is required and exact, so no field value can turn checking off."""

    model_config = ConfigDict(extra="forbid")
    file: str = Field(min_length=1)
    size: StrictInt = Field(ge=0)
    sha256: str = Field(pattern=SHA256_HEX)


class ManifestModel(BaseModel):
    """``<name>.manifest.json``; the image records (lock, mods, verify, probe) are free-form."""

    model_config = ConfigDict(extra="forbid")
    schema_version: int
    name: str
    format: str
    parts: list[PartModel]
    total_size: StrictInt = Field(ge=0)
    uncompressed_size: StrictInt = Field(ge=0)
    compression: dict | None = None
    image: dict
    labels: dict
    lock: Any = None
    mods: Any = None
    verify: Any = None
    probe: Any = None
    tool_version: str
    created: str


def read_manifest(path: Path) -> ManifestModel:
    """Parse and validate a manifest; one line naming the file and the field on any problem."""
    try:
        data = load_json(read_file(path, MAX_MANIFEST_BYTES, "the manifest", IntegrityError),
                         str(path), IntegrityError)
    except FileNotFoundError:
        raise MissingInputError(f"{path}: no such file; give the <name>.manifest.json that "
                                "inv publish wrote") from None
    except OSError as exc:
        raise IntegrityError(f"{path}: cannot read the manifest ({exc.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise IntegrityError(f"{path}: not a JSON manifest ({exc}); re-copy it") from None
    except RecursionError:
        raise IntegrityError(f"{path}: nested too deep to be a manifest; re-copy it") from None
    if not isinstance(data, dict):
        raise IntegrityError(f"{path}: not a tarball manifest (expected a JSON object)")
    parts = data.get("parts")
    if isinstance(parts, list) and len(parts) > MAX_PARTS:  # before each is validated
        raise IntegrityError(f"{path}: field 'parts': {len(parts)} parts, over the {MAX_PARTS} a "
                             "set may have (at least 1 MiB each); the manifest is not inv "
                             "publish's")
    model = parse_model(ManifestModel, data, str(path), IntegrityError)
    if model.schema_version != SCHEMA_VERSION:
        raise IntegrityError(
            f"{path}: schema_version {model.schema_version} is not supported "
            f"(this edgevllm reads {SCHEMA_VERSION}); upgrade edgevllm"
        )
    if model.format not in ("zst", "gz"):
        raise IntegrityError(f"{path}: field 'format': '{model.format}' is not zst or gz")
    if not model.parts:
        raise IntegrityError(f"{path}: field 'parts': lists no part")
    window = (model.compression or {}).get("window_log")
    if window is not None and (type(window) is not int or window not in ZSTD_WINDOW_LOGS):
        raise IntegrityError(f"{path}: field 'compression.window_log': {str(window)[:40]} is not "
                             "a zstd window (10 to 31); the manifest is not inv publish's")
    seen: set[str] = set()
    for part in model.parts:
        if Path(part.file).name != part.file:
            raise IntegrityError(f"{path}: field 'parts': '{part.file}' is not a plain file name")
        if part.file in seen:
            raise IntegrityError(f"{path}: field 'parts': '{part.file}' is listed twice; each "
                                 "part is read once")
        seen.add(part.file)
    if sum(p.size for p in model.parts) != model.total_size:
        raise IntegrityError(f"{path}: field 'total_size' does not match the sizes of the parts")
    return model


def check_stream_length(count: int, label: str) -> None:
    """What ``docker save`` gave must hold a tar (a header and the end blocks, 1,536 bytes at the
    least): an empty stream must not become a set that looks published."""
    if count < 3 * 512:
        raise IntegrityError(f"{label}: docker save gave {count} bytes, not an image archive; "
                             "nothing was published (check 'docker save' of the image by hand)")


# --- the parts' names ---------------------------------------------------------------------------
# A split set's part names, written (image/parts.py), found (image/publish.py) and recognised
# (verify/diff.py) through these: <file>.part000, .part001, ...
_PART_RE = re.compile(r"^(?P<base>.+)\.part\d{3,}\Z")


def part_name(name: str, index: int) -> str:
    """The file name of part ``index`` of the set whose whole file would be ``name``."""
    return f"{name}.part{index:03d}"


def part_glob(escaped_name: str) -> str:
    """A glob for every part of ``escaped_name`` (already glob-escaped)."""
    return f"{escaped_name}.part[0-9][0-9][0-9]*"


def is_part_name(name: str) -> bool:
    return _PART_RE.match(name) is not None



def manifest_name_for(tarball_name: str) -> str | None:
    """``x.tar.zst`` / ``x.tar.zst.part003`` / ``x.tar.gz`` → ``x.manifest.json``."""
    match = _PART_RE.match(tarball_name)
    base = match.group("base") if match else tarball_name
    for suffix in FORMAT_SUFFIX.values():
        if base.endswith(suffix):
            return base[: -len(suffix)] + MANIFEST_SUFFIX
    return None
