"""The verify API other modules call (the build driver, ``inv verify``).

    reports = scan_path(dir_or_whl) / scan_tarball(file) / scan_image(engine, ref)
    verdict = judge(reports, parse_arch("12.1a"), load_policy())
    verdict = verify("spark", image="vllm-spark:dev", engine=engine)  # never raises on FAIL
    verify_image(engine, "vllm-thor:dev", "thor", json_out="arch.json")  # raises ArchGateFailed

``verify`` fails a scan that found no CUDA code while the policy gates some ("is this the right
path?"). Tarballs are read through ``edgevllm.image.tarball`` (the reader ``inv load`` uses), so
a corrupt or missing part is the same ``IntegrityError`` for both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from edgevllm.common.errors import ArchGateFailed, ConfigError, CorruptBinaryError, NotElfError
from edgevllm.verify.judge import Verdict, judge
from edgevllm.verify.library import LibraryReport, group_cubins, inspect_buffer
from edgevllm.verify.readers import (
    inspect_file,
    scan_directory,
    scan_image_stream,
    scan_tar_stream,
    scan_wheel,
)

Inspect = Callable[[str, object], LibraryReport]


def scan_file(path: Path | str, inspect: Inspect = inspect_buffer) -> LibraryReport:
    """One library given by name: not ELF or corrupt is an error here, not a table row."""
    path = Path(path)
    try:
        report = inspect_file(path, path.name, inspect) if path.is_file() else None
    except OSError as exc:
        raise NotElfError(f"{path}: cannot read it ({exc.strerror}); "
                          "check its permissions") from None
    if report is None:
        raise NotElfError(f"{path}: not an ELF shared object or cubin; pass a library, a cubin, "
                          "a .whl or a folder of them")
    if report.corrupt:
        raise CorruptBinaryError(f"{path}: {report.status}")
    return report


def is_wheel(path: Path) -> bool:
    return path.suffix == ".whl" and path.is_file()


def scan_path(path: Path | str, inspect: Inspect = inspect_buffer) -> list[LibraryReport]:
    """A folder (walked), a ``.whl`` (read from the zip, nothing unpacked) or one file."""
    path = Path(path)
    if path.is_dir():
        return scan_directory(path, inspect)
    if not path.exists():
        if path.is_symlink():
            raise ConfigError(f"--path {path}: a symlink that loops or names nothing")
        raise ConfigError(f"--path {path}: no such file or folder")
    if is_wheel(path):
        return scan_wheel_cached(path, inspect)
    return [scan_file(path, inspect)]


def scan_wheel_cached(wheel: Path, inspect: Inspect) -> list[LibraryReport]:
    """A wheel's libraries, remembered by the wheel's sha256 in the verify cache (a target's
    inspector only: cuobjdump must see every file)."""
    cache = None
    if isinstance(inspect, TargetInspect):
        from edgevllm.verify.verdictcache import VerdictCache

        cache = VerdictCache.for_target(str(inspect.arch))
    if cache is None:
        return scan_wheel(wheel, inspect)
    from edgevllm.common.fsutil import sha256_file
    from edgevllm.verify.archive import Layer

    name = "sha256:" + sha256_file(wheel)
    found = cache.get(name)
    if found is not None:
        return sorted(found.kept.values(), key=lambda r: r.path)
    reports = scan_wheel(wheel, inspect)
    kept = {report.path: report for report in reports}
    if len(kept) == len(reports):  # a zip naming one member twice is read again each time
        cache.put(name, Layer(kept=kept))
    return reports


def scan_tarball(path: Path | str, inspect: Inspect = inspect_buffer) -> list[LibraryReport]:
    """A docker-save / export tarball, plain or compressed, or a published part set: every
    part's size and sha256 are checked first, exactly as ``inv load`` does."""
    from edgevllm.image.tarball import open_tarball

    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"--tarball {path}: is a folder; use --path for a folder of libraries")
    tarset = open_tarball(path)
    if tarset.verifiable:
        tarset.check()
    with tarset.tar_stream() as stream:
        return scan_tar_stream(stream, str(path), inspect)


class TargetInspect:
    """``inspect_buffer`` for one target: what the verify cache's records are made with (their
    key names the target), so an image scanned with it is read layer by layer (``layered``)."""

    def __init__(self, arch):
        self.arch = arch
        self.reading = None  # how an image's layers were had (layered.Reading)

    def __call__(self, label: str, buf) -> LibraryReport:
        return inspect_buffer(label, buf, self.arch)


