"""What an image's first start on the device compiles, read from a verdict (docs/first-start.md).

Three kinds of work happen at first use and are kept by a cache afterwards:

- **PTX JIT by the CUDA driver**: a unit whose only code that runs on the target is PTX is
  compiled by the driver when its module loads. Per library: those units and the bytes of PTX
  the driver compiles (the PTX entry it picks: the newest one that runs). The result is kept in
  the driver's compute cache (``CUDA_CACHE_PATH``, at most ``CUDA_CACHE_MAXSIZE`` bytes).
- **FlashInfer's JIT**: FlashInfer builds its kernels with nvcc at first use unless a prebuilt
  package holds code that runs on the target: ``flashinfer-cubin`` (raw cubins) or
  ``flashinfer-jit-cache`` (compiled modules). Each package present is counted by units that run,
  and so are the modules ``inv build --aot`` built into FlashInfer's AOT folder
  (``flashinfer/data/aot``: the JIT builds the modules they do not cover).
- **Triton and vLLM's compile**: always at first use, whatever the image holds.

``first_start(verdict)`` builds the report; ``to_json()`` is what the JSON verdict carries and
``compact()`` what the image's verify label carries (no per-kernel detail).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from edgevllm.verify.compat import entry_level, unit_levels
from edgevllm.verify.library import LibraryReport, short_path

# The caches the first start fills, by the names the targets' launch defaults mount them under
# (targets/*.yaml launch.jit_caches): what each keeps, and when this image needs it.
CACHES = {
    "compute": "the CUDA driver's compute cache: SASS compiled from PTX-only units",
    "flashinfer": "FlashInfer's JIT cache: modules built with nvcc at first use",
    "triton": "Triton's cache: kernels compiled at first use",
    "vllm": "vLLM's torch.compile and CUDA-graph cache",
}
# Top folders (below site-packages) of FlashInfer's prebuilt kernel packages.
FLASHINFER_PACKAGES = {"flashinfer_cubin": "flashinfer-cubin",
                       "flashinfer_jit_cache": "flashinfer-jit-cache"}
# FlashInfer's own AOT folder, which inv build --aot fills with one model's modules.
FLASHINFER_AOT = "flashinfer/data/aot/"
WARMED = "flashinfer-aot (--aot)"


@dataclass
class PtxLibrary:
    """One library with units the driver compiles from PTX at first load."""

    path: str
    units: int  # units whose best code for the target is PTX
    total: int  # units with kernels in the library
    ptx_bytes: int  # PTX text the driver compiles for them (decompressed)

    def to_json(self) -> dict:
        return {"path": self.path, "units": self.units, "total": self.total,
                "ptx_bytes": self.ptx_bytes}


@dataclass
class PrebuiltPackage:
    """A FlashInfer prebuilt-kernel package found in the scan, and how much of it runs here."""

    name: str  # flashinfer-cubin | flashinfer-jit-cache | WARMED
    units: int = 0
    running: int = 0  # units with SASS that runs on the target (native or compatible)

    def to_json(self) -> dict:
        return {"name": self.name, "units": self.units, "running": self.running}


@dataclass
class FirstStart:
    target: str
    ptx: list[PtxLibrary] = field(default_factory=list)
    flashinfer: list[PrebuiltPackage] = field(default_factory=list)

    @property
    def ptx_units(self) -> int:
        return sum(lib.units for lib in self.ptx)

    @property
    def ptx_bytes(self) -> int:
        return sum(lib.ptx_bytes for lib in self.ptx)

    @property
    def flashinfer_state(self) -> str:
        """``prebuilt``: both packages run here; ``partial``: one does (the JIT builds the rest);
        ``jit``: none present or none runs here: FlashInfer builds every kernel at first use."""
        running = {pkg.name for pkg in self.flashinfer if pkg.running}
        if not running:
            return "jit"
        return "prebuilt" if set(FLASHINFER_PACKAGES.values()) <= running else "partial"

    @property
    def caches(self) -> list[str]:
        """The caches this image's first start fills (names as the launch defaults mount them)."""
        needed = ["compute"] if self.ptx_units else []
        needed += ["flashinfer"] if self.flashinfer_state != "prebuilt" else []
        return needed + ["triton", "vllm"]

    def flashinfer_text(self) -> str:
        found = ", ".join(f"{pkg.name} {pkg.running}/{pkg.units} units run"
                          for pkg in self.flashinfer)
        if self.flashinfer_state == "jit":
            why = f"{found}: none for {self.target}" if self.flashinfer else \
                "no flashinfer-cubin or flashinfer-jit-cache"
            return f"FlashInfer JIT-compiles every kernel it uses ({why})"
        if self.flashinfer_state == "partial":
            return f"FlashInfer has some prebuilt kernels ({found}); the JIT builds the rest"
        return f"FlashInfer has prebuilt kernels ({found})"

    def summary(self) -> str:
        """One line: ``first start: 82 PTX-only units (12.3 MB PTX) in 2 libraries; ...``."""
        if self.ptx_units:
            ptx = (f"{self.ptx_units} PTX-only units ({human_bytes(self.ptx_bytes)} PTX) in "
                   f"{len(self.ptx)} librar{'y' if len(self.ptx) == 1 else 'ies'} JIT-compiled "
                   "by the driver")
        else:
            ptx = "no PTX-only units"
        return (f"first start: {ptx}; {self.flashinfer_text()}; caches kept: "
                f"{', '.join(self.caches)}")

    def lines(self) -> list[str]:
        """The summary, then one line per library the driver JIT-compiles PTX for."""
        return [self.summary()] + [
            f"  PTX JIT: {short_path(lib.path)}: {lib.units}/{lib.total} units, "
            f"{human_bytes(lib.ptx_bytes)} PTX" for lib in sorted(self.ptx, key=lambda p: p.path)]

    def to_json(self) -> dict:
        return {"ptx_units": self.ptx_units, "ptx_bytes": self.ptx_bytes,
                "ptx_libraries": [lib.to_json() for lib in self.ptx],
                "flashinfer": {"state": self.flashinfer_state,
                               "packages": [pkg.to_json() for pkg in self.flashinfer]},
                "caches": {name: CACHES[name] for name in self.caches},
                "summary": self.summary()}

    def compact(self) -> dict:
        """For the image label: totals, per-library PTX, FlashInfer's state, the cache names."""
        return {"ptx_units": self.ptx_units, "ptx_bytes": self.ptx_bytes,
                "ptx": {_package_path(lib.path): [lib.units, lib.ptx_bytes] for lib in self.ptx},
                "flashinfer": self.flashinfer_state, "caches": self.caches}


