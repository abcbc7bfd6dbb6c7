"""The container's entry for ``inv serve --gpu-memory-gb`` / ``--earlyoom`` (stdlib only).

It runs INSIDE the container, as ``python3 -c <this file's text> CONFIG COMMAND...``: the launcher
cannot know the device's memory (only the container sees the GPU), so the GiB budget becomes
vLLM's ``--gpu-memory-utilization`` fraction here, at start. CONFIG is one JSON object:
``{"gpu_memory_gib": 40, "earlyoom": ["-m", "4", ...]}`` (either key optional).

* ``gpu_memory_gib``: fraction = GiB × 2^30 / the device's total memory, rounded DOWN to three
  decimals (never more than asked); any ``--gpu-memory-utilization`` already in COMMAND is
  replaced. A budget larger than the device is an error (exit 2), not a silent 1.0.
* ``earlyoom``: earlyoom is started first with these flags (it kills the largest process before
  the kernel's OOM killer freezes a unified-memory box); a missing earlyoom is exit 127 with a line
  saying which mod installs it.

Then COMMAND replaces this process (``exec``), so the server receives Docker's signals itself.
``EDGEVLLM_DEVICE_MEMORY_BYTES`` stands in for the GPU's total memory where there is no GPU (the
tests); on a device the figure comes from torch.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys

FLAG = "--gpu-memory-utilization"


def fraction(gib: float, total_bytes: int) -> float:
    """vLLM's memory fraction for a budget of ``gib`` GiB on a device of ``total_bytes``."""
    if total_bytes <= 0:
        raise ValueError(f"device memory {total_bytes} bytes is not a size")
    value = math.floor(gib * 2**30 / total_bytes * 1000) / 1000
    if value <= 0:
        raise ValueError(f"{gib} GiB is less than 0.1% of the device's "
                         f"{total_bytes / 2**30:.1f} GiB")
    if value > 1:
        raise ValueError(f"{gib} GiB is more than the device's {total_bytes / 2**30:.1f} GiB")
    return value


def with_fraction(command: list[str], value: float) -> list[str]:
    """``command`` without any ``--gpu-memory-utilization`` of its own, then the computed one."""
    out, skip = [], False
    for arg in command:
        if skip:
            skip = False
        elif arg == FLAG:
            skip = True
        elif not arg.startswith(FLAG + "="):
            out.append(arg)
    return out + [FLAG, f"{value:.3f}"]


def device_total_bytes() -> int:
    override = os.environ.get("EDGEVLLM_DEVICE_MEMORY_BYTES")
    if override:
        return int(override)
    import torch  # only on the device: the image's torch sees the GPU

    return int(torch.cuda.mem_get_info()[1])


def start_earlyoom(args: list[str]) -> None:
    binary = shutil.which("earlyoom")
    if binary is None:
        print("edgevllm: earlyoom is not installed in this image: build it with the earlyoom mod "
              "(inv build --mod earlyoom)", file=sys.stderr, flush=True)
        raise SystemExit(127)
    subprocess.Popen([binary, *args], stdin=subprocess.DEVNULL)


def main(argv: list[str]) -> None:
    config, command = json.loads(argv[0]), argv[1:]
    if config.get("earlyoom") is not None:
        start_earlyoom(list(config["earlyoom"]))
    gib = config.get("gpu_memory_gib")
    if gib is not None:
        total = device_total_bytes()
        try:
            value = fraction(float(gib), total)
        except ValueError as exc:
            print(f"edgevllm: --gpu-memory-gb: {exc}", file=sys.stderr, flush=True)
            raise SystemExit(2) from None
        print(f"edgevllm: {gib} GiB of {total / 2**30:.1f} GiB -> {FLAG} {value:.3f}",
              file=sys.stderr, flush=True)
        command = with_fraction(command, value)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
