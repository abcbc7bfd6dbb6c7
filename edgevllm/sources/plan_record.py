"""Reading the record the kernel plan's CMake prelude writes (one ``KIND|field|...`` line per
call the tree made) into a ``KernelPlan``."""

from __future__ import annotations

import re
from pathlib import Path

from edgevllm.common.errors import PlanError
from edgevllm.common.foreign import path_inside
from edgevllm.sources.kernelplan import ArchGroup, CMakeDep, Extension, KernelPlan
from edgevllm.specs.cuda import arch_kind, best_kind


def _rel(path: str, shadow: str) -> str:
    return path[len(shadow) + 1:] if path.startswith(shadow + "/") else path


def _where(text: str) -> tuple[str, int]:
    """``"cmake/utils.cmake:527"`` -> (file, line); a call that was not renamed -> ("?", 0)."""
    file, _, line = text.rpartition(":")
    return (file, int(line)) if file and line.isdigit() else ("?", 0)


def parse_record(lines: list[str], shadow: str, arch_list: str, device: str,
           cuda_version: str) -> KernelPlan:
    plan = KernelPlan(arch_list=arch_list, device_arch=device, cuda_version=cuda_version,
                      cuda_archs=[])
    seen: dict[str, int] = {}
    messages: list[tuple[int, str]] = []   # (index of the group it follows, text)
    ext_records = []
    for raw in lines:
        kind, _, rest = raw.partition("|")
        fields = rest.split("|")
        if kind == "ARCHS":
            _add_group(plan, fields, shadow, device, seen)
        elif kind == "MSG":
            _note_message(plan, fields, messages)
        elif kind == "EXT":
            ext_records.append(fields)
        elif kind == "SRCOPT":
            _add_source_flag(plan, fields, shadow)
        elif kind == "DEP":
            _add_dep(plan, fields, shadow)
        elif kind == "MINVER":
            plan.cmake_minimum = fields[0]
        elif kind == "TGT":
            _add_target_flags(plan, fields)
        elif kind == "STD":
            plan.cuda_standard = fields[0]
    _label_groups(plan, messages)
    for fields in ext_records:
        _add_extension(plan, fields, shadow, device)
    for g in plan.groups:
        if g.name == "CUDA_ARCHS" and g.file == "CMakeLists.txt":
            plan.cuda_archs = list(g.result)
    return plan


def _items(text: str) -> list[str]:
    return [x for x in text.split(";") if x]


def _add_group(plan: KernelPlan, fields: list[str], shadow: str, device: str,
               seen: dict[str, int]) -> None:
    where, name, src, _tgt, res = (fields + [""] * 5)[:5]
    file, line = _where(where)
    if name.startswith("_"):  # a helper's local variable: name the group after the helper
        name = f"{_enclosing_function(_tree_file(shadow, file), line) or name}()"
    seen[name] = seen.get(name, 0) + 1
    key = name if seen[name] == 1 else f"{name}#{seen[name]}"
    if seen[name] == 2:  # the first one gets its number too, so that keys do not shift
        first = next(g for g in plan.groups if g.key == name)
        first.key = f"{name}#1"
    result = _items(res)
    plan.groups.append(ArchGroup(key=key, name=name, file=file, line=line,
                                 requested=_items(src), result=result,
                                 kind=best_kind(arch_kind(a, device) for a in result)))


def _note_message(plan: KernelPlan, fields: list[str], messages: list) -> None:
    where, mode, text = (fields + [""] * 3)[:3]
    if mode == "WARNING":
        plan.warnings.append(text.strip())
    if mode in ("FATAL_ERROR", "SEND_ERROR"):
        plan.errors.append(f"{where}: {' '.join(text.split())}")
    if re.match(r"\s*(Not building|Building|Not compiling|Compiling)\b", text):
        messages.append((len(plan.groups) - 1, text.strip()))


def _label_groups(plan: KernelPlan, messages: list) -> None:
    """Give each group the tree's own "Building X ..." line that follows it.

    Several intersections may run before their messages (KDA and GDN decode): among the groups
    since the previous message, the one sharing most words with the message gets it.
    """
    start = 0
    for index, text in messages:
        candidates = [g for g in plan.groups[start:index + 1] if not g.label]
        if candidates:
            words = set(re.findall(r"[a-z0-9]+", text.lower()))
            best = max(reversed(candidates), key=lambda g: len(words & _name_words(g.name)))
            if len(candidates) == 1 or words & _name_words(best.name):
                best.label = text[:120]
        start = max(start, index + 1) if candidates and all(g.label for g in candidates) \
            else start