def scan_image(engine, ref: str, inspect: Inspect = inspect_buffer) -> list[LibraryReport]:
    """An image's libraries: layer by layer, known layers from the verify cache, for a target's
    inspector; else (cuobjdump, which must see every file) one ``docker save`` stream."""
    if not isinstance(inspect, TargetInspect):
        return scan_image_stream(engine, ref, inspect)
    from edgevllm.common import console
    from edgevllm.verify.layered import NoDiffIds, scan_layers
    from edgevllm.verify.readers import library_keep
    from edgevllm.verify.verdictcache import VerdictCache

    try:
        reports, inspect.reading = scan_layers(engine, ref, library_keep(inspect),
                                               VerdictCache.for_target(str(inspect.arch)))
    except NoDiffIds:
        return scan_image_stream(engine, ref, inspect)
    console.info(inspect.reading.describe())
    return reports


def scan_source(source: dict, engine, inspect: Inspect) -> tuple[str, list[LibraryReport]]:
    """``source``: exactly one of image / tarball / path set → (label, reports)."""
    given = {key: value for key, value in source.items() if value}
    if len(given) != 1:
        raise ConfigError("verify: give exactly one of --image IMG, --tarball FILE or --path DIR")
    kind, value = next(iter(given.items()))
    if kind == "image":
        if engine is None:
            from edgevllm.containers.docker import DockerEngine
            engine = DockerEngine()
        return f"image {value}", scan_image(engine, value, inspect)
    if kind == "tarball":
        return f"tarball {value}", scan_tarball(value, inspect)
    return f"path {value}", scan_path(value, inspect)


def _inspector(arch, cuobjdump: bool, path):
    """The per-file callback: parse (naming the kernels the target lacks), and with
    ``cuobjdump`` also cross-check each file with device code."""
    if not cuobjdump:
        return TargetInspect(arch)
    from edgevllm.verify.cuobjdump import Checker, find_cuobjdump

    root = None
    if path:
        given = Path(path)
        root = given if given.is_dir() else None if is_wheel(given) else given.parent
    return Checker(find_cuobjdump(), root, arch)


def nothing_found_note(reports: list[LibraryReport], label: str,
                       verdict: Verdict | None = None) -> str | None:
    """Why a scan that gated nothing cannot pass: no CUDA code at all, or none the policy gates
    (e.g. a folder of another arch's or another package's libraries)."""
    if not any(report.has_device_code for report in reports):
        return f"no CUDA libraries found under {label}; is this the right path?"
    if verdict is not None and not any(lib.gated for lib in verdict.libraries):
        return (f"none of the libraries with CUDA code under {label} is one the policy gates "
                "(vllm, torch, flashinfer...); is this the right path, or pass --policy")
    return None


def verify(target: str, *, image: str | None = None, tarball: Path | str | None = None,
           path: Path | str | None = None, engine=None, policy: Path | str | None = None,
           cuobjdump: bool = False, json_out: Path | str | None = None,
           planned: dict[str, list[str]] | None = None) -> Verdict:
    """Scan one source and judge it for ``target`` (a target name, ``"12.1a"``, ``"sm_121a"``);
    ``planned``: the kernel plan's arches by extension (judge.judge), from a compile's lock.

    Returns the verdict whether or not it passed; writes ``json_out`` atomically when given.
    """
    from edgevllm.specs.targets import resolve_cuda_target
    from edgevllm.verify.policy import load_policy
    from edgevllm.verify.report import check_json_target, write_json

    if json_out:
        check_json_target(json_out)
    name, arch = resolve_cuda_target(target)
    rules = load_policy(policy)
    inspect = _inspector(arch, cuobjdump, path)
    label, reports = scan_source({"image": image, "tarball": tarball, "path": path}, engine,
                                 inspect)
    notes = getattr(inspect, "notes", None)
    checked = bool(cuobjdump and inspect.ran_on_all(reports))
    verdict = judge(group_cubins(reports), arch, rules, source=label, target=name, notes=notes,
                    cuobjdump_checked=checked, every_name=bool(json_out), planned=planned)
    verdict.scanned = len(reports)  # files read, before cubins were folded into groups
    verdict.reading = getattr(inspect, "reading", None)
    where = label.split(" ", 1)[1]
    note = nothing_found_note(reports, where, verdict) if rules.expects_libraries else None
    if note and not verdict.failures:
        verdict.notes.append(note)
    if json_out:
        write_json(verdict, json_out)
    return verdict


def verify_image(engine, image_ref: str, target: str, json_out: Path | str | None = None,
                 policy: Path | str | None = None, cuobjdump: bool = False) -> Verdict:
    """For the build driver: verify a built image; raise ArchGateFailed when the gate fails."""
    verdict = verify(target, image=image_ref, engine=engine, policy=policy, cuobjdump=cuobjdump,
                     json_out=json_out)
    if not verdict.passed:
        raise ArchGateFailed(verdict.summary())
    return verdict
