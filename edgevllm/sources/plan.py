"""The kernel plan: what a prepared vLLM tree will compile for a target, from the tree's own CMake.

``evaluate_plan(tree, arch_list, ...)`` runs the tree's ``CMakeLists.txt`` (and everything it
includes: ``cmake/utils.cmake``, ``cmake/external_projects/*.cmake``) in ``cmake -P`` with
``plan_prelude.cmake``: commands that need a real configure record what they are given and do
nothing else, so the tree's own ``cuda_archs_loose_intersection`` and CUDA-version branches decide.
Nothing is copied from a particular vLLM release: a PR or a fork is evaluated the same way.
The tree's CMake is code from others: after the scanner (``cmakeguard``) has read it, cmake runs
in the sandbox (``common/sandbox.py``: bubblewrap, no network, no new process, the tree
read-only) within ``LIMITS`` (``common/bounded.py``), or not at all (docs/security.md).

The result (``KernelPlan``) lists every arch group (one ``cuda_archs_loose_intersection`` call that
ran: file, line, requested list, result, kind), every extension with the arches its CUDA sources
get (from the per-source ``-gencode`` flags the tree sets), the external sources CMake would clone
(``FetchContent``), and the flags a source file is compiled with. Kinds, for the target's device
(``edgevllm.specs.cuda.arch_kind``, the words of the one CUDA rule table):

- ``native``  real SASS for exactly the target (``12.1a``, ``12.1f``, ``12.1`` on 12.1)
- ``family``  SASS that runs on the target by family or plain compatibility (``12.0f``, ``12.0``)
- ``ptx``     only PTX the driver can JIT for the target (``8.0+PTX``): slow first use
- ``none``    nothing that runs on the target

Errors, one line each: a tree without ``CMakeLists.txt`` or ``cmake`` missing; a plan that cannot be
evaluated (naming the CMake file and line); a group the target needs that gets ``none``
(``check_required``, naming the group and the CMake line).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from edgevllm.common.bounded import Finished, Limits, MiB, run_bounded
from edgevllm.common.errors import MissingToolError, PlanError, PlanGapError
from edgevllm.common.sandbox import SCRATCH_SIZE, require_sandbox, sandboxed_argv, seccomp_fd
from edgevllm.sources import cmakeguard
from edgevllm.sources.kernelplan import ArchGroup, CMakeDep, Extension, KernelPlan
from edgevllm.sources.plan_record import parse_record
from edgevllm.specs.cuda import ArchParseError, best_kind, cmake_arch_codes, kind_meets

__all__ = ["ArchGroup", "CMakeDep", "Extension", "KernelPlan", "evaluate_plan", "plan_for_target"]

PRELUDE = Path(__file__).with_name("plan_prelude.cmake")
OVERRIDES = Path(__file__).with_name("plan_overrides.cmake")
# Calls renamed in the shadow copy so that the recorder knows their line (CMake has no caller line).
_RENAMED = {"cuda_archs_loose_intersection": "_ev_cali", "define_extension_target": "_ev_det",
            "fetchcontent_declare": "_ev_fcd", "fetchcontent_populate": "_ev_fcp",
            "message": "_ev_msg"}
_CALL = re.compile(r"^([ \t]*)(" + "|".join(_RENAMED) + r")[ \t]*\(", re.M | re.I)
# torch's long-standing COMMON_NVCC_FLAGS (torch.utils.cpp_extension); vLLM drops the -D ones for
# CUDA >= 12. Used when the caller does not read them from a torch wheel.
DEFAULT_TORCH_NVCC_FLAGS = ["-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
                            "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
                            "--expt-relaxed-constexpr"]
# What evaluating one tree may take: vLLM 0.33.0's CMake needs about 0.3 s and 15 MiB. On the
# host's disk it writes only the record (at most file_size); its scratch is a tmpfs of 16 MiB.
LIMITS = Limits(seconds=120, memory=512 * MiB, output=4 * MiB, file_size=64 * MiB,
                scratch=16 * MiB)


# --- inputs ---------------------------------------------------------------------------------------
def torch_gencode_flags(arch_list: str) -> str:
    """The ``-gencode`` flags torch's CMake makes of TORCH_CUDA_ARCH_LIST (``12.1a`` -> sm_121a)."""
    flags = []
    for entry in re.split(r"[\s;]+", arch_list.strip()):
        if not entry:
            continue
        try:
            codes = cmake_arch_codes(entry)
        except ArchParseError:
            raise PlanError(f"arch list '{arch_list}': '{entry}' is not like 12.1a or 8.0+PTX") \
                from None
        for code in codes:
            flags.append(f"-gencode arch=compute_{code.sm}{code.variant},code={code.name}")
    if not flags:
        raise PlanError("arch list is empty; set torch_cuda_arch_list in the target")
    return " ".join(flags)


