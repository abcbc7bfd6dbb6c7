"""`inv doctor`: every readiness check at once, each with its remedy; exit 3 when one fails."""

from __future__ import annotations


def test_ready_machine_reports_every_check(cli, engine, tmp_path):
    code, stdout, stderr = cli("doctor", "--target", "thor", "--out", str(tmp_path))
    lines = {line[6:28].strip(): line[:4].strip() for line in stdout.splitlines()}
    assert code == 0, stdout + stderr
    for check in ("docker daemon", "docker buildx", "emulation / platform", "disk", "git"):
        assert lines[check] == "ok", stdout
    # nvcr.io is not reachable from CI: a warning that names the remedy, not a failure
    assert lines["base image"] in ("ok", "WARN"), stdout


def test_unreachable_daemon_fails_with_remedy(cli, tmp_path):
    code, stdout, stderr = cli("doctor", "--target", "spark", "--out", str(tmp_path),
                               env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert code == 3, stdout + stderr
    assert "FAIL  docker daemon" in stdout and "start it" in stdout
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith("error: not ready to build for spark: docker daemon")
