"""A mod's outcome against the wheels a new tree pins, decided by the build's own applier.

The mods are staged as a build stages them (``stage_mods``, nothing fetched) and each mod's
``edit`` steps are run by the in-image applier's ``apply_mod`` over a scratch folder holding,
of each wheel the mod names, its metadata folder (``DIST_INFO``) and the files its edits name:
the applier finds them through the RECORD as in the image and decides applies / already
upstream / not applicable (a range, the version named) / fails (the file and the anchor). Its
text edits touch only the scratch copies; no code of a wheel runs, the other step kinds (pip,
scripts, verification) are left to the build and named as such.

Wheels come from the JSON API (``pypi.pypi_url``) by their published sha256 into the cache
(``wheels/<sha256>/``); a version not pinned by the tree is taken from an ``==`` requirement of
a pinned wheel the mod names (nvidia-cutlass-dsl pins its libs-base and libs-cu13).
"""

from __future__ import annotations

import datetime as _dt
import re
import tempfile
import zipfile
from pathlib import Path
from urllib.parse import urljoin

from edgevllm.common.archives import check_name
from edgevllm.common.dataload import load_json
from edgevllm.common.errors import DownloadError, EdgeVllmError, SourceError
from edgevllm.common.http import stream_bounded
from edgevllm.inspect.inimage_dists import DIST_INFO
from edgevllm.mods import inimage_applier as applier
from edgevllm.mods.catalog import stage_mods
from edgevllm.specs.outcomes import ALREADY_APPLIED, APPLIED, FAILED, NOT_APPLICABLE
from edgevllm.track import pypi

WHEEL_MAX_BYTES = 1 << 30   # nvidia-cutlass-dsl-libs-cu13 4.4.2 for aarch64: about 80 MB
JUDGED = ("edit",)          # text edits: decided here; the rest is the build's
WORDS = {APPLIED: "applies", ALREADY_APPLIED: "already upstream",
         NOT_APPLICABLE: "not applicable", FAILED: "fails"}
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*==\s*([0-9][^\s;,]*)"
                  r"\s*(?:;.*)?$")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _wheel_rank(filename: str, arch: str) -> int | None:
    """Lower is better: a pure wheel, then the target's CPU (CPython 3.12), then its CPU."""
    if not filename.endswith(".whl"):
        return None
    if filename.endswith("-none-any.whl"):
        return 0
    if arch not in filename or "linux" not in filename:
        return None
    return 1 if "-cp312-" in filename else 2


def wheel_entry(name: str, version: str, arch: str = "aarch64") -> dict:
    """The JSON API's entry of ``name``'s wheel at ``version`` best for the target's CPU."""
    url = f"{pypi.pypi_url()}/{name}/json"
    body = bytearray()
    stream_bounded(url, body.extend, pypi.JSON_MAX_BYTES, f"PyPI's release list of {name}",
                   DownloadError, seconds=120, anywhere=True)
    data = load_json(bytes(body), url, SourceError)
    files = (data.get("releases") or {}).get(version) if isinstance(data, dict) else None
    ranked = sorted((rank, str(f.get("filename"))) for f in files or [] if isinstance(f, dict)
                    and (rank := _wheel_rank(str(f.get("filename", "")), arch)) is not None)
    if not ranked:
        raise SourceError(f"{url}: no wheel of {name} {version} for {arch}")
    entry = next(f for f in files or [] if f.get("filename") == ranked[0][1])
    if not re.fullmatch(r"[0-9a-f]{64}", str((entry.get("digests") or {}).get("sha256", ""))):
        raise SourceError(f"{url}: {entry['filename']} has no sha256")
    return dict(entry, url=urljoin(url, str(entry.get("url", ""))))


def wheel(name: str, version: str, arch: str = "aarch64") -> tuple[Path, int]:
    """The wheel in the cache (``wheels/<sha256>/``), fetched when missing and kept only with the
    published sha256; (its path, bytes downloaded now)."""
    entry = wheel_entry(name, version, arch)
    release = pypi.Release(version, check_name(entry["filename"], name, SourceError),
                           entry["url"], entry["digests"]["sha256"], int(entry.get("size") or 0),
                           _dt.datetime.now(_dt.timezone.utc))
    return pypi.fetch_file(release, "wheels", WHEEL_MAX_BYTES, f"the wheel {release.filename}")


def unpack(path: Path, dest: Path, wanted: list[str]) -> None:
    """``path``'s metadata folder and its files whose names end with one of ``wanted`` into
    ``dest``; names that climb out are refused. A file an earlier wheel wrote is kept: where two
    wheels install the same file (CuTe DSL's libs-base and libs-cu13), the one the mod's edit
    names first wins, as the mod's ``dist_files`` step makes it in the image."""
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                name = check_name(info.filename, path.name, SourceError)
                top = name.split("/", 1)[0]
                if info.is_dir() or not (top.endswith(DIST_INFO) or any(
                        name == w or name.endswith("/" + w) for w in wanted)):
                    continue
                if info.file_size > pypi.MEMBER_MAX_BYTES * 4:
                    raise SourceError(f"{path.name}: {name} is over "
                                      f"{pypi.MEMBER_MAX_BYTES * 4} bytes")
                out = dest / name
                if out.exists():
                    continue
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(zf.read(info))
    except (OSError, zipfile.BadZipFile) as exc:
        raise SourceError(f"{path.name}: not a readable wheel ({exc})") from None


