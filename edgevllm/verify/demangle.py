"""Readable kernel names: C++ symbols demangled with binutils' ``c++filt`` (one process for all
names), else the PyPI ``cxxfilt`` package, else left as they are.

``short_name`` cuts a demangled signature down to the function's own name for a table cell:
``void vllm::cutlass_scaled_mm_sm90<float>(float*)`` → ``cutlass_scaled_mm_sm90``.
"""

from __future__ import annotations

import shutil
import subprocess


def demangle(names: list[str]) -> dict[str, str]:
    """Mangled → demangled for every name (a name that is not C++ maps to itself)."""
    unique = sorted({name for name in names if name})
    if not unique:
        return {}
    tool = shutil.which("c++filt")
    if tool:
        try:
            proc = subprocess.run([tool], input="\n".join(unique) + "\n", capture_output=True,
                                  text=True, timeout=60)
            lines = proc.stdout.splitlines()
            if proc.returncode == 0 and len(lines) == len(unique):
                return dict(zip(unique, lines, strict=True))
        except (OSError, subprocess.SubprocessError):
            pass
    return {name: _cxxfilt(name) for name in unique}


def _cxxfilt(name: str) -> str:
    try:
        import cxxfilt
    except ImportError:  # cxxfilt wraps the C library's demangler; where it cannot load, the
        return name       # mangled name is still a kernel's name
    try:
        return cxxfilt.demangle(name)
    except Exception:  # cxxfilt raises its own error class for names it cannot read
        return name


_WRAPPERS = ("cutlass::device_kernel<", "cutlass::Kernel<", "cutlass::Kernel2<")
_GENERIC = {"cutlass", "device_kernel", "Kernel", "Kernel2", "gemm", "kernel", "cute", "detail",
            "flash", "vllm", "std"}


def short_name(name: str) -> str:
    """The kernel's own name for a table cell: no return type, namespaces, templates or
    arguments; CUTLASS's ``device_kernel<X<...>>`` wrapper is looked through to ``X``."""
    if name.startswith("_Z"):  # still mangled (c++filt gave up on a very long name)
        return _mangled_short(name)
    text = name[5:] if name.startswith("void ") else name
    for wrapper in _WRAPPERS:
        if text.startswith(wrapper):
            text = text[len(wrapper):]
            break
    cut = min((i for i in (text.find("<"), text.find("(")) if i >= 0), default=len(text))
    head = text[:cut].strip().rsplit(" ", 1)[-1]
    return head.rsplit("::", 1)[-1] or name


def _mangled_short(name: str) -> str:
    """The first distinctive ``<length><identifier>`` of an Itanium-mangled name."""
    index = 2
    found: list[str] = []
    while index < len(name) and len(found) < 12:
        if name[index].isdigit():
            end = index
            while end < len(name) and name[end].isdigit():
                end += 1
            length = int(name[index:end])
            found.append(name[end:end + length])
            index = end + length
        else:
            index += 1
    useful = [part for part in found if part and part not in _GENERIC]
    return useful[0] if useful else name[:40]
