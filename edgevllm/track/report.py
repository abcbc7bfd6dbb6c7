"""``inv track``: what a newer vLLM release means for an image, before building it.

``track(start, to, ...)`` reads what the image is built from (a spec or a lock: its target, its
vLLM release, mods and picks), picks the release ``--to`` names by the bump rule (final, not
yanked, uploaded at least ``min_age_days`` ago: ``pypi.pick``), fetches both releases' sdists by
their published sha256 and compares the two trees item by item: source patches (the build's
``apply_patch``), mods (their declared ranges against the versions the build would install, and
their edits judged by the build's applier on the new pins' wheels: ``modcheck``),
pins, the kernel plan (``sources/plan`` in its sandbox, after the patches), cherry-picks and the
mode (``choose_mode``, asked through ``buildspec.resolve``). Data only: nothing of either tree
runs on the host but its CMake, in the plan's sandbox. Cherry-picks: whether upstream merged one
is not known without GitHub; the report says so (``NO_GITHUB``) and keeps them.

Exit codes (the report's outcome; an error exits with its class's code, 1-12):
``NOTHING_TO_DO`` 0, ``REBUILD_RECOMMENDED`` 20, ``FIX_BROKEN`` 21.
"""

from __future__ import annotations

import datetime as _dt
import re
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from edgevllm.builder.modes import builder_of
from edgevllm.common.errors import EdgeVllmError, SpecError
from edgevllm.specs.buildspec import BuildSpec, SourceSpec, load_spec, load_spec_file, resolve
from edgevllm.specs.lock import Lock, read_lock
from edgevllm.specs.moderule import release_of
from edgevllm.specs.outcomes import ALREADY_APPLIED, APPLIED, FAILED, NOT_APPLICABLE
from edgevllm.specs.targets import load_target
from edgevllm.track import facts, gitref, modcheck, pypi

NOTHING_TO_DO = 0         # no newer release passes the bump rule: the image is current
REBUILD_RECOMMENDED = 20  # a newer release, and every fix applies or retires cleanly
FIX_BROKEN = 21           # a newer release breaks a fix (a patch fails, a needed arch is lost)
# A release, with at most a local label (a wheel's 0.33.0+cu130): not a pre-release, a dev
# build or a branch named after one (v0.33.0rc1, 0.33.1.dev12, v0.33.0-fix are not 0.33.0).
_RELEASE = re.compile(r"^v?(\d+\.\d+\.\d+(?:\.post\d+)?)(?:\+[0-9A-Za-z.]+)?\Z")
NO_GITHUB = facts.NO_GITHUB


@dataclass
class Start:
    """What the image is built from: the spec (a lock's as a spec) and its vLLM release."""

    spec: BuildSpec
    release: str
    origin: str
    picks: list[tuple[str, str | None]] = field(default_factory=list)  # (as written, head SHA)
    locked_packages: dict[str, str] = field(default_factory=dict)


def start_of(source: str | None, target: str | None) -> Start:
    """``--from``: a lock (a name with 'lock' in it) or a spec file; none: the target's
    default spec."""
    if source and "lock" in Path(source).name:
        return _from_lock(read_lock(source), source)
    spec = load_spec_file(Path(source)) if source else load_spec(target)
    release = release_of(spec) or _release_word(spec.vllm.ref or "")
    if release is None:
        raise SpecError(f"{source or 'the spec'}: vLLM {spec.vllm.describe()} is not a release; "
                        "inv track compares released sdists (give --from a spec or lock of one)")
    picks = [(p, p.lower() if re.fullmatch(r"[0-9a-fA-F]{40}", p) else None)
             for p in spec.vllm.cherry_picks]
    return Start(spec, release, source or f"target {spec.target} (default spec)", picks)


def _release_word(text: str) -> str | None:
    found = _RELEASE.match(text)
    return found[1] if found else None


def _from_lock(lock: Lock, origin: str) -> Start:
    wheel = lock.closure.wheel("vllm") if lock.closure else None
    version = (lock.vllm.version if lock.vllm else None) or (wheel.version if wheel else "")
    release = _release_word(version)
    if release is None or not lock.target:
        raise SpecError(f"{origin}: the lock names no vLLM release and target (version "
                        f"'{version}'); inv track needs a lock of a released vLLM")
    picks: list[tuple[str, str | None]] = [(p.spec, p.head_sha) for p in lock.vllm.picks
                                            if not p.skipped] if lock.vllm else []
    mods = [m.name for m in lock.mods if not m.name.startswith("patch:")]
    spec = BuildSpec(target=lock.target, mods=mods,
                     vllm=SourceSpec(ref=f"v{release}", cherry_picks=[p for p, _ in picks]))
    return Start(spec, release, origin, picks, dict(lock.packages))


@dataclass
class Side:
    version: str
    tree: Path
    pins: dict[str, str]
    exact: dict[str, str]
    patches: list[facts.PatchVerdict]
    plan: dict | None
    plan_error: str
    plan_gap: str
    refused: str  # the build's gate on the tree's requirement files, where it refuses them
    downloaded: int
    bytes_read: int
    seconds: float


