"""Tables for people (rich, on stdout): targets, mods outcomes. JSON output lives with each
module."""

from __future__ import annotations

from rich.table import Table

from edgevllm.common.console import out_console


def print_targets(targets) -> None:
    table = Table(title="edgevllm targets", title_justify="left")
    for column in ("target", "device", "platform", "arch list", "CUDA", "jobs", "default mods"):
        table.add_column(column)
    for t in targets:
        table.add_row(t.name, t.device_name, t.platform, t.torch_cuda_arch_list, t.cuda_version,
                      f"{t.max_jobs}x{t.nvcc_threads}", ", ".join(t.default_mods))
    out_console().print(table)