def _pins_of(site: Path) -> dict[str, str]:
    """``==`` requirements of the wheels unpacked in ``site`` (any extra), by normalised name."""
    found: dict[str, str] = {}
    for meta in site.glob(f"*{DIST_INFO}/METADATA"):
        for line in meta.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("Requires-Dist:") and (m := _PIN.match(line[14:].strip())):
                found.setdefault(_norm(m[1]), m[2])
    return found


def _edited(mod: dict) -> list[str]:
    return [s["path"] for s in mod.get("steps", []) if s["kind"] in JUDGED and s.get("path")]


def _unpack_known(names: list[str], known: dict[str, str], site: Path, got: dict,
                  edited: list[str], arch: str) -> None:
    """The wheels of ``names`` whose version is known, unpacked into ``site`` (once each)."""
    for name in names:
        version = known.get(_norm(name))
        if version and name not in got["used"]:
            path, fetched = wheel(name, version, arch)
            got["downloaded"] += fetched
            unpack(path, site, edited)
            got["used"][name] = version


def _site_for(mod: dict, versions: dict[str, str], site: Path, env: applier.Env,
              arch: str) -> dict:
    """The wheels ``mod`` names, at the versions known, unpacked into ``site``: first those of
    its range, and the rest only where the applier's range check passes (it stops there
    otherwise, as in the image); {used, unknown, downloaded}."""
    known = {_norm(k): v for k, v in versions.items()}
    got: dict = {"used": {}, "downloaded": 0}
    ranged = list(mod.get("applies_to") or {})
    _unpack_known(ranged, known, site, got, _edited(mod), arch)
    if not applier._range_miss(env, mod.get("applies_to") or {}):
        names = applier._packages_named(mod)
        for _ in range(2):  # the pinned wheels, then those they pin with ==
            _unpack_known(names, known, site, got, _edited(mod), arch)
            known = {**_pins_of(site), **known}
    got["unknown"] = [n for n in ranged if n not in got["used"]]
    return got


def _judge(mod: dict, plan_dir: Path, versions: dict[str, str], arch: str) -> dict:
    edits = dict(mod, steps=[s for s in mod["steps"] if s["kind"] in JUDGED])
    left = sorted({s["kind"] for s in mod["steps"] if s["kind"] not in JUDGED})
    row = {"name": mod["name"], "left_to_build": left, "packages": {}, "steps": [],
           "downloaded": 0}
    with tempfile.TemporaryDirectory(prefix="edgevllm-modcheck-") as tmp:
        site = Path(tmp)
        env = applier.Env([str(site)], "python3", [], True, None)
        try:
            got = _site_for(edits, versions, site, env, arch)
        except EdgeVllmError as exc:
            return dict(row, outcome="unknown", verdict="unknown",
                        detail=f"no wheel to judge: {exc.message}")
        if got["unknown"]:
            return dict(row, outcome="unknown", verdict="unknown", packages=got["used"],
                        detail="the new tree pins no exact version of "
                               + ", ".join(got["unknown"]), downloaded=got["downloaded"])
        record = applier.apply_mod(env, plan_dir, edits)
    detail = record["detail"].replace(f"{site}/", "")
    where = [i for i, s in enumerate(mod["steps"]) if s["kind"] in JUDGED]  # the mod's indices
    steps = [dict(s, index=where[s["index"]], detail=s["detail"].replace(f"{site}/", ""))
             for s in record["steps"]]
    return dict(row, outcome=record["outcome"], verdict=WORDS[record["outcome"]],
                packages=record["packages"], detail=detail, steps=steps,
                downloaded=got["downloaded"])


def outcomes(names: list[str], target: str, versions: dict[str, str],
             arch: str = "aarch64") -> list[dict]:
    """Per mod among ``names`` with an edit step: the applier's outcome against the wheels at
    ``versions`` (package -> version the new tree installs)."""
    with tempfile.TemporaryDirectory(prefix="edgevllm-modplan-") as tmp:
        staged = stage_mods(names, target, Path(tmp), fetch=False)
        plan_path = staged.plan_path or Path(tmp) / "plan.json"
        plan = load_json(plan_path.read_bytes(), str(plan_path), SourceError)
        return [_judge(mod, Path(tmp), versions, arch) for mod in plan["mods"]
                if any(s["kind"] in JUDGED for s in mod["steps"])]