def _side(release: pypi.Release | gitref.GitTree, root: Path, target,
          installed: dict[str, str]) -> Side:
    """One tree's facts: a release's sdist (PyPI), or a commit ``--to REF`` named (git)."""
    began = time.monotonic()
    if isinstance(release, gitref.GitTree):
        tree, label = root / release.commit, f"{release.asked} ({release.commit[:12]}, git)"
        downloaded, read = release.fill(tree)
    else:
        tree, label = root / release.version, f"vllm-{release.version} (sdist)"
        downloaded, read = pypi.release_tree(release, tree)
    try:  # the build's gate on the tree's requirement files: a refusal is a finding here
        lines: list[str] | None = facts.requirement_lines(tree)
        refused = ""
    except EdgeVllmError as exc:
        lines, refused = None, exc.message
    exact = {**facts.exact_versions(lines or []), **installed}
    patches = facts.apply_patches(tree, target, release.version)
    plan, error, gap = facts.plan_or_error(tree, target, exact.get("torch", ""))
    named = _namer(tree, label)
    for patch in patches:
        patch.detail = named(patch.detail)
    return Side(release.version, tree, facts.pins(tree, lines), exact, patches, plan,
                named(error), named(gap), named(refused), downloaded, read,
                time.monotonic() - began)


def _namer(tree: Path, label: str):
    """A message about the scratch copy, naming the release's sdist (or the git commit)
    instead."""
    return lambda text: text.replace(f"{tree}/", f"{label}: ").replace(str(tree), label)


def _installed(spec: BuildSpec) -> dict[str, str]:
    """What the build installs over the tree's pins: the target's and the spec's packages."""
    eff = resolve(spec)
    out = {name.lower(): version for name, version in eff.packages.items()}
    out["torch"] = eff.torch.version or out.get("torch", "")
    return {k: v for k, v in out.items() if v}


def _mode(spec: BuildSpec, version: str, picks: list[str],
          ref: gitref.GitTree | None = None) -> dict:
    source = ({"ref": f"v{version}"} if ref is None else
              {"repo": ref.repo, "ref": None if ref.pr else ref.commit, "pr": ref.pr})
    new = spec.model_copy(update={"vllm": spec.vllm.model_copy(
        update={**source, "cherry_picks": picks}), "mode_from_lock": False})
    try:  # the one rule, asked as the build asks it (buildspec.resolve: choose_mode)
        eff = resolve(new, None, builder_of(None, load_target(spec.target)))
    except EdgeVllmError as exc:
        return {"mode": "refused", "why": exc.message}
    return {"mode": eff.mode, "why": eff.mode_reason}


def track(start: Start, to: str = "latest", min_age_days: int = 7,
          now: _dt.datetime | None = None) -> dict:
    """The report (a JSON-ready dict with ``exit_code``) for ``start`` (``start_of``) against
    ``--to``."""
    began = time.monotonic()
    now = now or _dt.datetime.now(_dt.timezone.utc)
    if not gitref.is_release_word(to):
        return dict(_against_ref(start, to), seconds=round(time.monotonic() - began, 2))
    found = pypi.releases("vllm")
    chosen = pypi.pick(found, to, start.release, now, min_age_days)
    head = {"from": {"origin": start.origin, "target": start.spec.target,
                     "vllm": start.release},
            "rule": {"to": to, "min_age_days": min_age_days}}
    if chosen is None or chosen.version == start.release:
        return dict(head, to=None, exit_code=NOTHING_TO_DO, verdict="nothing to do: no newer "
                    f"vLLM release {min_age_days}+ days old than {start.release}",
                    seconds=round(time.monotonic() - began, 2))
    old = found.get(start.release)
    if old is None:
        raise SpecError(f"{start.origin}: vLLM {start.release} has no sdist on PyPI to compare")
    header = {"vllm": chosen.version, "sha256": chosen.sha256,
              "uploaded": chosen.uploaded.isoformat(), "age_days": round(chosen.age_days(now), 1)}
    return dict(head, **_compare(start, old, chosen, header),
                seconds=round(time.monotonic() - began, 2))


def _against_ref(start: Start, to: str) -> dict:
    """``--to REF``: both trees from the git mirror of the spec's repository (the start at its
    ref, the new one at REF), as the build fetches them; the bump rule is for releases only."""
    new = gitref.resolve(to, start.spec.vllm.repo)
    old = gitref.resolve(start.spec.vllm.ref or f"v{start.release}", start.spec.vllm.repo)
    head = {"from": {"origin": start.origin, "target": start.spec.target,
                     "vllm": start.release, "commit": old.commit},
            "rule": {"to": to, "min_age_days": None,
                     "note": "a git ref: the bump rule (a release, N days old) is not applied"}}
    if new.commit == old.commit:
        return dict(head, to=None, exit_code=NOTHING_TO_DO, verdict=f"nothing to do: {to} is "
                    f"{new.commit[:12]}, the commit the image is built from")
    header = {"vllm": new.version, "ref": to, "commit": new.commit, "repo": new.repo,
              "from_cache": new.cached, "what": gitref.describe(new)}
    return dict(head, **_compare(start, old, new, header))


