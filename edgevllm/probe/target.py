"""What the probe needs to know about a target, read from the target definition.

The probe reads only a few target fields (name, cuda_arch, device_name, runtime_env and the
``probe`` section). ``probe_target`` accepts a target name (loaded by ``edgevllm.specs.targets``),
the ``Target`` object it returns, or a plain mapping (tests).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from edgevllm.common.errors import UnknownTargetError

# What level 1 looks at when the target names nothing else: vLLM and the libraries it
# loads on these devices (CuTe DSL is the `cutlass` package of nvidia-cutlass-dsl).
DEFAULT_COMPONENTS = ("vllm", "torch", "flashinfer", "cutlass", "fastsafetensors")


@dataclass
class ProbeTarget:
    name: str
    cuda_arch: str  # "11.0a" / "12.1a"
    device_name: str = ""
    runtime_env: dict[str, str] = field(default_factory=dict)
    required_imports: list[str] = field(default_factory=lambda: list(DEFAULT_COMPONENTS))
    level2_model: str | None = None
    serve_args: list[str] = field(default_factory=list)
    cuda_version: str | None = None  # the device's CUDA ("13.0.2"): torch must match its major


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if obj is None:
        return default
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _from_object(obj: Any) -> ProbeTarget:
    probe = _get(obj, "probe")
    required = _get(probe, "required_imports")
    return ProbeTarget(
        name=str(_get(obj, "name")),
        cuda_arch=str(_get(obj, "cuda_arch")),
        device_name=str(_get(obj, "device_name") or ""),
        runtime_env={str(k): str(v) for k, v in (_get(obj, "runtime_env") or {}).items()},
        required_imports=list(required) if required is not None else list(DEFAULT_COMPONENTS),
        level2_model=_get(probe, "level2_model"),
        serve_args=[str(a) for a in (_get(probe, "serve_args") or [])],
        cuda_version=str(_get(obj, "cuda_version")) if _get(obj, "cuda_version") else None,
    )


def _load_by_name(name: str) -> Any:
    """The target from targets/*.yaml through ``edgevllm.specs.targets`` (the one loader)."""
    from edgevllm.specs.targets import load_target

    return load_target(name)


def probe_target(target: Any) -> ProbeTarget:
    """A ``ProbeTarget`` from a name, a target object or a mapping."""
    if isinstance(target, ProbeTarget):
        return target
    if isinstance(target, str):
        target = _load_by_name(target)
    result = _from_object(target)
    if not result.cuda_arch or result.cuda_arch == "None":
        raise UnknownTargetError(f"target '{result.name}' has no cuda_arch; "
                                 "set it in its YAML file")
    return result