def _shadow_tree(tree: Path, dest: Path, files: dict[str, str]) -> None:
    """A copy of the CMake files with a few calls renamed (same line numbers); the rest linked
    (to the tree's real path: the sandbox binds it there, read-only)."""
    for entry in tree.resolve().iterdir():
        if entry.name in ("CMakeLists.txt", "cmake"):
            continue
        os.symlink(entry, dest / entry.name)
    if (tree / "cmake").is_dir():
        shutil.copytree(tree / "cmake", dest / "cmake", symlinks=True)  # no links: checked
    for rel, text in files.items():
        (dest / rel).write_text(_CALL.sub(_renamer(rel), text))


def _renamer(relpath: str):
    def rename(match: re.Match) -> str:
        line = match.string.count("\n", 0, match.start()) + 1
        return f'{match.group(1)}{_RENAMED[match.group(2).lower()]}("{relpath}:{line}" '
    return rename


# --- running --------------------------------------------------------------------------------------
def _run_sandboxed(bwrap: str, argv: list[str], *, tree: Path, root: Path, fixed: Path,
                   scratch: Path, shadow: Path) -> Finished:
    """cmake in the sandbox: the tree, CMake's modules, the prelude and the shadow copy
    read-only, the record the one writable file, a sized tmpfs for the rest; no network, no new
    process, bounded (LIMITS)."""
    fd = seccomp_fd()
    try:
        wrapped = sandboxed_argv(bwrap, argv, read_only=[tree, root, fixed, scratch],
                                 writable=[scratch / "record.txt"], cwd=shadow, seccomp_fd=fd,
                                 scratch=scratch.parent / "work",
                                 scratch_size=LIMITS.scratch or SCRATCH_SIZE)
        return run_bounded(wrapped, LIMITS, what=f"{tree}: evaluating the kernel plan (cmake)",
                           error=PlanError, env=cmakeguard.cmake_env(), pass_fds=[fd])
    finally:
        os.close(fd)


def _read_record(tree: Path, record: Path) -> list[str]:
    """The record's lines: data the tree's CMake could have written anything into."""
    try:
        return record.read_text(errors="replace").splitlines()
    except OSError as exc:
        raise PlanError(f"{tree}: the kernel plan's record cannot be read ({exc.strerror})") \
            from None


