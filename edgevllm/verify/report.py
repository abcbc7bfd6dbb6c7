"""Show a verdict: a per-library table and a verdict line on stdout, JSON written atomically.

The level cell carries its reason: ``compatible (85/111; 26 sm_90a/sm_100f-only:
cutlass_scaled_mm_sm90, ...)`` = 85 of 111 units run (the worst of them compatibly), 26 carry
only sm_90a/sm_100f code, whose first kernels are named. The JSON lists every such unit with all
its kernels. ``check_json_target`` refuses a folder or an unwritable place before any scan.
"""

from __future__ import annotations

import os
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from edgevllm.common.console import out_console
from edgevllm.common.errors import ConfigError
from edgevllm.common.fsutil import atomic_write_json
from edgevllm.verify.demangle import short_name
from edgevllm.verify.judge import NO_GPU_CODE, LibraryVerdict, Verdict
from edgevllm.verify.library import short_path

_LEVEL_STYLE = {"native": "green", "compatible": "green", "ptx-jit": "yellow", "none": "red",
                "corrupt": "red", "-": "dim"}


def _result(lib: LibraryVerdict) -> Text:
    if not lib.passed:
        return Text("FAIL", style="bold red")
    return Text("ok" if lib.gated else "-", style="green" if lib.gated else "dim")


SHOWN_UNITS = 3  # kernels named in a table cell; the JSON has them all


def level_cell(lib: LibraryVerdict) -> str:
    """The level and its reason, as one line of text."""
    text = lib.report.status if lib.level == "corrupt" else lib.level
    cover = lib.coverage
    if lib.reason == NO_GPU_CODE:
        text = NO_GPU_CODE
    elif cover.total > 1 or cover.below:
        reason = f"{cover.at_headline}/{cover.total}"
        if cover.below:
            reason += (f"; {len(cover.below)} {_short_arches(cover.below)}-only: "
                       f"{_short_kernels(cover.below)}")
        text += f" ({reason})"
    if lib.note:
        text += f" [{lib.note}]"
    return text


def _ordered(units) -> list:
    """Units with nothing that runs first, then PTX-only ones; named kernels before unnamed."""
    return sorted(units, key=lambda u: (u.level != "none", not u.kernels, u.unit))


def _short_arches(units) -> str:
    seen: list[str] = []
    for unit in _ordered(units):
        sass = [a for a in unit.arches if a.startswith("sm_")] or unit.arches
        seen += [a for a in sass if a not in seen]
    return "/".join(seen[:3]) + ("/…" if len(seen) > 3 else "")


def _short_kernels(units) -> str:
    """Kernel names of the first units that have some (a unit may hold only device-link glue);
    ``unit N`` when none of them has a kernel."""
    named = [unit for unit in _ordered(units) if unit.kernels]
    if not named:
        return ", ".join(f"unit {unit.unit}" for unit in units[:SHOWN_UNITS]) + \
            ("…" if len(units) > SHOWN_UNITS else "")
    names: list[str] = []
    for unit in named:
        name = short_name(unit.kernels[0])
        name = name if len(name) <= 60 else name[:59] + "…"
        if name not in names:
            names.append(name)
    return ", ".join(names[:SHOWN_UNITS]) + ("…" if len(names) > SHOWN_UNITS else "")


def _level(lib: LibraryVerdict) -> Text:
    return Text(level_cell(lib), style=_LEVEL_STYLE.get(lib.level, ""))


def needs_cell(lib: LibraryVerdict) -> str:
    if lib.mode == "every-unit":
        return f"{lib.required}, every unit"
    if lib.mode == "coverage":
        return f"{lib.required}, some unit"
    return "report"


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
    for lib in sorted(verdict.libraries, key=lambda v: (v.passed, not v.gated, v.report.path)):
        table.add_row(short_path(lib.report.path), lib.rule, _arches(lib.report.arches("sass")),
                      _arches(lib.report.arches("ptx")), _level(lib),
                      needs_cell(lib), _result(lib))
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
    for line in verdict.first_start().lines():
        console.print(Text(line), soft_wrap=True, highlight=False)
    style = "bold green" if verdict.passed else "bold red"
    console.print(Text(verdict.summary(), style=style), soft_wrap=True)


def check_json_target(path: Path | str) -> Path:
    """``--json FILE`` must name a file we can create (missing folders are made): not a folder,
    not below a file, not in a read-only place."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"--json {path}: is a folder; give a file name such as "
                          f"{path}/verify.json")
    ancestor = path.absolute().parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ConfigError(f"--json {path}: {ancestor} is a file, not a folder; choose another "
                          "place")
    if not os.access(ancestor, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ConfigError(f"--json {path}: not writable; choose another place")
    return path


def write_json(verdict: Verdict, path: Path | str) -> Path:
    check_json_target(path)
    try:
        return atomic_write_json(path, verdict.to_json())
    except OSError as exc:
        raise ConfigError(f"--json {path}: cannot write it ({exc.strerror})") from None
