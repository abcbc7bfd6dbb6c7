"""The engine's networks (a cluster's bridge network): create, remove, exists."""

from __future__ import annotations

from edgevllm.containers.daemon import Daemon


class Networks(Daemon):
    """The engine's networks."""

    def network_create(self, name: str, labels: dict[str, str] | None = None) -> None:
        args = ["network", "create"]
        for key, value in (labels or {}).items():
            args += ["--label", f"{key}={value}"]
        self._run(args + [name])

    def network_remove(self, name: str) -> None:
        self._run(["network", "rm", name], check=False)

    def network_exists(self, name: str) -> bool:
        return self._run(["network", "inspect", name], check=False).returncode == 0
