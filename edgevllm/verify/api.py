"""The verify API other modules call (the build driver, ``inv verify``).

    reports = scan_path(dir) / scan_tarball(file) / scan_image(engine, ref)
    verdict = judge(reports, parse_arch("12.1a"), load_policy())
    verdict = verify("spark", image="vllm-spark:dev", engine=engine)   # never raises on a failed gate
    verify_image(engine, "vllm-thor:dev", "thor", json_out="arch.json")  # raises ArchGateFailed
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Callable

from edgevllm.kernel.errors import ArchGateFailed, ConfigError, CorruptBinaryError, CuobjdumpMismatch, NotElfError
from edgevllm.verify import cuobjdump as cuobj
from edgevllm.verify.judge import Verdict, judge
from edgevllm.verify.library import LibraryReport, inspect_buffer
from edgevllm.verify.policy import load_policy
from edgevllm.verify.report import write_json
from edgevllm.verify.sources import inspect_file, scan_directory, scan_image_stream, scan_tar_stream
from edgevllm.verify.streams import open_tarball_stream

Inspect = Callable[[str, object], LibraryReport]


def scan_file(path: Path | str, inspect: Inspect = inspect_buffer) -> LibraryReport:
    """One library given by name: not ELF or corrupt is an error here, not a table row."""
    path = Path(path)
    try:
        report = inspect_file(path, path.name, inspect) if path.is_file() else None
    except OSError as exc:
        raise NotElfError(f"{path}: cannot read it ({exc.strerror}); check its permissions") from None
    if report is None:
        raise NotElfError(f"{path}: not an ELF shared object; pass a library or a folder of them")
    if report.corrupt:
        raise CorruptBinaryError(f"{path}: {report.status}")
    return report


def scan_path(path: Path | str, inspect: Inspect = inspect_buffer) -> list[LibraryReport]:
    path = Path(path)
    if path.is_dir():
        return scan_directory(path, inspect)
    if not path.exists():
        raise ConfigError(f"--path {path}: no such file or folder")
    return [scan_file(path, inspect)]


def scan_tarball(path: Path | str, inspect: Inspect = inspect_buffer) -> list[LibraryReport]:
    with open_tarball_stream(Path(path)) as stream:
        return scan_tar_stream(stream, str(path), inspect)


def scan_image(engine, ref: str, inspect: Inspect = inspect_buffer) -> list[LibraryReport]:
    return scan_image_stream(engine, ref, inspect)


class _Checker:
    """An ``inspect`` that also runs cuobjdump on each library with device code and keeps notes."""

    def __init__(self, binary: Path, root: Path | None):
        self.binary, self.root, self.notes = binary, root, {}

    def __call__(self, label: str, buf) -> LibraryReport:
        report = inspect_buffer(label, buf)
        if report.corrupt or (self.root is None and not report.has_device_code):
            return report
        try:
            self._check(report, buf)
        except CuobjdumpMismatch as exc:
            self.notes[label] = str(exc).split("(", 1)[-1].rstrip(")")
        return report

    def _check(self, report: LibraryReport, buf) -> None:
        if self.root is not None:  # a file on disk: check it where it is
            cuobj.check(self.binary, self.root / report.path, report.entries, report.path)
            return
        with tempfile.NamedTemporaryFile(suffix=".so") as tmp:  # a tar member: cuobjdump needs a file
            tmp.write(buf)
            tmp.flush()
            cuobj.check(self.binary, Path(tmp.name), report.entries, report.path)


def _scan(source: dict, engine, inspect: Inspect) -> tuple[str, list[LibraryReport]]:
    given = {key: value for key, value in source.items() if value}
    if len(given) != 1:
        raise ConfigError("verify: give exactly one of --image IMG, --tarball FILE or --path DIR")
    kind, value = next(iter(given.items()))
    if kind == "image":
        if engine is None:
            from edgevllm.engine.docker import DockerEngine
            engine = DockerEngine()
        return f"image {value}", scan_image(engine, value, inspect)
    if kind == "tarball":
        return f"tarball {value}", scan_tarball(value, inspect)
    return f"path {value}", scan_path(value, inspect)


def verify(target: str, *, image: str | None = None, tarball: Path | str | None = None,
           path: Path | str | None = None, engine=None, policy: Path | str | None = None,
           cuobjdump: bool = False, json_out: Path | str | None = None) -> Verdict:
    """Scan one source and judge it for ``target`` (a target name or ``"12.1a"``).

    Returns the verdict whether or not it passed; writes ``json_out`` atomically when given.
    """
    from edgevllm.model.targets import resolve_cuda_target

    name, arch = resolve_cuda_target(target)
    rules = load_policy(policy)
    checker = None
    if cuobjdump:
        root = Path(path) if path and Path(path).is_dir() else Path(path).parent if path else None
        checker = _Checker(cuobj.find_cuobjdump(), root)
    source, reports = _scan({"image": image, "tarball": tarball, "path": path}, engine,
                            checker or inspect_buffer)
    verdict = judge(reports, arch, rules, source=source, target=name,
                    notes=checker.notes if checker else None)
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
