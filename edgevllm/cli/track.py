"""``inv track``: what a newer vLLM release means for an image, before building it (docs/track.md).

Exit codes: 0 nothing to do, 20 rebuild recommended, 21 a fix is broken
(``edgevllm/track/report.py``); an error exits with its class's code.
"""

from __future__ import annotations

import json as jsonlib
from pathlib import Path

from invoke import Exit

from edgevllm.cli._common import cli_task
from edgevllm.common.errors import SpecError
from edgevllm.common.grammar import flag_int

_TRACK_HELP = {
    "from": "what the image is built from: a lock (a name with 'lock' in it) or a spec YAML "
            "(default: --target's default spec)",
    "target": "the target (thor, spark) where no --from is given",
    "to": "a vLLM release (0.33.0) or 'latest' (default): the newest release at least "
          "--min-age-days old; or a git ref of the spec's vLLM repository (a tag, a branch, "
          "a full SHA, pr:N or a PR URL), fetched as the build fetches it (no age rule)",
    "min-age-days": "candidates only from releases uploaded at least this many days ago "
                    "(default 7)",
    "json": "print the report as JSON on stdout instead of the table",
    "markdown": "print the report as Markdown (an issue, a release page)",
    "write-spec": "write the bumped spec here (retired mods dropped; says what it dropped)",
}


@cli_task(help=_TRACK_HELP, auto_shortflags=False)
def track(c, from_=None, target=None, to="latest", min_age_days="7", json=False, markdown=False,
          write_spec=None):
    """Compare what an image is built from with a newer vLLM release (PyPI sdists) or a git ref
    (the git mirror), data only.

    Per item: source patches, mods, pins, the kernel plan, cherry-picks and the mode; exits 0
    (nothing to do), 20 (rebuild recommended) or 21 (a fix is broken).
    """
    from edgevllm.common import console
    from edgevllm.track.render import markdown as to_markdown
    from edgevllm.track.render import print_table
    from edgevllm.track.render import write_spec as write_bumped
    from edgevllm.track.report import start_of
    from edgevllm.track.report import track as run_track

    if json and markdown:
        raise SpecError("--json and --markdown: give one of them")
    if not from_ and not target:
        raise SpecError("no --from LOCK|SPEC and no --target: give one")
    days = flag_int(min_age_days, "--min-age-days", 0, 3650)
    out = Path(write_spec) if write_spec else None
    if out is not None and not out.parent.is_dir():
        raise SpecError(f"--write-spec {write_spec}: no folder {out.parent}")
    start = start_of(from_, target)
    report = run_track(start, str(to or "latest"), days)
    if json:
        print(jsonlib.dumps(report, indent=2, sort_keys=True))
    elif markdown:
        print(to_markdown(report), end="")
    else:
        print_table(report)
    if out is not None:
        if report.get("to") is None:
            console.info(f"--write-spec: nothing to bump; {out} not written")
        else:
            dropped = write_bumped(report, start, out)
            console.info(f"wrote {out}: vLLM {report['to']['vllm']}; dropped mods: "
                         f"{', '.join(dropped['mods']) or 'none'}")
    if report["exit_code"]:
        raise Exit(code=report["exit_code"])
