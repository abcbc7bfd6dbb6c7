"""The real ``skopeo`` (Debian's package; .ci/install-engine.sh installs it): copies between
registries and OCI layouts, digests preserved, plain HTTP to the loopback test registries. Its
own signature policy is not what these tests check (cosign is): ``--insecure-policy``."""

from __future__ import annotations

import shutil
import subprocess


def skopeo_binary() -> str:
    found = shutil.which("skopeo")
    if found is None:
        raise RuntimeError("these tests need the real skopeo: apt-get install skopeo (Debian; "
                           "bash .ci/install-engine.sh installs it)")
    return found


def run_skopeo(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([skopeo_binary(), "--insecure-policy", *args], capture_output=True,
                          text=True, timeout=120)


def skopeo_copy(source: str, dest: str) -> subprocess.CompletedProcess:
    """``skopeo copy --all --preserve-digests``: the bytes, so the digests, kept."""
    tls = [f"--{side}-tls-verify=false" for side in ("src", "dest")
           if (source if side == "src" else dest).startswith("docker://")]
    return run_skopeo("copy", "--all", "--preserve-digests", *tls, source, dest)
