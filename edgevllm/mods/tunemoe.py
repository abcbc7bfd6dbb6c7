"""``inv tune-moe``: run vLLM's fused-MoE tuner inside a built image on the device, and store the
result in the fused-MoE config mod's data (``mods/fused-moe-configs/configs/``).

The tuner is vLLM's ``benchmarks/kernels/benchmark_moe.py --tune --save-dir DIR``; it reads the
expert count and intermediate size from ``--model``'s config and writes
``E={E},N={N},device_name={device}[,dtype=...].json``. The script is not part of the vLLM wheel, so
it is mounted from the host (take it from the same vLLM version as the image).
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from edgevllm.common.dataload import load_json
from edgevllm.common.errors import ConfigError, ModError
from edgevllm.common.fsutil import atomic_write_text
from edgevllm.containers.docker import DockerEngine, RunOptions

MOE_MOD = "fused-moe-configs"
CONFIG_KEYS = {"BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps",
               "num_stages"}
_IN = "/edgevllm-tune"
_NAME = re.compile(r"^E=(\d+),N=(\d+),device_name=([^,]+)(,.*)?\.json\Z")


@dataclass
class TuneRequest:
    image: str
    model: str
    script: Path
    out_dir: Path
    tp_size: int = 1
    dtype: str = "auto"
    batch_sizes: tuple[int, ...] = ()
    trust_remote_code: bool = False


def file_device_name(device_name: str) -> str:
    """vLLM's file-name form of a device name: whitespace and '/' become '_'."""
    return re.sub(r"[\s/]", "_", device_name)


def run_options(req: TuneRequest) -> RunOptions:
    """The ``docker run`` of the tuner: GPU runtime, script and output folder bind-mounted."""
    command = [f"{_IN}/benchmark_moe.py", "--model", req.model, "--tp-size", str(req.tp_size),
               "--dtype", req.dtype, "--tune", "--save-dir", f"{_IN}/out"]
    if req.batch_sizes:
        command += ["--batch-size", *[str(b) for b in req.batch_sizes]]
    if req.trust_remote_code:
        command.append("--trust-remote-code")
    return RunOptions(
        image=req.image, command=command, remove=True, entrypoint="python3",
        runtime="nvidia", gpus="all", ipc="host",
        volumes=[f"{req.script.resolve()}:{_IN}/benchmark_moe.py:ro",
                 f"{req.out_dir.resolve()}:{_IN}/out"],
        # The token (for gated models) is passed by name so its value never lands in argv.
        env_names=["HF_TOKEN"] if os.environ.get("HF_TOKEN") else [],
    )


def validate_config(path: Path) -> dict:
    """A tuned file must be a table batch-size → complete Triton config."""
    try:
        table = load_json(path.read_bytes(), str(path), ModError)
    except (OSError, ValueError) as exc:
        raise ModError(f"{path}: not a JSON fused-MoE config ({exc})") from None
    if not isinstance(table, dict) or not table:
        raise ModError(f"{path}: expected a non-empty mapping batch size → config")
    for key, value in table.items():
        if not str(key).isdigit() or not isinstance(value, dict) or not CONFIG_KEYS <= set(value):
            raise ModError(f"{path}: entry '{key}' is not a batch size with "
                           f"{', '.join(sorted(CONFIG_KEYS))}")
    return table


def ingest(out_dir: Path, configs_dir: Path, device_name: str, experts: int | None = None,
           intermediate: int | None = None) -> list[Path]:
    """Copy the tuner's result files into ``configs_dir`` (atomically, each validated).

    Only files for ``device_name`` are taken; with ``experts``/``intermediate`` the file for
    that shape must be among them.
    """
    want_device = file_device_name(device_name)
    found = []
    for path in sorted(Path(out_dir).glob("*.json")):
        match = _NAME.match(path.name)
        if not match:
            continue
        if match.group(3) != want_device:
            raise ModError(f"{path.name} was tuned on {match.group(3)}, not {want_device}: "
                           "run tune-moe on the target device")
        if experts is not None and int(match.group(1)) != experts:
            continue
        if intermediate is not None and int(match.group(2)) != intermediate:
            continue
        validate_config(path)
        found.append(path)
    if not found:
        shape = f"E={experts},N={intermediate}" if experts or intermediate else "any shape"
        raise ModError(f"the tuner wrote no {shape} config for {want_device} in {out_dir}; "
                       "check --model, --tp-size and the tuner's output")
    stored = []
    for path in found:
        dest = Path(configs_dir) / path.name
        atomic_write_text(dest, path.read_text())
        stored.append(dest)
    return stored


def tune(req: TuneRequest, engine: DockerEngine, configs_dir: Path, device_name: str,
         experts: int | None, intermediate: int | None, timeout: float | None = None) -> list[Path]:
    if not req.script.is_file():
        raise ConfigError(f"--script {req.script}: not a file; point it at vLLM's "
                          "benchmarks/kernels/benchmark_moe.py (same version as the image)")
    engine.image_inspect(req.image)
    req.out_dir.mkdir(parents=True, exist_ok=True)
    proc = engine.run(run_options(req), timeout=timeout)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).decode(errors="replace").strip().splitlines()
        raise ModError(f"the MoE tuner failed in {req.image} (exit {proc.returncode}): "
                       f"{tail[-1] if tail else 'no output'}")
    return ingest(req.out_dir, configs_dir, device_name, experts, intermediate)


def scratch_dir() -> tempfile.TemporaryDirectory:
    """The tuner's output folder, of this process alone: gone when its ``with`` block ends."""
    return tempfile.TemporaryDirectory(prefix="edgevllm-tune-")