def evaluate_plan(tree: Path | str, arch_list: str, *, cuda_version: str, device_arch: str,
                  torch_version: str = "", torch_nvcc_flags: list[str] | None = None,
                  python_version: str = "3.12", nvcc_threads: int = 1) -> KernelPlan:
    """Evaluate ``tree``'s CMake for ``arch_list`` (TORCH_CUDA_ARCH_LIST), CUDA ``cuda_version``.

    ``device_arch`` (``12.1a``) is the device the kinds are judged for. Raises PlanError (one line).
    """
    tree = Path(tree)
    if not (tree / "CMakeLists.txt").is_file():
        raise PlanError(f"{tree}: no CMakeLists.txt; this is not a vLLM source tree")
    cmake = shutil.which("cmake")
    if cmake is None:
        raise MissingToolError("cmake: not found; install cmake >= 3.25 (apt-get install cmake)")
    gencode = torch_gencode_flags(arch_list)
    files = cmakeguard.tree_cmake_files(tree)
    builtins = cmakeguard.cmake_builtins(cmake)
    cmakeguard.check_tree_cmake(tree, files, builtins)  # the first line: before anything runs
    bwrap = require_sandbox("the kernel plan (a tree's CMake)")  # the guarantee: docs/security.md
    with tempfile.TemporaryDirectory(prefix="edgevllm-plan-") as tmp:
        fixed, scratch = Path(tmp) / "fixed", Path(tmp) / "scratch"
        shadow = scratch / "tree"
        shadow.mkdir(parents=True)
        fixed.mkdir()
        _shadow_tree(tree, shadow, files)
        record = scratch / "record.txt"
        record.write_text("")
        overrides = fixed / "overrides.cmake"
        shutil.copyfile(OVERRIDES, overrides)
        prelude = fixed / "prelude.cmake"
        root = cmakeguard.cmake_root(cmake)
        prelude.write_text(cmakeguard.guarded_prelude(
            PRELUDE.read_text(), record=record, shadow=shadow, tree=tree, overrides=overrides,
            root=root, builtins=builtins))
        defs = {"_EV_TREE": shadow,
                "_EV_CUDA_VERSION": cuda_version, "_EV_TORCH_VERSION": torch_version,
                "_EV_GENCODE": gencode, "_EV_PYTHON_VERSION": python_version,
                "_EV_NVCC_THREADS": nvcc_threads,
                "_EV_TORCH_NVCC_FLAGS": ";".join(torch_nvcc_flags or DEFAULT_TORCH_NVCC_FLAGS)}
        argv = [cmake] + [f"-D{k}={v}" for k, v in defs.items()] + ["-P", str(prelude)]
        proc = _run_sandboxed(bwrap, argv, tree=tree, root=root, fixed=fixed, scratch=scratch,
                              shadow=shadow)
        lines = _read_record(tree, record)
        if proc.returncode != 0 or "DONE" not in lines:
            raise PlanError(_failure(tree, shadow, proc.text("stderr")))
        plan = parse_record(lines, str(shadow), arch_list, device_arch, cuda_version)
    own = [e for e in plan.errors if not _in_external_project(e)]
    if own:
        raise PlanError(f"{tree}: the tree's CMake refuses {arch_list}: {own[0][:300]}")
    plan.rust_frontend = rust_frontend(tree)
    return plan


RUST_SWITCHES = ("VLLM_USE_RUST_FRONTEND", "VLLM_USE_RUST_BENCH")


def check_rust_env(plan: KernelPlan, env: dict[str, str]) -> None:
    """An image without vllm-rs refuses runtime env that asks vLLM for it (one line)."""
    if not plan.rust_frontend.startswith("absent"):
        return
    for name in RUST_SWITCHES:
        if str(env.get(name, "")).strip().lower() in ("1", "true", "auto", "yes"):
            raise PlanError(f"--env {name}={env[name]}: edgevllm images do not carry vLLM's Rust "
                            "frontend (vllm-rs; see docs/targets.md 'Rust'); drop it, the Python "
                            "frontend serves the same API")


def _in_external_project(error: str) -> bool:
    """An error raised in a file that sets up a cloned project (its source is not here yet)."""
    return error.startswith("cmake/external_projects/") or error.startswith("?")


def rust_frontend(tree: Path) -> str:
    """Whether images of this tree carry vLLM's Rust frontend binary (``vllm/vllm-rs``).

    They do not: vLLM 0.33.0 builds it with setuptools-rust as an optional extension (a toolchain
    pinned in rust-toolchain.toml, crates from crates.io at build time, so not offline) and uses it
    only when VLLM_USE_RUST_FRONTEND / VLLM_USE_RUST_BENCH is set (default off); without Rust the
    build only warns. The image says so (lock, label) instead of differing from the PyPI wheel
    silently. Returns "" for a tree without Rust.
    """
    if not (tree / "rust").is_dir() and not (tree / "rust-toolchain.toml").is_file():
        return ""
    return ("absent: the tree's Rust frontend (vllm-rs) is not built; "
            "VLLM_USE_RUST_FRONTEND=1 and VLLM_USE_RUST_BENCH=1 are unsupported in this image")


