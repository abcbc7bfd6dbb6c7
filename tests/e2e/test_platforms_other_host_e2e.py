"""tests/support/platforms.py run by a real Python of the other architecture: the suite's own
platform tests (tests/test_support_platforms.py) in a container of the foreign platform (linux/arm64
under qemu-aarch64 on an x86_64 host, linux/amd64 under qemu-x86_64 on an arm64 one), whose
`uname -m` is that machine's. So the arm64 side of the helper is checked unfaked on an x86_64 CI
host, where no arm64 host is at hand.

The container is the Debian bookworm test base of that platform (Python 3.11); this checkout and
the pure-Python packages of the running interpreter's site-packages (pytest, packaging) are
mounted read-only, with no network. The tests that need the Docker engine are left out there.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest

from edgevllm.containers.docker import RunOptions
from support.images import python_image
from support.platforms import (
    foreign_arch,
    foreign_platform,
    machine,
    native_platform,
    require_runnable,
)

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
SHOW = ("import sys; sys.path.insert(0, 'tests'); from support import platforms as p; "
        "print('helper:', p.native_arch(), p.native_platform(), p.foreign_platform(), "
        "p.multiarch_libdir(p.native_arch()))")


def test_the_helper_on_a_real_python_of_the_other_architecture(engine):
    require_runnable(foreign_arch())
    site = sysconfig.get_paths()["purelib"]
    script = (f'uname -m; python3 -c "{SHOW}" && python3 -m pytest -q -p no:cacheprovider '
              '-m "not e2e" tests/test_support_platforms.py')
    proc = engine.run(RunOptions(
        image=python_image(engine, foreign_arch()), platform=foreign_platform(), remove=True,
        network="none",
        volumes=[f"{REPO}:/src:ro", f"{site}:/site:ro"], workdir="/src",
        env={"PYTHONPATH": "/src:/site", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
             "PYTHONDONTWRITEBYTECODE": "1"},
        command=["sh", "-c", script]), timeout=900)
    out = (proc.stdout + proc.stderr).decode(errors="replace")
    assert proc.returncode == 0, out[-4000:]
    lines = out.splitlines()
    assert lines[0] == machine(foreign_arch()), out[-2000:]
    # There, native and foreign are the other way round.
    assert (f"helper: {foreign_arch()} {foreign_platform()} {native_platform()} "
            f"/usr/lib/{machine(foreign_arch())}-linux-gnu") in lines, out[-2000:]
    assert " passed" in out and " failed" not in out, out[-2000:]
