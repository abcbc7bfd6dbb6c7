"""`inv doctor`: every readiness check at once, each with its remedy; exit 3 when one fails."""

from __future__ import annotations


def small_target(tmp_path, need_gb: float) -> dict[str, str]:
    """thor with another disk need, so the verdict does not hang on this machine's free disk."""
    from edgevllm.common.paths import project_root

    folder = tmp_path / "targets"
    folder.mkdir()
    text = (project_root() / "targets" / "thor.yaml").read_text()
    text = text.replace("name: thor", "name: thor-doctor", 1)
    text = "\n".join(
        f"min_disk_gb: {need_gb}" if line.startswith("min_disk_gb:") else line
        for line in text.splitlines()
    )
    (folder / "thor-doctor.yaml").write_text(text + "\n")
    # EDGEVLLM_MIN_DISK_GB (set for the e2e fixtures) would replace the target's figure
    return {"EDGEVLLM_TARGETS_PATH": str(folder), "EDGEVLLM_MIN_DISK_GB": ""}


def test_ready_machine_reports_every_check(cli, engine, tmp_path):
    code, stdout, stderr = cli(
        "doctor",
        "--target",
        "thor-doctor",
        "--out",
        str(tmp_path / "o"),
        env=small_target(tmp_path, 1),
    )
    lines = {line[6:28].strip(): line[:4].strip() for line in stdout.splitlines()}
    assert code == 0, stdout + stderr
    for check in ("docker daemon", "docker buildx", "emulation / platform", "disk", "git"):
        assert lines[check] == "ok", stdout
    # bash .ci/install-engine.sh installs qemu >= 8: an older one is a warning naming the fix
    assert lines["emulation speed"] == "ok", stdout
    # nvcr.io is not reachable from CI: a warning that names the remedy, not a failure
    assert lines["base image"] in ("ok", "WARN"), stdout


def test_unreachable_daemon_fails_with_remedy(cli, tmp_path):
    code, stdout, stderr = cli(
        "doctor",
        "--target",
        "spark",
        "--out",
        str(tmp_path),
        env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"},
    )
    assert code == 3, stdout + stderr
    assert "FAIL  docker daemon" in stdout and "start it" in stdout
    assert "Traceback" not in stderr
    assert (
        stderr.strip()
        .splitlines()[-1]
        .startswith("error: not ready to build for spark: docker daemon")
    )


def test_too_little_disk_fails_with_remedy(cli, engine, tmp_path):
    code, stdout, stderr = cli(
        "doctor",
        "--target",
        "thor-doctor",
        "--out",
        str(tmp_path / "o"),
        env=small_target(tmp_path, 10**6),
    )
    assert code == 3, stdout + stderr
    assert "FAIL  disk" in stdout and "docker builder prune" in stdout