def _failure(tree: Path, shadow: Path, stderr: str) -> str:
    text = stderr.replace(str(shadow) + "/", "").replace(str(shadow), str(tree))
    refused = re.search(r"edgevllm: (.+? is refused while evaluating the kernel plan)",
                        " ".join(text.split()))
    if refused:  # the prelude's guard (cmakeguard): name the tree's line that asked
        caller = re.search(r"^\s+((?:CMakeLists\.txt|cmake/\S+):\d+) ", text, re.M)
        line = f"{caller.group(1)}: " if caller else ""
        return (f"{tree}: {line}{refused.group(1)}: a tree's CMake may not run programs or "
                "reach the host (docs/security.md)")
    where = re.search(r"CMake Error at ([^\s:]+):(\d+)", text)
    detail = ""
    fatal = re.search(r"^\s*(\S+:\d+): (.+?)$", text, re.M)
    if fatal and "_ev_" not in fatal.group(2):
        detail = f"{fatal.group(1)}: {fatal.group(2).strip()}"
    elif where:
        body = text[where.end():].strip().splitlines()
        message = next((ln.strip() for ln in body[1:] if ln.strip()), "")
        detail = f"{where.group(1)}:{where.group(2)}: {message}"
    else:
        detail = (text.strip().splitlines() or ["cmake stopped without a message"])[-1]
    if "PLEASE" in detail.upper() and "edgevllm" in detail:
        detail = detail[:200]
    return f"{tree}: the kernel plan cannot be evaluated: {detail[:300]}"


# --- requirements ---------------------------------------------------------------------------------
def _matching(plan: KernelPlan, alternatives: str) -> tuple[str, list[ArchGroup], list[Extension]]:
    for name in alternatives.split("|"):
        name = name.strip()
        groups = [g for g in plan.groups if g.name == name or g.key == name]
        exts = [e for e in plan.extensions if e.name == name]
        if groups or exts:
            return name, groups, exts
    return alternatives, [], []


def check_required(plan: KernelPlan, required: dict[str, str], target: str,
                   code: str = "native") -> None:
    """Every group the target needs gets at least its minimum kind; else PlanGapError (one line).

    ``required``: ``{"FP4_SM120_ARCHS|FP4_ARCHS": "native", ...}``: the first name the tree has
    counts; a variable evaluated several times passes when any evaluation reaches the minimum.
    Under ``code="family"`` a ``native`` minimum reads as ``family``.
    """
    for alternatives, minimum in required.items():
        if code == "family" and minimum == "native":
            minimum = "family"
        name, groups, exts = _matching(plan, alternatives)
        if not groups and not exts:
            raise PlanGapError(f"target {target}: needed group '{alternatives}' is not in the "
                               f"tree's CMake (no cuda_archs_loose_intersection or extension of "
                               f"that name); fix kernel_plan.required in targets/{target}.yaml")
        got = best_kind([g.kind for g in groups] + [e.kind for e in exts])
        if kind_meets(got, minimum):
            continue
        where = groups[0].where if groups else f"{exts[0].file}:{exts[0].line}"
        asked = ";".join(groups[0].requested) if groups else "-"
        result = ";".join(groups[0].result) if groups else ";".join(exts[0].arches)
        raise PlanGapError(f"target {target}: needed group {name} gets {got} "
                           f"({result or 'nothing'}), needs {minimum}, for {plan.arch_list} "
                           f"({where}: requested {asked}; CUDA archs "
                           f"{';'.join(plan.cuda_archs) or 'none'})")


# --- output ---------------------------------------------------------------------------------------
_STYLE = {"native": "green", "family": "cyan", "ptx": "yellow", "none": "red", "cpu": "dim"}


