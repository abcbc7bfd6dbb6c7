"""Binary kernel-arch inspection: which GPU architectures the CUDA libraries in an image carry,
and whether they run on a target (``inv verify``). See docs/verify.md.

Public API (from ``api``, ``judge``, ``compat``, ``library``, ``policy``, ``report``, ``diff``),
imported on first use so that ``import edgevllm.verify`` costs nothing.
"""

from __future__ import annotations

import importlib

# ``judge`` is also a submodule's name: bind the function now, or importing the submodule
# anywhere would leave the module object under this name.
from edgevllm.verify.judge import judge  # noqa: E402, F401  (cheap: no pydantic, yaml or rich)

_WHERE = {
    "scan_file": "api", "scan_image": "api", "scan_path": "api", "scan_tarball": "api",
    "verify": "api", "verify_image": "api",
    "CudaArch": "compat", "parse_arch": "compat",
    "LibraryVerdict": "judge", "Verdict": "judge", "judge": "judge",
    "LibraryReport": "library",
    "Policy": "policy", "load_policy": "policy",
    "print_verdict": "report", "write_json": "report",
    "diff_sources": "diff", "print_diff": "diff",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'edgevllm.verify' has no attribute {name!r}")
    return getattr(importlib.import_module(f"edgevllm.verify.{_WHERE[name]}"), name)
