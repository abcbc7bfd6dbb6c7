"""The real ``cosign`` (Debian's package, 2.5; .ci/install-engine.sh installs it), run offline:
a key, not a certificate, so no transparency log; plain HTTP to the loopback test registry."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


def cosign_binary() -> str:
    found = shutil.which("cosign")
    if found is None:
        raise RuntimeError("these tests need the real cosign: apt-get install cosign (Debian; "
                           "bash .ci/install-engine.sh installs it)")
    return found


def run_cosign(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "COSIGN_PASSWORD": "test-password", "COSIGN_YES": "true",
           "HOME": str(cwd or os.environ.get("HOME", "/tmp"))}
    return subprocess.run([cosign_binary(), *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=120)


def cosign_verify(kind: str | None, public: Path | str, ref: str) -> subprocess.CompletedProcess:
    """``cosign verify`` (kind None) or ``cosign verify-attestation --type kind``."""
    offline = ["--key", str(public), "--insecure-ignore-tlog=true", "--allow-http-registry"]
    if kind is None:
        return run_cosign("verify", *offline, ref)
    return run_cosign("verify-attestation", *offline, "--type", kind, ref)