def _compare(start: Start, old_release: pypi.Release | gitref.GitTree,
             new_release: pypi.Release | gitref.GitTree, header: dict) -> dict:
    target = load_target(start.spec.target)
    installed = _installed(start.spec)
    with tempfile.TemporaryDirectory(prefix="edgevllm-track-") as tmp:
        old = _side(old_release, Path(tmp), target, {**installed, **start.locked_packages})
        new = _side(new_release, Path(tmp), target, installed)
    names = resolve(start.spec).mods
    mods = [facts.mod_verdict(name, old.exact, new.exact) for name in names]
    judged = {o["name"]: o for o in modcheck.outcomes(names, start.spec.target, new.exact)}
    ref = new_release if isinstance(new_release, gitref.GitTree) else None
    picks, kept = _picks(start, new_release.version, ref)
    report: dict[str, object] = {
        "to": header,
        "patches": [_patch_row(o, n) for o, n in zip(old.patches, new.patches,
                                                                    strict=True)],
        "mods": [dict(asdict(m), applier=judged.get(m.name)) for m in mods],
        "pins": _pin_rows(old, new, target, installed),
        "plan": {"changes": facts.plan_changes(old.plan or {}, new.plan or {}),
                 "old_error": old.plan_error, "new_error": new.plan_error,
                 "old_gap": old.plan_gap, "new_gap": new.plan_gap},
        "requirements": {"old_refused": old.refused, "new_refused": new.refused},
        "picks": picks,
        "mode": {"old": _mode(start.spec, old.version, [p for p, _ in start.picks]),
                 "new": _mode(start.spec, new.version, kept, ref)},
        "figures": {"old_seconds": round(old.seconds, 2), "new_seconds": round(new.seconds, 2),
                    "bytes_downloaded": old.downloaded + new.downloaded + sum(
                        o["downloaded"] for o in judged.values()),
                    "bytes_read": old.bytes_read + new.bytes_read},
    }
    broken = _broken(report)
    report["broken"] = broken
    report["exit_code"] = FIX_BROKEN if broken else REBUILD_RECOMMENDED
    report["verdict"] = ("a fix is broken: " + "; ".join(broken) if broken else
                         f"rebuild recommended: vLLM {new_release.version}"
                         + (f" ({ref.asked})" if ref else ""))
    return report


def _picks(start: Start, version: str, ref: gitref.GitTree | None = None
           ) -> tuple[list[dict], list[str]]:
    """Each pick's row, and the picks a bump keeps (all but those the git cache shows merged)."""
    rows, kept = [], []
    for text, sha in start.picks:
        merged, retire = facts.pick_verdict(start.spec.vllm.repo, sha, version,
                                            ref.commit if ref else None)
        rows.append({"pick": text, "merged": merged, "retire": retire})
        if not retire:
            kept.append(text)
    return rows, kept


def _patch_row(old: facts.PatchVerdict, new: facts.PatchVerdict) -> dict:
    return {"name": new.name, "old": old.outcome, "new": new.outcome, "detail": new.detail,
            "retire": old.outcome == APPLIED and new.outcome == NOT_APPLICABLE}


def _pin_rows(old: Side, new: Side, target, installed: dict[str, str]) -> list[dict]:
    rows = []
    for label, where in facts.PINS:
        was, now = old.pins[label], new.pins[label]
        if label == "CUDA" and was == now == facts.NOT_PINNED:
            was = now = f"target {target.cuda_version} (the tree pins none)"
        package = where.partition(":")[2] if where.startswith("req:") else ""
        rows.append({"pin": label, "old": was, "new": now, "changed": was != now,
                     "installed": installed.get(package, "")})
    return rows


def _broken(report: dict) -> list[str]:
    out = [f"patch {p['name']} fails: {p['detail']}" for p in report["patches"]
           if p["new"] == FAILED]
    plan = report["plan"]
    out += [f"mod {m['name']} fails: {m['applier']['detail']}" for m in report["mods"]
            if (m.get("applier") or {}).get("outcome") == FAILED]
    out += [f"the kernel plan: {plan[key]}" for key in ("new_error", "new_gap") if plan[key]]
    refused = report["requirements"]["new_refused"]
    return out + ([f"the build refuses the requirement files: {refused}"] if refused else [])


def retired(report: dict) -> dict[str, list[str]]:
    """What a bump drops: mods whose range no longer holds, picks the new release has, patches
    upstream made unnecessary."""
    return {"mods": [m["name"] for m in report.get("mods", []) if m["verdict"] == "retire"
                     or (m.get("applier") or {}).get("outcome") == ALREADY_APPLIED],
            "picks": [p["pick"] for p in report.get("picks", []) if p["retire"]],
            "patches": [p["name"] for p in report.get("patches", []) if p["retire"]]}
