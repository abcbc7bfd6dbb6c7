"""What a registry holds, through docker's own credentials and insecure-registry rules: push,
a tag's digest, a tag's raw manifest."""

from __future__ import annotations

import json

from edgevllm.common.errors import EngineError
from edgevllm.containers.daemon import Daemon


class Registry(Daemon):
    """The registries the engine pushes to and reads from (``docker push``,
    ``buildx imagetools``)."""

    def push(self, ref: str) -> str:
        """Push and return the pushed manifest digest (``sha256:...``)."""
        proc = self._run(["push", ref])
        for line in proc.stdout.decode(errors="replace").splitlines():
            if "digest: sha256:" in line:
                return "sha256:" + line.split("digest: sha256:")[1].split()[0]
        raise EngineError(f"docker push {ref} printed no digest; check the registry")

    def manifest_digest(self, ref: str, timeout: float | None = None) -> str | None:
        """The digest a registry holds for ``ref``, or None when the tag does not exist there
        (or the registry cannot be reached within ``timeout``)."""
        try:
            proc = self._run(
                ["buildx", "imagetools", "inspect", "--format", "{{json .Manifest}}", ref],
                check=False,
                timeout=timeout,
            )
        except EngineError:  # timed out: unknown, not an error
            return None
        if proc.returncode != 0:
            return None
        return json.loads(proc.stdout).get("digest")

    def registry_manifest(self, ref: str) -> bytes | None:
        """The raw manifest (or index) bytes a registry holds for ``ref``; None when not found.

        Goes through ``buildx imagetools`` so docker's own credentials and insecure-registry
        rules apply. Any failure other than "not found" raises (an unreachable registry must not
        look like a free tag).
        """
        proc = self._run(["buildx", "imagetools", "inspect", "--raw", ref], check=False)
        if proc.returncode == 0:
            return proc.stdout
        stderr = proc.stderr.decode(errors="replace").strip()
        if stderr.endswith(": not found") or "manifest unknown" in stderr:
            return None
        last = (stderr.splitlines() or [f"exit code {proc.returncode}"])[-1]
        raise EngineError(f"cannot read {ref} from its registry: {last}")
