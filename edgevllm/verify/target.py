"""The one place verify learns a target's compute capability (``cuda_arch`` in targets/*.yaml).

Accepts a target name (``thor``) or a compute capability (``11.0a``, ``12.1``).
"""

from __future__ import annotations

import re

from edgevllm.kernel.errors import UnknownTargetError
from edgevllm.verify.compat import CudaArch, parse_arch

_ARCH_TEXT = re.compile(r"^\d+\.\d[af]?$")


def target_cuda_arch(name: str) -> str:
    """``cuda_arch`` of a named target, e.g. ``"11.0a"`` for thor."""
    try:
        from edgevllm.model.targets import load_target
    except ImportError:  # targets module missing: read the YAML directly
        return _yaml_cuda_arch(name)
    return load_target(name).cuda_arch


def _yaml_cuda_arch(name: str) -> str:
    import yaml

    from edgevllm.kernel.paths import data_dirs

    for folder in data_dirs("targets"):
        path = folder / f"{name}.yaml"
        if path.is_file():
            return str(yaml.safe_load(path.read_text())["cuda_arch"])
    raise UnknownTargetError(f"unknown target {name!r}: add targets/{name}.yaml")


def resolve_target(target: str) -> tuple[str, CudaArch]:
    """``("thor", CudaArch(11, 0))`` for ``"thor"``; ``("12.1a", CudaArch(12, 1))`` for ``"12.1a"``."""
    text = str(target).strip()
    arch = text if _ARCH_TEXT.match(text) else target_cuda_arch(text)
    return text, parse_arch(arch)
