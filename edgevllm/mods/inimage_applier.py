"""The mod applier: applies a staged plan of mods to one Python environment and records the outcome.

SELF-CONTAINED ON PURPOSE: python stdlib only (3.10+). It is copied into the build context and run
by the image's own ``python3`` at build time, and by ``inv mods-apply`` (possibly with another
interpreter via ``--python``) on stock images. Do not import edgevllm or any third-party package.

    python3 inimage_applier.py apply --plan plan.json [--record mods.json] [--site-packages DIR]
                             [--mod NAME]... [--pip-find-links DIR] [--pip-no-index]

Per mod, one outcome:
  applied          something was changed, and the mod's verification passed
  already-applied  every step found its work done; re-running changes nothing
  not-applicable   an installed version is outside the mod's ``applies_to`` (the version is named)
  failed           a file is not what the mod expects (mod, package version, file, anchor named),
                   a step or the verification failed; the exit code is then 1
Files are found through the installed distributions (their RECORD), never a fixed path.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import ctypes
import datetime
import fnmatch
import hashlib
import importlib.metadata as im
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

APPLIER_VERSION = "1"
OUTCOMES = ("applied", "already-applied", "not-applicable", "failed")
DEFAULT_CONSTRAINED = ("torch", "torchvision", "torchaudio", "triton")


# --- version specifiers --------------------------------------------------------------------------
def _load_packaging():
    """``packaging`` if the environment has it, else pip's vendored copy, else None (fallback)."""
    for name in ("packaging", "pip._vendor.packaging"):
        try:
            specifiers = __import__(f"{name}.specifiers", fromlist=["SpecifierSet"])
            version = __import__(f"{name}.version", fromlist=["Version"])
            return specifiers.SpecifierSet, version.Version
        except ImportError:
            continue
    return None


def _release(text: str) -> tuple:
    """Fallback: the numeric release part of a version, padded for comparison."""
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", text)
    parts = [int(p) for p in match.group(1).split(".")] if match else [0]
    return tuple(parts + [0] * (6 - len(parts)))


def _fallback_contains(spec: str, version: str) -> bool:
    """A small specifier check for images without ``packaging`` (pre/post releases ignored)."""
    have = _release(version)
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        match = re.match(r"(~=|==|!=|>=|<=|>|<)\s*(\S+)", clause)
        if not match:
            raise ValueError(f"invalid version specifier '{clause}'")
        op, want_text = match.groups()
        if op in ("==", "!=") and want_text.endswith(".*"):
            prefix = _release(want_text[:-2])[: want_text.count(".")]
            equal = have[: len(prefix)] == prefix
            ok = equal if op == "==" else not equal
        else:
            want = _release(want_text)
            ok = {
                "==": have == want,
                "!=": have != want,
                ">=": have >= want,
                "<=": have <= want,
                ">": have > want,
                "<": have < want,
                "~=": have >= want
                and have[: max(1, want_text.count("."))] == want[: max(1, want_text.count("."))],
            }[op]
        if not ok:
            return False
    return True


def version_in(spec: str, version: str) -> bool:
    """Whether ``version`` satisfies the specifier set ``spec`` (empty spec: always)."""
    if not spec.strip():
        return True
    loaded = _load_packaging()
    if loaded is None:
        return _fallback_contains(spec, version)
    specifier_set, version_cls = loaded
    return specifier_set(spec).contains(version_cls(version), prereleases=True)


# --- the environment -----------------------------------------------------------------------------
def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class StepFailed(Exception):
    """A step could not do its work; the message names what was expected and what was found."""