def human_bytes(size: int) -> str:
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def _package_path(path: str) -> str:
    from edgevllm.verify.policy import anchors

    return anchors(path.lstrip("./"))[-1]


def ptx_of(report: LibraryReport, verdict_target) -> PtxLibrary | None:
    """The units of one library that only PTX JIT runs, and the PTX the driver compiles for
    them; None when it has none. Units without a kernel (link glue) are left out, as in the
    coverage counts."""
    empty = {unit for unit, names in report.unit_kernels.items() if names == []}
    levels = {unit: found for unit, found in unit_levels(report.entries, verdict_target).items()
              if unit not in empty}
    jit_units = {unit for unit, found in levels.items() if found == "ptx-jit"}
    if not jit_units:
        return None
    picked: dict[int, tuple[int, int]] = {}  # unit → (sm, bytes) of the PTX the driver takes
    for entry in report.entries:
        if entry.container in jit_units and entry_level(entry, verdict_target) == "ptx-jit":
            best = picked.get(entry.container)
            if best is None or entry.sm > best[0]:
                picked[entry.container] = (entry.sm, entry.full_size)
    return PtxLibrary(report.path, len(jit_units), len(levels),
                      sum(size for _, size in picked.values()))


def _flashinfer_package(lib: Any) -> str | None:
    path = _package_path(lib.report.path)
    if path.startswith(FLASHINFER_AOT):
        return WARMED
    return FLASHINFER_PACKAGES.get(path.split("/", 1)[0])


def first_start(verdict: Any) -> FirstStart:
    """The report of a ``judge.Verdict`` (not imported: judge calls this module)."""
    report = FirstStart(verdict.target)
    packages: dict[str, PrebuiltPackage] = {}
    for lib in verdict.libraries:
        if not lib.report.has_device_code or lib.report.corrupt:
            continue
        ptx = ptx_of(lib.report, verdict.cuda_arch)
        if ptx is not None:
            report.ptx.append(ptx)
        name = _flashinfer_package(lib)
        if name is not None:
            package = packages.setdefault(name, PrebuiltPackage(name))
            package.units += lib.coverage.total
            package.running += lib.coverage.reaching("compatible")
    report.flashinfer = [packages[name] for name in sorted(packages)]
    return report


def first_start_cell(data: dict | None) -> str:
    """A compact record (``FirstStart.compact``) as one line, for ``--diff`` and labels."""
    if not data:
        return "not recorded"
    return (f"{data.get('ptx_units', 0)} PTX-only units ({human_bytes(data.get('ptx_bytes', 0))} "
            f"PTX); FlashInfer {data.get('flashinfer', '?')}")

