"""The kernel plan as data: what a vLLM tree compiles for a device, group by group and extension
by extension (``edgevllm.sources.plan`` evaluates it from the tree's own CMake)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from edgevllm.common.errors import PlanError


@dataclass
class ArchGroup:
    key: str            # unique: the variable, with #N when the tree evaluates it more than once
    name: str           # the CMake variable the result lands in (MACHETE_ARCHS, CUDA_ARCHS, ...)
    file: str           # relative to the tree
    line: int
    requested: list[str]
    result: list[str]
    kind: str           # native | family | ptx | none
    label: str = ""     # the tree's own "Building ..."/"Not building ..." line that follows

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass
class Extension:
    name: str
    file: str
    line: int
    language: str
    arches: list[str]   # from the -gencode flags of its CUDA sources: "12.1a", "8.0+PTX", ...
    kind: str
    cuda_sources: int = 0
    sources: list[str] = field(default_factory=list)        # the CUDA ones, relative paths
    compile_flags: list[str] = field(default_factory=list)  # COMPILE_FLAGS (vLLM's GPU flags)
    definitions: list[str] = field(default_factory=list)    # target_compile_definitions
    include_dirs: list[str] = field(default_factory=list)   # besides csrc (vLLM adds it)


@dataclass
class CMakeDep:
    name: str
    repo: str
    tag: str
    file: str
    line: int
    env_var: str | None   # the *_SRC_DIR variable that replaces the clone, when the tree has one
    url: str = ""         # a tarball URL instead of git (not lockable here)
    # Where the override must point inside the clone: the clone's SOURCE_SUBDIR when the tree's
    # override declare has none (both branches then read the same folder); "" for the root.
    override_subdir: str = ""


@dataclass
class KernelPlan:
    arch_list: str
    device_arch: str
    cuda_version: str
    cuda_archs: list[str]             # CUDA_ARCHS after the tree's supported-arch filter
    groups: list[ArchGroup] = field(default_factory=list)
    extensions: list[Extension] = field(default_factory=list)
    deps: list[CMakeDep] = field(default_factory=list)
    source_flags: dict[str, list[str]] = field(default_factory=dict)  # csrc/x.cu -> -gencode ...
    gpu_flags: list[str] = field(default_factory=list)                # _C's COMPILE_FLAGS
    cmake_minimum: str = ""
    cuda_standard: str = ""                                           # CMAKE_CUDA_STANDARD
    target_flags: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # FATAL_ERRORs of external projects whose sources are not fetched (expected; the real
    # configure has them); the tree's own FATAL_ERRORs raise PlanError instead.
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        data = asdict(self)
        data.pop("source_flags")  # large; the compile slice reads it from the object
        return data

    rust_frontend: str = ""           # what becomes of the tree's vllm-rs (see rust_frontend())

    def summary(self) -> dict:
        """Compact form for the lock: arches and kind per group and CUDA extension."""
        return {"arch_list": self.arch_list, "cuda_version": self.cuda_version,
                "cuda_archs": self.cuda_archs,
                "groups": {g.key: {"gets": g.result, "kind": g.kind, "at": g.where}
                           for g in self.groups},
                "extensions": {e.name: {"arches": e.arches, "kind": e.kind}
                               for e in self.extensions if e.language == "CUDA"},
                "none": [g.key for g in self.groups if g.kind == "none"],
                "vllm_rs": self.rust_frontend}

    def group(self, key: str) -> ArchGroup:
        for g in self.groups:
            if g.key == key:
                return g
        raise KeyError(key)

    def flags_for(self, source: str) -> list[str]:
        """``-gencode`` flags the tree gives one source file (relative path), in order."""
        return list(self.source_flags.get(source, []))

    def nvcc_args(self, source: str) -> list[str]:
        """The arguments the tree's CMake gives nvcc for ``source`` (relative path): its
        ``-gencode`` flags, the extension's COMPILE_FLAGS, definitions and include folders, and
        the CUDA standard. What CMake and torch add on their own (torch's include folders, -fPIC,
        the build type's -O2) is the caller's."""
        ext = next((e for e in self.extensions if source in e.sources), None)
        if ext is None:
            raise PlanError(f"{source}: no extension of the tree compiles it for this target")
        args = [part for flag in self.flags_for(source) for part in flag.split(" ", 1)]
        args += ext.compile_flags
        args += [f"-D{d.removeprefix('-D')}" for d in ext.definitions]
        args += [f"-DTORCH_EXTENSION_NAME={ext.name}", "-Icsrc"]
        args += [f"-I{d}" for d in ext.include_dirs if d]
        if self.cuda_standard:
            args.append(f"-std=c++{self.cuda_standard}")
        return args
