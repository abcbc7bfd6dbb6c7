"""``inv track``'s report for people (a rich table), for an issue or a release page (Markdown),
and the bumped spec (``--write-spec``: the new release, retired mods dropped; written
atomically)."""

from __future__ import annotations

from pathlib import Path

import yaml
from rich.table import Table

from edgevllm.common.console import out_console
from edgevllm.common.fsutil import atomic_write_text
from edgevllm.specs.buildspec import spec_from_dict
from edgevllm.track.report import NO_GITHUB, Start, retired


def rows(report: dict) -> list[tuple[str, str, str, str]]:
    """(item, name, old → new, verdict) for every item of the report, in its order."""
    out: list[tuple[str, str, str, str]] = []
    for p in report.get("patches", []):
        verdict = "retire" if p["retire"] else p["new"]
        out.append(("patch", p["name"], f"{p['old']} → {p['new']}", f"{verdict}: {p['detail']}"))
    for m in report.get("mods", []):
        change = "; ".join(f"{k} {v}" for k, v in m["versions"].items()) or "-"
        judged = m.get("applier")
        applier = (f"; the applier: {judged['verdict']}: {judged['detail']}" if judged
                   else "; the applier: no edit step to judge")
        out.append(("mod", m["name"], change, f"{m['verdict']}: {m['detail']}{applier}"))
    for pin in report.get("pins", []):
        installed = f" (the image installs {pin['installed']})" if pin["installed"] else ""
        out.append(("pin", pin["pin"], f"{_short(pin['old'])} → {_short(pin['new'])}",
                    ("changed" if pin["changed"] else "same") + installed))
    plan = report.get("plan", {})
    for change in plan.get("changes", []):
        out.append((f"plan {change['what']}", change["name"], f"{change['old']} → "
                    f"{change['new']}", change["change"]))
    for key in ("new_error", "new_gap"):
        if plan.get(key):
            out.append(("plan", "target", "-", plan[key]))
    if plan and not plan.get("changes") and not plan.get("new_error"):
        out.append(("plan", "all", "-", "no group or extension changes for the target"))
    for side in ("old", "new"):
        refused = report.get("requirements", {}).get(f"{side}_refused")
        if refused:
            out.append(("requirements", side, "-", f"the build refuses them: {refused}"))
    for pick in report.get("picks", []):
        out.append(("pick", pick["pick"], "-", pick["merged"]))
    mode = report.get("mode")
    if mode:
        out.append(("mode", "make image", f"{mode['old']['mode']} → {mode['new']['mode']}",
                    mode["new"]["why"]))
    return out


def _short(value: str) -> str:
    return value[:12] if len(value) == 40 and value.isalnum() else value


def title(report: dict) -> str:
    start, to = report["from"], report.get("to")
    new = to["vllm"] if to else "-"
    note = report.get("rule", {}).get("note")  # a git ref: the bump rule is for releases only
    what = f" ({to['what']})" if to and to.get("what") else ""
    return (f"vLLM {start['vllm']} → {new}{what} for {start['target']} ({start['origin']}): "
            f"{report['verdict']}" + (f" ({note})" if note else ""))


def print_table(report: dict) -> None:
    if report.get("to") is None:  # nothing compared: the one line says why
        out_console().print(title(report), soft_wrap=True)
        return
    table = Table(title=title(report), title_justify="left")
    for column in ("item", "name", "old → new", "verdict"):
        table.add_column(column, overflow="fold")
    for row in rows(report):
        table.add_row(*row)
    out_console().print(table)


def markdown(report: dict) -> str:
    lines = [f"### {title(report)}", "", "| item | name | old → new | verdict |",
             "|---|---|---|---|"]
    for row in rows(report):
        lines.append("| " + " | ".join(cell.replace("|", "\\|").replace("\n", " ")
                                        for cell in row) + " |")
    figures = report.get("figures")
    if figures:
        lines += ["", f"{report['seconds']} s, {figures['bytes_read']} bytes read, "
                      f"{figures['bytes_downloaded']} downloaded; cherry-picks: {NO_GITHUB}"]
    return "\n".join(lines) + "\n"


def write_spec(report: dict, start: Start, out: Path) -> dict[str, list[str]]:
    """The spec bumped to the report's release, retired mods dropped (what was dropped is
    returned); written atomically, nothing where the report has no newer release."""
    dropped = retired(report)
    data = start.spec.model_dump(mode="json", exclude_defaults=True)
    data["target"] = start.spec.target
    data.pop("mode_from_lock", None)
    vllm = dict(data.get("vllm") or {})
    to = report["to"]
    vllm["ref"] = to["commit"] if to.get("commit") else f"v{to['vllm']}"  # --to REF: its commit
    if to.get("repo"):
        vllm["repo"] = to["repo"]
        vllm.pop("pr", None)
    if vllm.get("cherry_picks"):
        vllm["cherry_picks"] = [p for p in vllm["cherry_picks"] if p not in dropped["picks"]]
    data["vllm"] = vllm
    if dropped["mods"]:
        data["remove_mods"] = sorted({*data.get("remove_mods", []), *dropped["mods"]})
        if data.get("mods"):
            data["mods"] = [m for m in data["mods"] if m not in dropped["mods"]]
    header = (f"# inv track: vLLM {report['from']['vllm']} → {report['to']['vllm']}; dropped "
              f"mods: {', '.join(dropped['mods']) or 'none'}; dropped picks: "
              f"{', '.join(dropped['picks']) or 'none'}; retired patches (chosen by the "
              f"target, not the spec): {', '.join(dropped['patches']) or 'none'}\n")
    spec_from_dict(data, str(out))  # a spec the build reads, else one line and nothing written
    atomic_write_text(out, header + yaml.safe_dump(data, sort_keys=True))
    return dropped
