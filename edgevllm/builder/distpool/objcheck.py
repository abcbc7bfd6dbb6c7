"""The compile step's check of workers' objects under ``--dist`` (``inimage_check.py``, run in
the image): the one owner of what it stages and of how often it checks. sccache takes whatever
object a worker sends back, so the build's first CUDA unit and one in ``CHECK_EVERY`` of the
others are compiled again in the step without sccache and compared section by section; a
difference stops the compile (builder/distpool/guard.py turns it into the build's one line).
Cost: those units compile twice on the builder, about 1/CHECK_EVERY of the compile's core time
plus one unit.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from edgevllm.common.labels import SCCACHE_MOUNT

CHECK_EVERY = 16        # besides the first CUDA unit, one in 16 compiled again here and compared
CHECK_DIR = "check"     # in the edgevllm-sccache context: the shim and the script, first on PATH
CHECK_SCRIPT = "inimage_check.py"
CHECK_MARKER = "edgevllm-dist-check"
SHIM = """#!/bin/sh
# edgevllm --dist: nvcc's units through the check (builder/distpool/guard.py), the rest straight
case "$1" in */nvcc|nvcc) exec python3 "{mount}/{dir}/{script}" "$@" ;; esac
exec "{mount}/sccache" "$@"
"""


def template_values() -> dict[str, object]:
    """What the compile template's ``--dist`` block reads of the check."""
    return {"check_dir": CHECK_DIR, "check_every": CHECK_EVERY}


def stage_check(dest: Path) -> None:
    """The shim (named ``sccache``) and the check script, under ``dest/check``."""
    folder = dest / CHECK_DIR
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(Path(__file__).with_name(CHECK_SCRIPT), folder / CHECK_SCRIPT)
    shim = folder / "sccache"
    shim.write_text(SHIM.format(mount=SCCACHE_MOUNT, dir=CHECK_DIR, script=CHECK_SCRIPT))
    os.chmod(shim, 0o755)
