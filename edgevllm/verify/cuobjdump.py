"""Cross-check the parser against NVIDIA's cuobjdump (``--cuobjdump``): any disagreement fails,
and so does cuobjdump exiting non-zero (its stderr's last line is kept as the reason).
Libraries with relocatable device code (``__nv_relfatbin``) are listed with ``-all``, which is
what makes cuobjdump include those containers; the verdict says "cuobjdump agrees" only when
cuobjdump ran on every file with device code.

cuobjdump is found via ``$EDGEVLLM_CUOBJDUMP``, ``PATH``, the PyPI package nvidia-cuda-cuobjdump
(``site-packages/nvidia/cu13/bin/cuobjdump``, no console script) or a CUDA toolkit.
Its quirk: ``--list-elf`` prints family cubins without the ``f`` (sm_110 for sm_110f) while
``--list-ptx`` keeps it; the expected listing is spelled the same way before comparing.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import site
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from edgevllm.common.errors import CuobjdumpMismatch, CuobjdumpNotFoundError
from edgevllm.verify.fatbin import FatbinEntry
from edgevllm.verify.library import LibraryReport, inspect_buffer

_LINE = re.compile(r"^(ELF|PTX) file\s+\d+: .*\.(sm_\d+[af]?)\.(?:cubin|ptx)\Z")


def _site_dirs() -> list[str]:
    dirs = list(sys.path)
    try:
        dirs += site.getsitepackages() + [site.getusersitepackages()]
    except AttributeError:  # virtualenvs without site.getsitepackages
        pass
    return dirs


def find_cuobjdump() -> Path:
    candidates = [os.environ.get("EDGEVLLM_CUOBJDUMP"), shutil.which("cuobjdump")]
    candidates += [os.path.join(d, "nvidia", "cu13", "bin", "cuobjdump") for d in _site_dirs()]
    candidates += sorted(glob.glob("/usr/local/cuda*/bin/cuobjdump"), reverse=True)
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return Path(candidate)
    raise CuobjdumpNotFoundError("cuobjdump not found: pip install nvidia-cuda-cuobjdump, install "
                                 "a CUDA toolkit, or set EDGEVLLM_CUOBJDUMP=/path/to/cuobjdump")


@dataclass(frozen=True)
class Listing:
    """Multisets of arch names, as cuobjdump spells them (``sm_110a``, ``sm_121f`` for PTX)."""

    elf: tuple[str, ...]
    ptx: tuple[str, ...]


def run_cuobjdump(binary: Path, library: Path, relocatable: bool = False) -> Listing:
    """cuobjdump's ``--list-elf`` / ``--list-ptx`` of one file (``-all`` for relocatable code);
    raises CuobjdumpMismatch when cuobjdump itself fails."""
    found: dict[str, list[str]] = {"ELF": [], "PTX": []}
    for flag in ("--list-elf", "--list-ptx"):
        argv = [str(binary), flag] + (["-all"] if relocatable else []) + [str(library)]
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            why = (proc.stderr.strip().splitlines() or ["no message"])[-1]
            raise CuobjdumpMismatch(f"{library.name}: cuobjdump {flag} failed (exit "
                                    f"{proc.returncode}: {why})")
        for line in proc.stdout.splitlines():
            match = _LINE.match(line.strip())
            if match:
                found[match.group(1)].append(match.group(2))
    return Listing(tuple(sorted(found["ELF"])), tuple(sorted(found["PTX"])))


def expected_listing(entries: list[FatbinEntry]) -> Listing:
    """What cuobjdump should print for the parser's entries."""
    elf = [f"sm_{e.sm}{'a' if e.variant == 'a' else ''}" for e in entries if e.kind == "sass"]
    ptx = [f"sm_{e.sm}{e.variant}" for e in entries if e.kind == "ptx"]
    return Listing(tuple(sorted(elf)), tuple(sorted(ptx)))


def disagreement(expected: Listing, actual: Listing) -> str | None:
    """A one-line description of the first difference, or None when both agree."""
    for kind in ("elf", "ptx"):
        want, got = Counter(getattr(expected, kind)), Counter(getattr(actual, kind))
        if want != got:
            extra, lacking = sorted((got - want).elements()), sorted((want - got).elements())
            return f"{kind}: cuobjdump has extra {extra or '[]'}, lacks {lacking or '[]'}"
    return None


def check(binary: Path, library: Path, entries: list[FatbinEntry], label: str) -> None:
    relocatable = any(entry.section == "__nv_relfatbin" for entry in entries)
    try:
        actual = run_cuobjdump(binary, library, relocatable)
    except CuobjdumpMismatch as exc:
        raise CuobjdumpMismatch(f"{label}: parser and cuobjdump disagree "
                                f"({str(exc).split(': ', 1)[1]})") from None
    problem = disagreement(expected_listing(entries), actual)
    if problem:
        raise CuobjdumpMismatch(f"{label}: parser and cuobjdump disagree ({problem})")


class Checker:
    """An ``inspect`` callback that also runs cuobjdump on each file with device code and keeps
    its disagreements in ``notes`` (path → one line)."""

    whole_files = True  # cuobjdump reads whole files, so sources must not hand over a prefix

    def __init__(self, binary: Path, root: Path | None, target=None):
        self.binary, self.root, self.target = binary, root, target
        self.notes: dict[str, str] = {}
        self.checked: set[str] = set()

    def __call__(self, label: str, buf) -> LibraryReport:
        report = inspect_buffer(label, buf, self.target)
        if report.corrupt or not report.has_device_code:
            return report
        try:
            self._check(report, buf)
        except CuobjdumpMismatch as exc:
            self.notes[label] = str(exc).split("(", 1)[-1].rstrip(")")
        self.checked.add(label)
        return report

    def ran_on_all(self, reports: list[LibraryReport]) -> bool:
        return all(r.path in self.checked for r in reports if r.has_device_code)

    def _check(self, report: LibraryReport, buf) -> None:
        on_disk = self.root / report.path if self.root is not None else None
        if on_disk is not None and on_disk.is_file():  # a file on disk: check it where it is
            check(self.binary, on_disk, report.entries, report.path)
            return
        suffix = ".cubin" if report.kind == "cubin" else ".so"
        with tempfile.NamedTemporaryFile(suffix=suffix) as tmp:  # a member: cuobjdump needs a file
            tmp.write(buf)
            tmp.flush()
            check(self.binary, Path(tmp.name), report.entries, report.path)
