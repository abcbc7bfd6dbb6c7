"""The real Compose v2 (``docker compose`` or Debian's ``docker-compose``) reading a file a test
wrote: ``compose config`` parses and resolves it without a Docker engine, so a file it refuses is
one a user's ``docker compose up`` would refuse too."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml


def compose_binary() -> list[str]:
    """``docker compose`` (v2 plugin) or Debian's ``docker-compose`` (also v2); FAIL if neither."""
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True)
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.fail("Compose v2 is needed: apt-get install -t trixie docker-compose (Debian) or the "
                "docker-compose-plugin package (Docker's repository)")


def compose_config(path: Path, env: dict[str, str] | None = None) -> dict:
    """``compose -f PATH config``: the resolved file (interpolated with ``env`` alone); fails the
    test with Compose's own message when Compose refuses it."""
    proc = subprocess.run(compose_binary() + ["-f", str(path), "config"], capture_output=True,
                          text=True, env={"PATH": "/usr/local/bin:/usr/bin:/bin",
                                          "HOME": str(path.parent), **(env or {})})
    assert proc.returncode == 0, proc.stderr
    return yaml.safe_load(proc.stdout)