class Env:
    """The Python environment mods are applied to: installed distributions and how to run pip."""

    def __init__(
        self,
        site_packages: list[str],
        python: str,
        find_links: list[str],
        no_index: bool,
        env_file: Path | None,
    ):
        self.site_packages = site_packages
        self.python = python
        self.find_links = find_links
        self.no_index = no_index
        self.env_file = env_file

    def dists(self) -> dict[str, im.Distribution]:
        """Installed distributions by normalised name (first on the path wins, like import)."""
        found: dict[str, im.Distribution] = {}
        everywhere = im.distributions(path=self.site_packages) if self.site_packages \
            else im.distributions()
        for dist in everywhere:
            name = dist.metadata["Name"]
            if name and _norm(name) not in found:
                found[_norm(name)] = dist
        return found

    def version(self, name: str) -> str | None:
        dist = self.dists().get(_norm(name))
        return dist.version if dist else None

    def locate(self, packages: list[str], rel: str) -> tuple[Path, im.Distribution]:
        """The installed file ``rel`` (a path suffix, e.g. ``cutlass/cute/nvgpu/warp/mma.py``)
        owned by the first of ``packages`` that lists it in its RECORD."""
        dists = self.dists()
        installed = [p for p in packages if _norm(p) in dists]
        if not installed:
            raise StepFailed(f"none of {', '.join(packages)} is installed")
        for name in installed:
            dist = dists[_norm(name)]
            for entry in dist.files or []:
                posix = entry.as_posix()
                if posix == rel or posix.endswith("/" + rel):
                    return _located(dist, entry), dist
        owners = ", ".join(f"{p} {dists[_norm(p)].version}" for p in installed)
        raise StepFailed(f"no file '{rel}' in the RECORD of {owners}")

    def pip_argv(self, *args: str) -> list[str]:
        argv = [self.python, "-m", "pip", *args, "--disable-pip-version-check"]
        if self.no_index:
            argv.append("--no-index")
        for link in self.find_links:
            argv += ["--find-links", link]
        return argv

    def run_python(self, code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
        """Run ``code`` with the target interpreter, the site folders on its path."""
        prelude = "import site\n" + "".join(f"site.addsitedir({d!r})\n" for d in self.site_packages)
        return subprocess.run(
            [self.python, "-c", prelude + code],
            capture_output=True,
            text=True,
            env=dict(os.environ, **env),
        )


# --- step kinds ----------------------------------------------------------------------------------
class Context:
    """What a step sees: the environment, the plan folder (read-only), the mod being applied."""

    def __init__(self, env: Env, plan_dir: Path, mod: dict):
        self.env = env
        self.plan_dir = plan_dir
        self.mod = mod

    def versions_text(self) -> str:
        names = list(self.mod.get("applies_to") or {}) or []
        parts = [f"{n} {self.env.version(n) or 'not installed'}" for n in names]
        return ", ".join(parts)

    def fail(self, message: str) -> StepFailed:
        versions = self.versions_text()
        return StepFailed(f"mod {self.mod['name']}: {versions + ': ' if versions else ''}{message}")


def _short(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= limit else flat[: limit - 3] + "...")


def _class_region(text: str, class_name: str) -> tuple[int, int] | None:
    """Start/end offsets of a top-level ``class NAME`` body (to the next column-0 statement)."""
    match = re.search(rf"^class {re.escape(class_name)}\b.*$", text, re.M)
    if not match:
        return None
    end_match = re.compile(r"^[^\s#]", re.M).search(text, match.end() + 1)
    return match.start(), (end_match.start() if end_match else len(text))


def plan_replacements(text: str, replacements: list[dict], where: str) -> tuple[str, list[str]]:
    """Apply anchored replacements to ``text``. Returns (new text, notes); raises StepFailed.

    Each replacement: ``anchor`` (expected original text), ``replacement``, optional ``in_class``
    (search only inside that top-level class) and ``count`` (how many occurrences, default 1).
    A replacement already present counts as done (idempotent); a missing anchor fails.
    """
    notes = []
    for rep in replacements:
        start, end = 0, len(text)
        if rep.get("in_class"):
            region = _class_region(text, rep["in_class"])
            if region is None:
                raise StepFailed(f"file {where}: class {rep['in_class']} not found")
            start, end = region
        segment = text[start:end]
        count = int(rep.get("count", 1))
        scope = f" in class {rep['in_class']}" if rep.get("in_class") else ""
        if rep["replacement"] in segment and rep["anchor"] not in segment.replace(
            rep["replacement"], ""
        ):
            notes.append("already")
            continue
        found = segment.count(rep["anchor"])
        if found != count:
            what = (
                "missing anchor" if found == 0 else f"anchor found {found} times, expected {count}"
            )
            raise StepFailed(f"file {where}: {what}{scope}: {_short(rep['anchor'])}")
        text = text[:start] + segment.replace(rep["anchor"], rep["replacement"]) + text[end:]
        notes.append("changed")
    return text, notes


def _parse_unified_diff(diff: str) -> list[tuple[list[str], list[str]]]:
    """Hunks of a unified diff as (old lines, new lines), line endings kept off."""
    hunks: list[tuple[list[str], list[str]]] = []
    old: list[str] = []
    new: list[str] = []
    in_hunk = False
    for line in diff.splitlines():
        if line.startswith("@@"):
            if in_hunk:
                hunks.append((old, new))
            old, new, in_hunk = [], [], True
        elif not in_hunk or line.startswith(("--- ", "+++ ")) and not old and not new:
            continue
        elif line.startswith("\\"):
            continue
        elif line.startswith("-"):
            old.append(line[1:])
        elif line.startswith("+"):
            new.append(line[1:])
        else:
            old.append(line[1:])
            new.append(line[1:])
    if in_hunk:
        hunks.append((old, new))
    return hunks


def apply_unified_diff(text: str, diff: str, where: str) -> tuple[str, str]:
    """Apply a unified diff (one file) by exact context match anywhere in the file.

    Returns (new text, "changed" | "already"); every hunk must match exactly once, or the
    whole diff must already be present, else StepFailed names the first hunk that does not fit.
    """
    hunks = _parse_unified_diff(diff)
    if not hunks:
        raise StepFailed(f"file {where}: the diff has no hunks")
    joined = lambda lines: "\n".join(lines) + "\n"  # noqa: E731
    if all(text.count(joined(old)) == 1 for old, _ in hunks):
        for old, new in hunks:
            text = text.replace(joined(old), joined(new), 1)
        return text, "changed"
    if all(joined(new) in text for _, new in hunks):
        return text, "already"
    for old, _ in hunks:
        if text.count(joined(old)) != 1:
            raise StepFailed(f"file {where}: diff hunk does not match: {_short(joined(old))}")
    raise StepFailed(f"file {where}: diff does not apply")


def step_edit(ctx: Context, step: dict) -> tuple[str, str]:
    """Edit a file of an installed package: anchored replacements, or a unified diff."""
    try:
        path, _dist = ctx.env.locate(step["packages"], step["path"])
    except StepFailed as exc:
        raise ctx.fail(str(exc)) from None
    text = path.read_text(encoding="utf-8")
    try:
        if step.get("diff"):
            diff = (ctx.plan_dir / step["diff"]).read_text(encoding="utf-8")
            new, note = apply_unified_diff(text, diff, str(path))
            notes = [note]
        else:
            new, notes = plan_replacements(text, step["replacements"], str(path))
    except StepFailed as exc:
        raise ctx.fail(str(exc)) from None
    if new == text:
        return "already-applied", f"{path}: already edited"
    _write_atomic(path, new.encode("utf-8"))
    _drop_bytecode(path)
    return "applied", f"{path}: {notes.count('changed')} edit(s)"


def _write_atomic(path: Path, data: bytes, mode: int | None = None) -> None:
    tmp = path.with_name(f".{path.name}.edgevllm-tmp-{os.getpid()}")
    try:
        tmp.write_bytes(data)
        old_mode = (
            mode if mode is not None else (path.stat().st_mode & 0o7777 if path.exists() else 0o644)
        )
        os.chmod(tmp, old_mode)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _drop_bytecode(path: Path) -> None:
    """Stale .pyc files of an edited module would hide the edit from nothing, but keep it clean."""
    cache = path.parent / "__pycache__"
    for pyc in cache.glob(f"{path.stem}.*.pyc") if cache.is_dir() else []:
        with contextlib.suppress(OSError):
            pyc.unlink()


def _requirement_satisfied(env: Env, requirement: str) -> bool:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(.*)$", requirement)
    if not match:
        raise StepFailed(f"invalid requirement '{requirement}'")
    name, spec = match.groups()
    have = env.version(name)
    return have is not None and version_in(spec.split(";")[0], have)


def step_pip_install(ctx: Context, step: dict) -> tuple[str, str]:
    """Install pinned packages; installed torch & co are pinned as constraints so pip never
    swaps them (e.g. for a CPU wheel)."""
    reqs = step["requirements"]
    if all(_requirement_satisfied(ctx.env, r) for r in reqs):
        return "already-applied", "satisfied: " + ", ".join(reqs)
    with tempfile.TemporaryDirectory(prefix="edgevllm-pip-") as tmp:
        constraints = Path(tmp) / "constraints.txt"
        pinned = []
        for name in step.get("constrain", DEFAULT_CONSTRAINED):
            have = ctx.env.version(name)
            if have:
                pinned.append(f"{name}=={have}")
        constraints.write_text("".join(p + "\n" for p in pinned))
        argv = ctx.env.pip_argv("install", "-c", str(constraints))
        if step.get("no_deps"):
            argv.append("--no-deps")
        if ctx.env.site_packages:
            argv += ["--target", ctx.env.site_packages[0], "--upgrade"]
        proc = subprocess.run(argv + list(reqs), capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ctx.fail(f"pip install {' '.join(reqs)} failed: {last}")
    missing = [r for r in reqs if not _requirement_satisfied(ctx.env, r)]
    if missing:
        raise ctx.fail(f"pip install finished but {', '.join(missing)} is not satisfied")
    return "applied", "installed " + ", ".join(reqs) + (
        f" (constraints: {', '.join(pinned)})" if pinned else ""
    )


def _file_hash(path: Path) -> str | None:
    if not path.is_file():
        return None
    return (
        base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).rstrip(b"=").decode()
    )


def _wrong_copies(dist: im.Distribution, over: im.Distribution | None) -> list[str]:
    """Files of ``dist`` whose bytes are not its own: missing, or (when ``over`` is given) equal
    to ``over``'s copy. A file that matches neither was edited after install (e.g. by a later
    step of a mod) and is left alone, so that re-running changes nothing."""
    theirs = {}
    if over is not None:
        theirs = {e.as_posix(): e.hash.value for e in over.files or [] if e.hash}
    wrong = []
    for entry in dist.files or []:
        if not entry.hash or entry.hash.mode != "sha256":
            continue
        have = _file_hash(_located(dist, entry))
        if have == entry.hash.value:
            continue
        if have is None or over is None or theirs.get(entry.as_posix()) == have:
            wrong.append(entry.as_posix())
    return wrong


def step_dist_files(ctx: Context, step: dict) -> tuple[str, str]:
    """Make sure the files of distribution ``package`` (at ``version``, or the version of the
    installed ``version_from``) are that wheel's copy, not the copy of ``over``: where two wheels
    install the same paths with different bytes, the last one installed wins."""
    package = step["package"]
    version = step.get("version") or ctx.env.version(step.get("version_from", ""))
    if not version:
        raise ctx.fail(
            f"cannot tell which {package} version to use: "
            f"{step.get('version_from')} is not installed"
        )
    dists = ctx.env.dists()
    dist, over = dists.get(_norm(package)), dists.get(_norm(step.get("over", "")))
    if dist is not None and dist.version == version:
        wrong = _wrong_copies(dist, over)
        if not wrong:
            return "already-applied", f"the files of {package} {version} are its own copies"
    else:
        wrong = None  # not installed (or another version): install every file of the wheel
    root = _site_root(ctx, dist)
    wheel = _fetch_wheel(ctx, f"{package}=={version}")
    try:
        changed = _overlay_wheel(wheel, root, set(wrong) if wrong is not None else None)
    finally:  # the download is ours: it must not stay in /tmp (or in the image layer)
        shutil.rmtree(wheel.parent, ignore_errors=True)
    dist = ctx.env.dists().get(_norm(package))
    left = _wrong_copies(dist, over) if dist else ["(not installed)"]
    if left:
        raise ctx.fail(
            f"{package} {version}: {len(left)} file(s) are still not its own copy, e.g. {left[0]}"
        )
    return "applied", f"{package} {version}: wrote {changed} file(s) from its wheel into {root}"


def _located(dist: im.Distribution, entry: str | os.PathLike[str]) -> Path:
    """Where an installed file of ``dist`` lies (its RECORD entry, or a relative path)."""
    # typeshed calls locate_file's result a SimplePath, not os.PathLike; it is a path either way
    return Path(str(dist.locate_file(entry)))


def _site_root(ctx: Context, dist: im.Distribution | None) -> Path:
    if ctx.env.site_packages:
        return Path(ctx.env.site_packages[0])
    if dist is not None:
        return _located(dist, "")
    for other in ctx.env.dists().values():
        return _located(other, "")
    raise StepFailed("no site-packages folder found")


def _fetch_wheel(ctx: Context, requirement: str) -> Path:
    tmp = Path(tempfile.mkdtemp(prefix="edgevllm-wheel-"))
    argv = ctx.env.pip_argv("download", "--no-deps", "--only-binary=:all:", "-d", str(tmp))
    proc = subprocess.run(argv + [requirement], capture_output=True, text=True)
    wheels = sorted(tmp.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        shutil.rmtree(tmp, ignore_errors=True)
        last = (proc.stderr.strip().splitlines() or ["no wheel"])[-1]
        raise ctx.fail(f"cannot obtain the wheel {requirement}: {last}")
    return wheels[0]


def _overlay_wheel(wheel: Path, root: Path, only: set[str] | None = None) -> int:
    """Write the files of ``wheel`` (or just ``only``) under ``root`` where the bytes differ."""
    changed = 0
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            if info.is_dir():
                continue
            name = info.filename
            data_dir = re.match(r"[^/]+\.data/(purelib|platlib)/(.*)$", name)
            if data_dir:
                name = data_dir.group(2)
            elif re.match(r"[^/]+\.data/", name):
                continue
            if only is not None and name not in only:
                continue
            dest = root / name
            data = archive.read(info)
            if dest.is_file() and dest.read_bytes() == data:
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            mode = (info.external_attr >> 16) & 0o777 or 0o644
            _write_atomic(dest, data, mode)
            changed += 1
    return changed


def _dest_path(ctx: Context, step: dict) -> Path:
    if step.get("dest"):
        return Path(step["dest"])
    dists = ctx.env.dists()
    dist = dists.get(_norm(step["package"]))
    if dist is None:
        raise ctx.fail(f"{step['package']} is not installed")
    return _located(dist, step["package_path"])


def step_files(ctx: Context, step: dict) -> tuple[str, str]:
    """Drop or overlay files from the mod's data: ``source`` (file or folder in the plan) to
    ``dest`` (absolute) or ``package``+``package_path`` (inside an installed package)."""
    source = ctx.plan_dir / step["source"]
    dest = _dest_path(ctx, step)
    if not source.exists():
        raise ctx.fail(f"data {step['source']} is missing from the plan")
    pairs = (
        [(source, dest)]
        if source.is_file()
        else [(f, dest / f.relative_to(source)) for f in sorted(source.rglob("*")) if f.is_file()]
    )
    changed = 0
    for src, dst in pairs:
        data = src.read_bytes()
        if dst.is_file() and dst.read_bytes() == data:
            continue
        try:
            dst.parent.mkdir(parents=True, exist_ok=True)
            _write_atomic(dst, data, 0o644)
        except OSError as exc:
            raise ctx.fail(f"cannot write {dst}: {exc.strerror}") from None
        changed += 1
    if not changed:
        return "already-applied", f"{len(pairs)} file(s) already in {dest}"
    return "applied", f"wrote {changed} of {len(pairs)} file(s) to {dest}"


def step_symlink(ctx: Context, step: dict) -> tuple[str, str]:
    """Create a symlink ``link`` → ``target``."""
    link, target = Path(step["link"]), step["target"]
    if link.is_symlink() and os.readlink(link) == target:
        return "already-applied", f"{link} -> {target}"
    if link.exists() and not link.is_symlink():
        raise ctx.fail(f"{link} exists and is not a symlink")
    try:
        link.parent.mkdir(parents=True, exist_ok=True)
        tmp = link.with_name(f".{link.name}.edgevllm-tmp-{os.getpid()}")
        os.symlink(target, tmp)
        os.replace(tmp, link)
    except OSError as exc:
        raise ctx.fail(f"cannot create {link}: {exc.strerror}") from None
    return "applied", f"{link} -> {target}"


def _library_dirs(ctx: Context, step: dict) -> list[Path]:
    """Folders that hold a versioned copy of the library: listed folders, then the files of
    listed distributions (e.g. nvidia-cuda-runtime's ``nvidia/cu13/lib``)."""
    dirs: list[Path] = []
    for folder in step.get("dirs", []):
        dirs.append(Path(folder))
    dists = ctx.env.dists()
    for name in step.get("packages", []):
        dist = dists.get(_norm(name))
        if dist is None:
            continue
        for entry in dist.files or []:
            if fnmatch.fnmatch(entry.name, step["pattern"]):
                dirs.append(_located(dist, entry).parent)
    seen, unique = set(), []
    for folder in dirs:
        if folder not in seen and any(folder.glob(step["pattern"])):
            seen.add(folder)
            unique.append(folder)
    return unique


def step_library_link(ctx: Context, step: dict) -> tuple[str, str]:
    """Make an unversioned library name (``libcudart.so``, which some packages dlopen) exist
    next to its versioned file, in every folder that has one."""
    name = step["name"]
    dirs = _library_dirs(ctx, step)
    if not dirs:
        where = step.get("dirs", []) + step.get("packages", [])
        raise ctx.fail(f"no {step['pattern']} found in {', '.join(map(str, where))}")
    made = []
    for folder in dirs:
        link = folder / name
        if link.exists():
            continue
        versioned = sorted(
            folder.glob(step["pattern"]), key=lambda p: _release(p.name[len(name) :].lstrip("."))
        )[-1]
        try:
            os.symlink(versioned.name, link)
        except OSError as exc:
            raise ctx.fail(f"cannot create {link}: {exc.strerror}") from None
        made.append(f"{link} -> {versioned.name}")
    for folder in dirs:
        try:
            ctypes.CDLL(str(folder / name))
        except OSError as exc:
            raise ctx.fail(f"{folder / name} does not load: {exc}") from None
    if made and step.get("ldconfig", True) and not _resolvable(ctx, name):
        made.append(_register_with_loader(ctx, dirs, name))
    if not made:
        return "already-applied", f"{name} present in {', '.join(map(str, dirs))}"
    return "applied", "; ".join(made)


def _resolvable(ctx: Context, name: str) -> bool:
    """Whether a fresh process of the target interpreter can dlopen ``name`` by itself."""
    code = f"import ctypes; ctypes.CDLL({name!r})"
    return subprocess.run([ctx.env.python, "-c", code], capture_output=True).returncode == 0


def _register_with_loader(ctx: Context, dirs: list[Path], name: str) -> str:
    """A new link in a folder the loader caches (e.g. /usr/local/cuda/lib64) is found only
    after ldconfig runs; a folder it does not know is added under /etc/ld.so.conf.d first.
    Needs root (an image build is); elsewhere the failure says what to set instead."""
    ldconfig = shutil.which("ldconfig") or (
        "/sbin/ldconfig" if os.path.exists("/sbin/ldconfig") else None
    )
    conf_dir = Path("/etc/ld.so.conf.d")
    hint = f"add {dirs[0]} to LD_LIBRARY_PATH"
    if ldconfig is None or not os.access(conf_dir, os.W_OK):
        raise ctx.fail(
            f"{name} was linked but does not resolve and ldconfig cannot be run here; {hint}"
        )
    conf = conf_dir / f"edgevllm-{ctx.mod['name']}.conf"
    text = "".join(f"{d}\n" for d in dirs)
    if not conf.is_file() or conf.read_text() != text:
        _write_atomic(conf, text.encode(), 0o644)
    proc = subprocess.run([ldconfig], capture_output=True, text=True)
    if proc.returncode != 0 or not _resolvable(ctx, name):
        raise ctx.fail(f"{name} still does not resolve after ldconfig; {hint}")
    return f"registered {', '.join(map(str, dirs))} with the loader ({conf})"


def step_env(ctx: Context, step: dict) -> tuple[str, str]:
    """Runtime environment variables: the build puts them in the image ENV; here they are
    recorded (and merged into the env file when there is one)."""
    pairs = {k: str(v) for k, v in step["vars"].items()}
    text = ", ".join(f"{k}={v}" for k, v in pairs.items())
    env_file = ctx.env.env_file
    if env_file is None:  # nothing to write: the caller sets them (image ENV, shell)
        return "already-applied", f"no env file; set at run time: {text}"
    current = _read_env_file(env_file)
    if all(current.get(k) == v for k, v in pairs.items()):
        return "already-applied", f"in {env_file}: {text}"
    current.update(pairs)
    env_file.parent.mkdir(parents=True, exist_ok=True)
    _write_atomic(
        env_file, "".join(f"{k}={v}\n" for k, v in sorted(current.items())).encode(), 0o644
    )
    return "applied", f"written to {env_file}: {text}"


def _read_env_file(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    pairs = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            pairs[key.strip()] = value
    return pairs


def step_verify(ctx: Context, step: dict) -> tuple[str, str]:
    """Run a Python check with the target interpreter and the mod's env vars; exit 0 passes."""
    proc = ctx.env.run_python(step["python"], mod_env(ctx.mod))
    if proc.returncode != 0:
        lines = (proc.stderr.strip() or proc.stdout.strip() or "no output").splitlines()
        raise ctx.fail(f"verification failed: {lines[-1]}")
    out = proc.stdout.strip().splitlines()
    return "passed", out[-1] if out else "verification passed"


# An eugr mod's run.sh at build time. Its wget/curl calls are answered from files the host
# fetched and pinned (the build has no network); any other URL fails the step.
_FETCH_SHIM = r"""
import hashlib, json, os, sys
tool, args = sys.argv[1], sys.argv[2:]
pinned = json.loads(os.environ["EDGEVLLM_PINNED_DOWNLOADS"])
urls = [a for a in args if a.startswith(("http://", "https://"))]
if not urls or urls[0] not in pinned:
    sys.exit(f"edgevllm: {tool} {urls[0] if urls else ''}: not a download the mod pinned "
             "(downloads:); the build has no network")
url, out = urls[0], None
names = {"wget": ("-O", "--output-document"), "curl": ("-o", "--output")}[tool]
for i, a in enumerate(args):
    if a in names and i + 1 < len(args):
        out = args[i + 1]
    elif a.startswith(tuple(n + "=" for n in names)):
        out = a.split("=", 1)[1]
remote = url.split("?")[0].rstrip("/").rsplit("/", 1)[-1]
if out is None and (tool == "wget" or "-O" in args or "--remote-name" in args):
    out = remote
if out and tool == "wget" and "-P" in args:
    out = os.path.join(args[args.index("-P") + 1], out)
body = open(pinned[url]["path"], "rb").read()
if hashlib.sha256(body).hexdigest() != pinned[url]["sha256"]:
    sys.exit(f"edgevllm: {url}: the pinned file's sha256 changed")
if out in (None, "-"):
    sys.stdout.buffer.write(body)
else:
    open(out, "wb").write(body)
"""


def _script_env(ctx: Context, step: dict, folder: Path, shims: Path) -> dict[str, str]:
    """What an eugr script expects: WORKSPACE_DIR, PYTHON_ROOT (the site-packages root), the
    image's Python first on PATH as python3, and wget/curl answered from the pinned files."""
    python = shutil.which(ctx.env.python) or ctx.env.python
    shims.mkdir()
    (shims / "fetch.py").write_text(_FETCH_SHIM)
    # Wrappers, not symlinks: a venv's Python finds its pyvenv.cfg only under its own path.
    scripts = {"python3": f'exec "{python}" "$@"', "python": f'exec "{python}" "$@"',
               "wget": f'exec "{python}" "{shims}/fetch.py" wget "$@"',
               "curl": f'exec "{python}" "{shims}/fetch.py" curl "$@"'}
    for tool, line in scripts.items():
        (shims / tool).write_text(f"#!/bin/sh\n{line}\n")
        (shims / tool).chmod(0o755)
    root = ctx.env.site_packages[0] if ctx.env.site_packages else subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True).stdout.strip()
    pinned = {d["url"]: {"path": str(folder / d["file"]), "sha256": d["sha256"]}
              for d in step.get("downloads", [])}
    workspace = Path(step.get("workspace") or "/workspace")
    workspace.mkdir(parents=True, exist_ok=True)
    return dict(os.environ, WORKSPACE_DIR=str(workspace), PYTHON_ROOT=root,
                PATH=f"{shims}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                EDGEVLLM_PINNED_DOWNLOADS=json.dumps(pinned))


def step_script(ctx: Context, step: dict) -> tuple[str, str]:
    """Run the mod's script (``run``) with bash in a copy of its folder; exit 0 applies it, any
    other exit fails the mod with the script's last output lines."""
    folder = ctx.plan_dir / ctx.mod["name"]
    with tempfile.TemporaryDirectory(prefix="edgevllm-script-") as tmp:
        work = Path(tmp) / "mod"
        shutil.copytree(folder, work)
        env = _script_env(ctx, step, folder, Path(tmp) / "bin")
        try:
            proc = subprocess.run(["bash", step["run"]], cwd=work, env=env, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=3600)
        except subprocess.TimeoutExpired:
            raise ctx.fail(f"{step['run']} ran for more than an hour") from None
    lines = [line for line in proc.stdout.strip().splitlines() if line.strip()]
    if proc.returncode != 0:
        tail = " | ".join(lines[-3:]) or "no output"
        raise ctx.fail(f"{step['run']} exited with {proc.returncode}: {tail}")
    return "applied", _short(lines[-1]) if lines else f"{step['run']} ran"


STEP_KINDS = {
    "edit": step_edit,
    "pip_install": step_pip_install,
    "dist_files": step_dist_files,
    "files": step_files,
    "symlink": step_symlink,
    "library_link": step_library_link,
    "env": step_env,
    "verify": step_verify,
    "script": step_script,
}


def mod_env(mod: dict) -> dict[str, str]:
    env: dict[str, str] = {}
    for step in mod.get("steps", []):
        if step["kind"] == "env":
            env.update({k: str(v) for k, v in step["vars"].items()})
    return env


# --- applying a plan -----------------------------------------------------------------------------
def _range_miss(env: Env, applies_to: dict) -> str | None:
    """Why ``applies_to`` excludes this environment (names the version), or None."""
    for package, spec in (applies_to or {}).items():
        have = env.version(package)
        if have is None:
            return f"{package} is not installed"
        if not version_in(spec, have):
            return f"{package} {have} is outside {spec}"
    return None


def _packages_named(mod: dict) -> list[str]:
    """Every distribution a mod's ranges or steps name (their versions go into the record)."""
    names = list(mod.get("applies_to") or {})
    for step in mod.get("steps", []):
        names += list(step.get("applies_to") or {}) + list(step.get("packages", []))
        names += [step[k] for k in ("package", "over", "version_from") if step.get(k)]
        names += [re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0] for r in step.get("requirements", [])]
    return list(dict.fromkeys(n for n in names if n))


def apply_mod(env: Env, plan_dir: Path, mod: dict) -> dict:
    """Apply one mod; never raises for a mod problem: the outcome says what happened."""
    ranged = set(mod.get("applies_to") or {})
    seen = {p: env.version(p) for p in _packages_named(mod)}
    packages = {p: v for p, v in seen.items() if v is not None or p in ranged}
    result = {
        "name": mod["name"],
        "version": mod.get("version", ""),
        "packages": packages,
        "env": mod_env(mod),
        "steps": [],
    }
    miss = _range_miss(env, mod.get("applies_to") or {})
    if miss:
        return dict(result, outcome="not-applicable", detail=miss)
    ctx = Context(env, plan_dir, mod)
    for index, step in enumerate(mod.get("steps", [])):
        entry = {"index": index, "kind": step["kind"], "title": step.get("title", "")}
        step_miss = _range_miss(env, step.get("applies_to") or {})
        if step_miss:
            entry.update(outcome="not-applicable", detail=step_miss)
        else:
            try:
                outcome, detail = STEP_KINDS[step["kind"]](ctx, step)
            except StepFailed as exc:
                entry.update(outcome="failed", detail=str(exc))
                result["steps"].append(entry)
                return dict(result, outcome="failed", detail=str(exc))
            except Exception as exc:  # a bug or an odd environment: still one line, still failed
                message = (
                    f"mod {mod['name']}: step {index} ({step['kind']}): {type(exc).__name__}: {exc}"
                )
                entry.update(outcome="failed", detail=message)
                result["steps"].append(entry)
                return dict(result, outcome="failed", detail=message)
            entry.update(outcome=outcome, detail=detail)
        result["steps"].append(entry)
    return dict(result, **_summarise(result["steps"]))


def _summarise(steps: list[dict]) -> dict:
    """The mod's outcome from its steps. Env and verify steps change no package, so they decide
    only for a mod that has nothing else (an env-only mod)."""
    changing = [s for s in steps if s["kind"] not in ("env", "verify")]
    deciding = changing or [s for s in steps if s["kind"] == "env"]
    outcomes = [s["outcome"] for s in deciding]
    if "applied" in outcomes:
        return {"outcome": "applied", "detail": f"{outcomes.count('applied')} step(s) changed"}
    if "already-applied" in outcomes:
        return {"outcome": "already-applied", "detail": "nothing to change"}
    reasons = list(dict.fromkeys(s["detail"] for s in deciding))
    return {"outcome": "not-applicable", "detail": "no step applies: " + "; ".join(reasons)}


def apply_plan(plan: dict, plan_dir: Path, env: Env, only: list[str] | None = None) -> dict:
    mods = plan.get("mods", [])
    if only:
        known = {m["name"] for m in mods}
        unknown = [n for n in only if n not in known]
        if unknown:
            raise SystemExit(
                f"error: unknown mod '{unknown[0]}' (the plan has: "
                f"{', '.join(sorted(known)) or 'none'})"
            )
        mods = [m for m in mods if m["name"] in only]
    results = [apply_mod(env, plan_dir, mod) for mod in mods]
    return {
        "format": 1,
        "applier_version": APPLIER_VERSION,
        "target": plan.get("target"),
        "python": env.python,
        "site_packages": env.site_packages,
        "applied_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "ok": all(r["outcome"] != "failed" for r in results),
        "mods": results,
    }


def label_value(record: dict) -> str:
    """Compact form for an image label: ``name=outcome,...``."""
    return ",".join(f"{m['name']}={m['outcome']}" for m in record.get("mods", []))


def format_table(record: dict) -> str:
    rows = [("MOD", "OUTCOME", "DETAIL")]
    rows += [(m["name"], m["outcome"], m.get("detail", "")) for m in record["mods"]]
    width = [max(len(r[i]) for r in rows) for i in range(2)]
    return "\n".join(f"{r[0]:<{width[0]}}  {r[1]:<{width[1]}}  {r[2]}" for r in rows)


def write_record(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (json.dumps(record, indent=2, sort_keys=True) + "\n").encode()
    _write_atomic(path, data, 0o644)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="inimage_applier.py", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    apply = sub.add_parser("apply", help="apply the mods of a plan")
    apply.add_argument("--plan", required=True, type=Path)
    apply.add_argument("--record", type=Path, help="write the JSON record here (atomically)")
    apply.add_argument(
        "--env-file",
        type=Path,
        help="merge runtime env vars here (default: mods.env beside --record)",
    )
    apply.add_argument(
        "--no-env-file",
        action="store_true",
        help="write no env file (env steps only report the variables)",
    )
    apply.add_argument(
        "--site-packages",
        action="append",
        default=[],
        help="apply to the distributions in this folder (default: this Python)",
    )
    apply.add_argument("--mod", action="append", default=[], help="only this mod (repeatable)")
    apply.add_argument("--pip-find-links", action="append", default=[])
    apply.add_argument("--pip-no-index", action="store_true")
    args = parser.parse_args(argv)
    try:
        plan = json.loads(args.plan.read_text())
    except (OSError, ValueError) as exc:
        print(f"error: cannot read plan {args.plan}: {exc}", file=sys.stderr)
        return 2
    env_file = args.env_file or (args.record.parent / "mods.env" if args.record else None)
    if args.no_env_file:
        env_file = None
    env = Env(
        [str(Path(p).resolve()) for p in args.site_packages],
        sys.executable,
        args.pip_find_links,
        args.pip_no_index,
        env_file,
    )
    record = apply_plan(plan, args.plan.resolve().parent, env, args.mod or None)
    if args.record:
        write_record(args.record, record)
    print(format_table(record))
    print(f"edgevllm.mods={label_value(record)}")
    for mod in record["mods"]:
        if mod["outcome"] == "failed":
            print(f"error: {mod['detail']}", file=sys.stderr)
    return 0 if record["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
