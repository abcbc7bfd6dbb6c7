"""Show a verdict: a per-library table and a verdict line on stdout, JSON written atomically."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from edgevllm.kernel.console import out_console
from edgevllm.kernel.fsutil import atomic_write_json
from edgevllm.verify.judge import LibraryVerdict, Verdict
from edgevllm.verify.library import short_path

_LEVEL_STYLE = {"native": "green", "compatible": "green", "ptx-jit": "yellow", "none": "red",
                "corrupt": "red", "-": "dim"}


def _result(lib: LibraryVerdict) -> Text:
    if not lib.passed:
        return Text("FAIL", style="bold red")
    return Text("ok" if lib.gated else "-", style="green" if lib.gated else "dim")


def _level(lib: LibraryVerdict) -> Text:
    text = lib.report.status if lib.level == "corrupt" else lib.level
    if lib.note:
        text += f" ({lib.note})"
    return Text(text, style=_LEVEL_STYLE.get(lib.level, ""))


def _arches(names: list[str]) -> str:
    """``sm_75,80,110a``: one prefix, then the numbers, so a long list stays one glance wide."""
    if not names:
        return "-"
    prefix = names[0].split("_")[0] + "_"
    return prefix + ",".join(name.split("_", 1)[1] for name in names)


def build_table(verdict: Verdict) -> Table:
    table = Table(title=f"kernel arches for {verdict.target} (compute {verdict.cuda_arch})",
                  title_justify="left", show_lines=False)
    for column in ("library", "rule", "SASS", "PTX", "level", "needs", "result"):
        table.add_column(column, overflow="fold")
    for lib in sorted(verdict.libraries, key=lambda l: (l.passed, not l.gated, l.report.path)):
        table.add_row(short_path(lib.report.path), lib.rule, _arches(lib.report.arches("sass")),
                      _arches(lib.report.arches("ptx")), _level(lib),
                      lib.required, _result(lib))
    return table


def _table_console(console: Console) -> Console:
    """A log file or pipe has no width: give it one wide line per library, not 80 columns."""
    if console.is_terminal:
        return console
    return Console(width=max(console.width, 140), highlight=False, no_color=console.no_color)


def print_verdict(verdict: Verdict) -> None:
    console = out_console()
    if verdict.libraries:
        _table_console(console).print(build_table(verdict))
    style = "bold green" if verdict.passed else "bold red"
    console.print(Text(verdict.summary(), style=style), soft_wrap=True)


def write_json(verdict: Verdict, path: Path | str) -> Path:
    return atomic_write_json(path, verdict.to_json())