def _name_words(name: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", name.lower().replace("_archs", ""))) - {"archs"}


def _tree_file(shadow: str, file: str) -> Path | None:
    """The record's file inside the evaluated copy; None for one outside it (the record is data
    the tree's CMake could have written: it names no host file to read)."""
    try:
        return path_inside(Path(shadow), file, what="the kernel plan's record", error=PlanError)
    except PlanError:
        return None


def _lines_above(path: Path | None, line: int) -> list[str]:
    """The lines of a CMake file up to ``line``, nearest first (none for a file not read)."""
    if path is None:
        return []
    try:
        return path.read_text(errors="replace").splitlines()[:line][::-1]
    except OSError:
        return []


def _enclosing_function(path: Path | None, line: int) -> str | None:
    """The ``function(NAME`` around ``line`` in a CMake file (for results kept in a local var)."""
    for text in _lines_above(path, line):
        if re.match(r"\s*endfunction\s*\(", text, re.I):
            return None
        match = re.match(r"\s*function\s*\(\s*(\w+)", text, re.I)
        if match:
            return match.group(1)
    return None


def _add_source_flag(plan: KernelPlan, fields: list[str], shadow: str) -> None:
    source, value = (fields + ["", ""])[:2]
    match = re.search(r"-gencode[; ]+(arch=[^>;\s]+)", value)
    if match:
        flags = plan.source_flags.setdefault(_rel(source, shadow), [])
        flag = f"-gencode {match.group(1)}"
        if flag not in flags:
            flags.append(flag)


def _gencode_arch(flag: str) -> str:
    """``-gencode arch=compute_121a,code=sm_121a`` -> ``12.1a``; a PTX code -> ``8.0+PTX``."""
    match = re.search(r"code=(sm|compute)_(\d+?)(\d)([af]?)$", flag)
    if not match:
        return ""
    arch = f"{match.group(2)}.{match.group(3)}{match.group(4)}"
    return f"{arch}+PTX" if match.group(1) == "compute" else arch


def _add_extension(plan: KernelPlan, fields: list[str], shadow: str, device: str) -> None:
    where, name, language, sources, archs, flags, includes = (fields + [""] * 7)[:7]
    file, line = _where(where)
    cuda = [_rel(s, shadow) for s in _items(sources) if s.endswith(".cu")]
    arches: list[str] = []
    for source in cuda:
        for flag in plan.source_flags.get(source, []):
            arch = _gencode_arch(flag)
            if arch and arch not in arches:
                arches.append(arch)
    arches += [a for a in _items(archs) if a not in arches and language == "CUDA"
               and re.fullmatch(r"\d+\.\d+[af]?(\+PTX)?", a)]
    if name == "_C" or (name.startswith("_C") and not plan.gpu_flags):
        plan.gpu_flags = _items(flags)
    kind = best_kind(arch_kind(a, device) for a in arches) if language == "CUDA" else "cpu"
    own = plan.target_flags.get(name, {})
    plan.extensions.append(Extension(
        name=name, file=file, line=line, language=language, arches=arches, kind=kind,
        cuda_sources=len(cuda), sources=cuda, compile_flags=_items(flags),
        definitions=own.get("compile_definitions", []),
        include_dirs=[_rel(d, shadow) for d in _items(includes)
                      + own.get("include_directories", []) if d != "csrc"]))


def _add_target_flags(plan: KernelPlan, fields: list[str]) -> None:
    command, target, values = (fields + ["", "", ""])[:3]
    kind = command.removeprefix("target_")
    for value in _items(values):
        cuda_only = re.fullmatch(r"\$<\$<COMPILE_LANGUAGE:CUDA>:(.*)>", value)
        if cuda_only:
            value = cuda_only.group(1)
        if value and "$<" not in value:
            plan.target_flags.setdefault(target, {}).setdefault(kind, []).append(value)


def _add_dep(plan: KernelPlan, fields: list[str], shadow: str) -> None:
    where, _how, name, repo, tag, _source_dir, url, subdir = (fields + [""] * 8)[:8]
    file, line = _where(where)
    if not repo and not url:
        return  # a local SOURCE_DIR (an override in effect), or populating an earlier declare
    if any(d.name == name for d in plan.deps):
        return
    path = _tree_file(shadow, file)
    env_var = _override_var(path, line)
    inside = subdir if subdir and env_var and _override_has_no_subdir(path, env_var) else ""
    plan.deps.append(CMakeDep(name=name, repo=repo, tag=tag, file=file, line=line,
                              env_var=env_var, url=url, override_subdir=inside))


# A FetchContent_Declare call of the tree's CMake (in the evaluated copy, the recording command
# that replaced it), comments removed; its arguments hold no ")".
_DECLARE = re.compile(r"(?:FetchContent_Declare|_ev_fcd)\s*\(([^)]*)\)", re.I)


def _override_has_no_subdir(path: Path | None, env_var: str) -> bool:
    """Whether the declare the tree makes with its override (``SOURCE_DIR`` from ``env_var``)
    names no ``SOURCE_SUBDIR``: the override folder then stands for the clone's subfolder (both
    declares read the same folder; vLLM 0.33.0's triton_kernels says so in words too)."""
    if path is None:
        return False
    try:
        text = "\n".join(line.split("#", 1)[0]
                         for line in path.read_text(errors="replace").splitlines())
    except OSError:
        return False
    for body in _DECLARE.findall(text):
        if f"ENV{{{env_var}}}" in body or f"${{{env_var}}}" in body:
            return not re.search(r"\bSOURCE_SUBDIR\b", body)
    return False


def _override_var(path: Path | None, line: int) -> str | None:
    """The nearest ``ENV{..._SRC_DIR}`` the file reads above the clone: the tree's override."""
    for text in _lines_above(path, line):
        match = re.search(r"ENV\{(\w*SRC_DIR\w*)\}", text)
        if match:
            return match.group(1)
    return None
