"""A dependency closure resolved on the host for the target's platform: one pin per package.

``resolve_closure`` runs uv's resolver (``uv pip compile --format pylock.toml``) for the target's
platform and Python (not the host's), with overrides in the resolver's sense, and returns a
``Closure``: one ``WheelPin`` (name, version, file name, URL, sha256) per package, the wheel chosen
by the platform's tag priority. A package that has no wheel for the platform is refused with the
requirement that pulled it; uv runs with ``--no-build``, so nothing is built on the host to be
resolved (a package with only an sdist is one line: common/requirements.source_only_line).
Fetching the pins and assembling a build's folder of them is sources/wheelhouse.py's.

uv reads the user's logins only where every index is the user's own (``uvlogins.resolve_env``).

Contract: nothing is downloaded before the closure resolved (only the indexes are probed).
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence
from urllib.parse import unquote, urlparse

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from edgevllm.common.errors import (  # the closure's errors (importable from here too)
    ClosureError,
    ConfigError,
    IndexUnreachable,
    UnresolvableError,
    WheelInputError,
)
from edgevllm.common.http import probe
from edgevllm.common.requirements import source_only, source_only_line
from edgevllm.sources.uvlogins import PYPI, resolve_env, uv_env  # noqa: F401 (uv_env: callers')

DEFAULT_GLIBC = "2_34"   # llguidance 1.7 has no x86_64 wheel below manylinux_2_31
_ARCH = {"linux/arm64": "aarch64", "linux/amd64": "x86_64"}
NO_BUILD = "--no-build"   # uv resolves from wheels alone: no build backend runs on the host


@dataclass(frozen=True)
class WheelPin:
    name: str
    version: str
    filename: str
    sha256: str
    url: str = ""          # where it was found (empty for a local file given as a path)
    size: int | None = None

    def requirement_line(self) -> str:
        return f"{self.name}=={self.version} --hash=sha256:{self.sha256}"


@dataclass
class Closure:
    """Every wheel one image installs, resolved for one platform and Python."""

    python_platform: str                     # uv's --python-platform, e.g. aarch64-manylinux_2_34
    python_version: str                      # e.g. 3.12
    requirements: list[str]
    overrides: list[str] = field(default_factory=list)
    indexes: list[str] = field(default_factory=list)
    pins: list[WheelPin] = field(default_factory=list)

    def pin(self, name: str) -> WheelPin | None:
        wanted = canonicalize_name(name)
        return next((p for p in self.pins if canonicalize_name(p.name) == wanted), None)

    def total_bytes(self) -> int:
        return sum(p.size or 0 for p in self.pins)

    def to_dict(self) -> dict:
        return {"python_platform": self.python_platform, "python_version": self.python_version,
                "requirements": list(self.requirements), "overrides": list(self.overrides),
                "indexes": list(self.indexes),
                "wheels": [p.__dict__.copy() for p in self.pins]}

    @classmethod
    def from_dict(cls, data: dict) -> "Closure":
        return cls(python_platform=data["python_platform"], python_version=data["python_version"],
                   requirements=list(data.get("requirements", [])),
                   overrides=list(data.get("overrides", [])),
                   indexes=list(data.get("indexes", [])),
                   pins=[WheelPin(**w) for w in data.get("wheels", [])])


# --- platform ------------------------------------------------------------------------------------

def python_platform(docker_platform: str, glibc: str = DEFAULT_GLIBC) -> str:
    """``linux/arm64`` → ``aarch64-manylinux_2_34`` (uv's --python-platform)."""
    if docker_platform not in _ARCH:
        raise ConfigError(f"platform '{docker_platform}': prebuilt wheels exist for "
                          f"{', '.join(_ARCH)} only")
    return f"{_ARCH[docker_platform]}-manylinux_{glibc}"


def python_version_of(interpreter: str) -> str | None:
    """``python3.12`` → ``3.12``; None for a bare ``python3`` (the base image decides)."""
    match = re.search(r"(\d+\.\d+)$", interpreter)
    return match.group(1) if match else None


def supported_tags(platform: str, python_version: str) -> list[Tag]:
    """Wheel tags the target installs, best first (manylinux_2_<glibc> down to 2_5, then the
    legacy aliases)."""
    arch, _, glibc = platform.partition("-manylinux_")
    top = int(glibc.split("_")[1]) if glibc else 17
    plats = [f"manylinux_2_{minor}_{arch}" for minor in range(top, 4, -1)]
    plats += [f"manylinux{legacy}_{arch}" for legacy in ("2014", "2010", "1")] + [f"linux_{arch}"]
    version = tuple(int(x) for x in python_version.split(".")[:2])
    return list(cpython_tags(version, platforms=plats)) + list(compatible_tags(version,
                                                                                platforms=plats))


def check_wheel_fits(filename: str, platform: str, python_version: str) -> None:
    """One line, before anything is downloaded, when a wheel cannot install on the target."""
    try:
        _, _, _, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        raise WheelInputError(f"--vllm-wheel {filename}: not a wheel file name "
                              "(NAME-VERSION-PY-ABI-PLATFORM.whl)") from None
    if not tags & set(supported_tags(platform, python_version)):
        have = ", ".join(sorted(str(t) for t in tags))
        raise WheelInputError(f"--vllm-wheel {filename}: built for {have}, which does not install "
                              f"on the target ({platform}, Python {python_version}); use the "
                              "wheel for that platform, or give a version")


def vllm_requirement(wheel: str, platform: str, python_version: str) -> str:
    """``--vllm-wheel`` (a version, a local .whl or a URL) → a requirement for the resolver."""
    if wheel.startswith(("http://", "https://")):
        check_wheel_fits(unquote(Path(urlparse(wheel).path).name), platform, python_version)
        return f"vllm @ {wheel}"
    if wheel.endswith(".whl"):
        path = Path(wheel).expanduser().resolve()
        if not path.is_file():
            raise WheelInputError(f"--vllm-wheel {wheel}: no such file")
        check_wheel_fits(path.name, platform, python_version)
        return f"vllm @ {path.as_uri()}"
    if not re.fullmatch(r"v?\d+(\.\d+)*([a-z]+\d*)?(\.post\d+)?(\+[\w.]+)?", wheel):
        raise WheelInputError(f"--vllm-wheel '{wheel}': give a version (0.33.0), a .whl file or "
                              "a URL of one")
    return f"vllm=={wheel.lstrip('v')}"


# --- resolve -------------------------------------------------------------------------------------

def uv_binary() -> str:
    from uv import find_uv_bin  # a dependency; imported here as only closures need it

    return find_uv_bin()


def uv_version() -> str:
    out = subprocess.run([uv_binary(), "--version"], capture_output=True, text=True, check=True)
    return out.stdout.split()[1]


def check_index(url: str, timeout: float = 15) -> None:
    """``IndexUnreachable`` (one line, with the offline path) when ``url`` does not answer."""
    try:  # with nothing of the user's: the index may be one others chose
        probe(url.rstrip("/") + "/pip/", timeout)
    except OSError as exc:  # requests' errors are OSErrors
        reason = type(exc).__name__
        raise IndexUnreachable(
            f"package index {url} is unreachable ({reason}); offline, rebuild from a lock whose "
            "wheels are cached (inv build --lock LOCK), or set the target's torch.index_url to "
            "a mirror") from None


def resolve_closure(requirements: list[str], *, platform: str, python_version: str,
                    overrides: Sequence[str] = (), indexes: Sequence[str] = (),
                    timeout: float = 600) -> Closure:
    """The full closure of ``requirements`` for one platform/Python, every wheel pinned by hash.

    ``indexes``: extra indexes searched before PyPI (e.g. torch's); ``overrides``: requirements
    that replace what any package asks for (uv ``--override``), recorded in the closure.
    """
    for index in [*indexes, PYPI]:
        check_index(index)
    with tempfile.TemporaryDirectory(prefix="edgevllm-closure-") as tmp:
        lock_file = Path(tmp) / "pylock.toml"
        args = _compile_args(Path(tmp), requirements, platform, python_version, overrides,
                             indexes)
        env = resolve_env(Path(tmp), indexes)
        proc = subprocess.run([*args, "--format", "pylock.toml", "-o", str(lock_file)],
                              capture_output=True, text=True, timeout=timeout, env=env)
        if proc.returncode != 0:
            raise _failed(proc.stderr, requirements, platform, python_version)
        packages = _read_pylock(lock_file)
        tags = supported_tags(platform, python_version)
        pins: list[WheelPin] = []
        missing: list[str] = []
        for package in packages:
            pin = _choose_wheel(package, tags)
            if pin is None:
                missing.append(package["name"])
            else:
                pins.append(pin)
        if missing:
            via = _pulled_by(args, Path(tmp), missing, timeout, env)
            raise ClosureError(f"no wheel for {platform} / Python {python_version}: " + "; ".join(
                f"{name} (required by {via.get(canonicalize_name(name), 'the request')})"
                for name in missing) + "; pin another version with --package NAME==VER")
    return Closure(python_platform=platform, python_version=python_version,
                   requirements=list(requirements), overrides=list(overrides),
                   indexes=list(indexes), pins=sorted(pins, key=lambda p: p.name))


def _compile_args(tmp: Path, requirements, platform, python_version, overrides, indexes):
    (tmp / "requirements.in").write_text("\n".join(requirements) + "\n")
    # --no-build: resolving never runs a project's build backend (its Python, on the host);
    # a package with no wheel for the target is one line (_failed: source_only).
    args = [uv_binary(), "pip", "compile", str(tmp / "requirements.in"), "--python-platform",
            platform, "--python-version", python_version, "--no-header", "--quiet",
            "--no-config", NO_BUILD]
    if overrides:
        (tmp / "overrides.txt").write_text("\n".join(overrides) + "\n")
        args += ["--override", str(tmp / "overrides.txt")]
    for index in indexes:
        args += ["--index", index]
    return args


def _read_pylock(path: Path) -> list[dict]:
    try:
        import tomllib
    except ImportError:  # Python 3.10 has no tomllib: the tomli backport (a 3.10-only dependency)
        import tomli as tomllib
    return tomllib.loads(path.read_text()).get("packages", [])


def _choose_wheel(package: dict, tags: list[Tag]) -> WheelPin | None:
    """The package's wheel with the best tag for the platform (None: no wheel fits)."""
    rank = {tag: i for i, tag in enumerate(tags)}
    candidates = []
    for wheel in package.get("wheels", []) + ([package["archive"]] if "archive" in package
                                               else []):
        where = wheel.get("url") or wheel.get("path", "")
        filename = unquote(Path(urlparse(where).path).name)
        try:
            _, _, _, wtags = parse_wheel_filename(filename)
        except InvalidWheelFilename:
            continue
        best = min((rank[t] for t in wtags if t in rank), default=None)
        if best is not None:
            candidates.append((best, filename, wheel))
    if not candidates:
        return None
    _, filename, wheel = min(candidates, key=lambda c: c[0])
    return WheelPin(name=package["name"], version=str(package["version"]), filename=filename,
                    sha256=wheel["hashes"]["sha256"], url=wheel.get("url", ""),
                    size=wheel.get("size"))


def _pulled_by(args: list[str], tmp: Path, names: list[str], timeout: float,
               env: dict[str, str]) -> dict[str, str]:
    """name → the packages that required it (uv's annotations; only on the failure path)."""
    proc = subprocess.run([*args, "--annotation-style", "line", "-o", str(tmp / "via.txt")],
                          capture_output=True, text=True, timeout=timeout, env=env)
    via: dict[str, str] = {}
    if proc.returncode == 0:
        for line in (tmp / "via.txt").read_text().splitlines():
            match = re.match(r"^([A-Za-z0-9_.-]+)==\S+\s+#\s*via\s+(.+)$", line)
            if match:
                via[canonicalize_name(match.group(1))] = re.sub(
                    r"-r \S+", "the requested packages", match.group(2).strip())
    return via


def _because(stderr: str) -> str:
    """uv's explanation of a failed resolve, on one line ("Because ... unsatisfiable.")."""
    text = " ".join(line.strip(" ×╰─▶│") for line in stderr.splitlines() if line.strip())
    because = re.search(r"(Because .*?)(?:\s+hint:|$)", text)
    return because.group(1) if because else (text[-400:] or "no output")


def _failed(stderr: str, requirements: list[str], platform: str, version: str) -> ClosureError:
    """The error a failed resolve raises: a package that only a build would give (--no-build
    stopped it) is its own line; anything else is uv's reason."""
    built = source_only(stderr)
    if built:
        return ClosureError(source_only_line(*built, f"{platform} / Python {version}"))
    return UnresolvableError(_resolver_failure(stderr, requirements, platform, version),
                             _because(stderr))


def _resolver_failure(stderr: str, requirements: list[str], platform: str, version: str) -> str:
    text = " ".join(line.strip(" ×╰─▶│") for line in stderr.splitlines() if line.strip())
    unknown = re.search(r"no version of (vllm[^\s,]*)", text)
    if unknown:
        return (f"unknown vLLM version: {unknown.group(1)} is not on the index; give a released "
                "version (pip index versions vllm), a .whl file or a URL")
    detail = _because(stderr)
    return (f"the closure of {', '.join(requirements)} does not resolve for {platform} / Python "
            f"{version}: {detail} (an --override 'SPEC' or --package NAME==VER may help)")
