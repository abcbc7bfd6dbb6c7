"""builder/doctor.py's checks on a machine whose engine cannot be reached (``DOCKER_HOST`` a socket
nobody listens on): every check still runs and says its finding (the build's preflight stops at
the first), the engine's checks fail naming the way out, the disk check reads the output's disk
against the target's need, git is found, and nothing that needs the daemon (compose, base images)
is asked. An edgevllm error is a finding; anything else is not hidden. The ready machine, with the
real engine: tests/test_builder_doctor.py."""

from __future__ import annotations

import shutil

import pytest

from edgevllm.builder.doctor import Finding, _check, run_checks
from edgevllm.common.errors import MissingToolError
from edgevllm.containers.docker import DockerEngine
from edgevllm.specs.targets import load_target

NO_DAEMON = "cannot reach the Docker daemon"


@pytest.fixture
def dead_engine(tmp_path, monkeypatch) -> DockerEngine:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'nobody-listens.sock'}")
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    monkeypatch.setenv("EDGEVLLM_MIN_DISK_GB", "")
    return DockerEngine.named(None)


def findings(engine: DockerEngine, out, need_gb: float) -> dict[str, Finding]:
    target = load_target("spark").model_copy(update={"min_disk_gb": need_gb})
    found = run_checks(target, out, engine)
    assert len({f.name for f in found}) == len(found), found  # one finding a check
    return {f.name: f for f in found}


def test_every_check_runs_and_those_needing_the_daemon_are_not_asked(dead_engine, tmp_path):
    found = findings(dead_engine, tmp_path / "out", 0.001)
    assert list(found) == ["docker daemon", "docker buildx", "emulation / platform",
                           "emulation speed", "disk", "git"]
    daemon = found["docker daemon"]
    assert daemon.status == "fail" and NO_DAEMON in daemon.detail
    assert "start it or check DOCKER_HOST" in daemon.detail
    assert found["emulation / platform"].status == "fail"
    assert found["git"] == Finding("git", "ok", shutil.which("git") or "")
    assert found["disk"].status == "ok" and str(tmp_path / "out") in found["disk"].detail
    assert not (tmp_path / "out").exists()  # a check makes no folder
    assert all(f.status in ("ok", "warn", "fail") and "\n" not in f.detail
               for f in found.values())


def test_a_disk_too_small_for_the_target_is_a_failure_naming_the_need(dead_engine, tmp_path):
    disk = findings(dead_engine, tmp_path / "out", 10 ** 6)["disk"]
    assert disk.status == "fail" and "this needs about" in disk.detail, disk
    assert str(tmp_path / "out") in disk.detail


def test_an_edgevllm_error_is_a_finding_and_any_other_is_not_hidden():
    def missing() -> str:
        raise MissingToolError("git not found: install git")

    assert _check("git", missing) == Finding("git", "fail", "git not found: install git")
    assert _check("compose", missing, warn_only=True).status == "warn"
    assert _check("x", lambda: "") == Finding("x", "ok", "")

    def broken() -> str:
        raise RuntimeError("a bug, not a finding")

    with pytest.raises(RuntimeError):
        _check("x", broken)