def print_plan(plan: KernelPlan, title: str = "") -> None:
    """The plan as a rich table on stdout: one row per group, then one per CUDA extension."""
    from rich.table import Table

    from edgevllm.common.console import out_console

    table = Table(title=title or f"kernel plan for {plan.arch_list} (CUDA {plan.cuda_version}): "
                  f"CUDA_ARCHS = {';'.join(plan.cuda_archs) or 'none'}", title_justify="left")
    for column in ("group", "CMake", "requested", "gets", "kind", "the tree says"):
        table.add_column(column, overflow="fold")
    for g in plan.groups:
        table.add_row(g.key, g.where, ";".join(g.requested), ";".join(g.result) or "-",
                      f"[{_STYLE[g.kind]}]{g.kind}[/]", g.label)
    for e in plan.extensions:
        if e.language == "CUDA":
            table.add_row(f"extension {e.name}", f"{e.file}:{e.line}", f"{e.cuda_sources} .cu",
                          ";".join(e.arches) or "-", f"[{_STYLE[e.kind]}]{e.kind}[/]", "")
    out_console().print(table)
    none = [g.key for g in plan.groups if g.kind == "none"]
    ptx = [g.key for g in plan.groups if g.kind == "ptx"]
    out_console().print(f"compile nothing for {plan.device_arch}: {', '.join(none) or '-'}",
                        markup=False, soft_wrap=True)
    out_console().print(f"PTX only (JIT at first use): {', '.join(ptx) or '-'}", markup=False,
                        soft_wrap=True)
    for dep in plan.deps:
        out_console().print(f"clones {dep.name}: {dep.repo or dep.url} @ {dep.tag} "
                            f"({dep.file}:{dep.line}; override {dep.env_var or 'none'})",
                            markup=False, soft_wrap=True)


def _expected_codes(arches: list[str]) -> set[str]:
    """The codes nvcc emits for the plan's arches (``specs.cuda.cmake_arch_codes``)."""
    from edgevllm.specs.cuda import ArchParseError, cmake_arch_codes

    codes = set()
    for arch in arches:
        try:
            codes |= {code.name for code in cmake_arch_codes(arch)}
        except ArchParseError:
            continue
    return codes


def compare_with_binaries(plan_extensions: dict[str, list[str]],
                          found: dict[str, list[str]]) -> list[tuple[str, str, bool]]:
    """Plan against what verify found: ``{ext: [12.1a, 8.0+PTX]}`` vs ``{library path: [sm_121a,
    compute_80]}`` -> ``[(ext, "plan: 12.1a; binary: sm_121a", agrees)]`` for each extension
    whose library was scanned. cuobjdump-style names without ``f`` count as their family form.
    """
    rows = []
    for ext, arches in plan_extensions.items():
        library = next((p for p in sorted(found) if Path(p).name.split(".")[0] == ext), None)
        if library is None or not arches:
            continue
        have = set(found[library])
        want = _expected_codes(arches)
        agrees = all(code in have or code.rstrip("f") in have for code in want)
        rows.append((ext, f"plan: {';'.join(arches)}; binary: {', '.join(sorted(have))}", agrees))
    return rows


# --- for a target ---------------------------------------------------------------------------------
def plan_for_target(tree: Path | str, target, *, torch_version: str = "",
                    torch_nvcc_flags: list[str] | None = None, nvcc_threads: int = 1,
                    check: bool = True) -> KernelPlan:
    """``evaluate_plan`` with the target's arch list, CUDA and device; then its requirements.

    ``target`` is a ``model.targets.Target``. With ``check`` a needed group below its minimum
    raises PlanGapError; without, the caller prints the plan first and checks after.
    """
    python = re.sub(r"^python", "", target.python or "") or "3.12"
    plan = evaluate_plan(tree, target.torch_cuda_arch_list, cuda_version=target.cuda_version,
                         device_arch=target.cuda_arch, torch_version=torch_version,
                         torch_nvcc_flags=torch_nvcc_flags,
                         python_version=python if re.fullmatch(r"\d+\.\d+", python) else "3.12",
                         nvcc_threads=nvcc_threads)
    if check:
        check_target(plan, target)
    return plan


def check_target(plan: KernelPlan, target) -> None:
    check_required(plan, dict(target.kernel_plan.required), target.name, target.kernel_plan.code)


def patches_skipped(target) -> set[str]:
    """Source patches the target's ``kernel_plan.code`` turns off (``family``: the native ones)."""
    policy = target.kernel_plan
    return set(policy.native_patches) if policy.code == "family" else set()
