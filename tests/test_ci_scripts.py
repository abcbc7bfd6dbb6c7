""".ci/ensure-engine.sh and .ci/install-engine.sh read the distribution from os-release
(``EDGEVLLM_OS_RELEASE`` points them at a file written here): on Ubuntu (DGX OS, JetPack: the
device itself) they check the engine, buildx and the NVIDIA container runtime and name what to
install with Ubuntu's commands, and never add Debian's sources. The real engine of this machine
answers (it has no NVIDIA runtime); an unreachable engine is the real client pointed at a socket
that does not exist."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DGX_OS = ('PRETTY_NAME="Ubuntu 24.04.3 LTS"\nNAME="Ubuntu"\nVERSION_ID="24.04"\nID=ubuntu\n'
          "ID_LIKE=debian\nUBUNTU_CODENAME=noble\n")
DEBIAN = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n'


def script(name: str, os_release: str, tmp_path: Path, **env) -> subprocess.CompletedProcess:
    path = tmp_path / "os-release"
    path.write_text(os_release)
    return subprocess.run(["bash", str(REPO / ".ci" / name)], capture_output=True, text=True,
                          env={**os.environ, "EDGEVLLM_OS_RELEASE": str(path), **env},
                          timeout=120)


def apt_sources() -> list[tuple[str, float]]:
    folder = Path("/etc/apt/sources.list.d")
    return sorted((p.name, p.stat().st_mtime) for p in folder.iterdir()) if folder.is_dir() else []


@pytest.mark.parametrize("name", ["install-engine.sh", "ensure-engine.sh"])
def test_ubuntu_never_gets_debian_sources(name, tmp_path):
    before = apt_sources()
    proc = script(name, DGX_OS, tmp_path, DOCKER_HOST="unix:///nonexistent/docker.sock")
    assert proc.returncode == 3, proc.stderr
    assert apt_sources() == before
    assert "deb.debian.org" not in proc.stderr and "trixie" not in proc.stderr
    assert ("missing: a running Docker engine for this user: sudo apt-get install docker.io; "
            "sudo systemctl enable --now docker") in proc.stderr


def test_install_engine_refuses_every_other_distribution(tmp_path):
    proc = script("install-engine.sh", DGX_OS, tmp_path)
    assert proc.stderr.splitlines()[0] == ("install-engine: this host runs 'ubuntu', not Debian: "
                                           "nothing installed, no apt source added.")
    proc = script("install-engine.sh", 'ID="fedora"\n', tmp_path)
    assert proc.returncode == 3 and "runs 'fedora', not Debian" in proc.stderr


def test_device_check_names_the_missing_nvidia_runtime_with_ubuntus_commands(engine, tmp_path):
    runtimes = subprocess.run(["docker", "info", "--format", "{{json .Runtimes}}"],
                              capture_output=True, text=True).stdout
    assert '"nvidia"' not in runtimes, "this test needs an engine without the NVIDIA runtime"
    proc = script("ensure-engine.sh", DGX_OS, tmp_path)
    assert proc.returncode == 3
    assert ("missing: the NVIDIA container runtime in Docker: sudo apt-get install "
            "nvidia-container-toolkit; sudo nvidia-ctk runtime configure --runtime=docker; "
            "sudo systemctl restart docker") in proc.stderr
    assert "missing: a running Docker engine" not in proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("edgevllm on Ubuntu (DGX OS, JetPack) uses "
                                                   "the engine NVIDIA ships")


def test_debian_with_a_working_engine_is_ready(engine, tmp_path):
    proc = script("ensure-engine.sh", DEBIAN, tmp_path)
    assert proc.returncode == 0, proc.stderr


# -- make test's own needs (.ci/test-needs.sh), on an x86_64 host and on an arm64 one ------------
# No arm64 host here: a `uname` on PATH that prints aarch64 stands in for one, and
# EDGEVLLM_BINFMT_DIR for its binfmt_misc folder.
def fake_host(tmp_path: Path, machine: str, handlers: list[str]) -> dict[str, str]:
    bin_dir, binfmt = tmp_path / "bin", tmp_path / "binfmt"
    bin_dir.mkdir()
    binfmt.mkdir()
    (bin_dir / "uname").write_text(f"#!/bin/sh\necho {machine}\n")
    (bin_dir / "uname").chmod(0o755)
    for handler in handlers:
        (binfmt / handler).write_text("enabled\n")
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "EDGEVLLM_BINFMT_DIR": str(binfmt)}


@pytest.mark.parametrize("machine, foreign", [("aarch64", "x86_64"), ("x86_64", "aarch64")])
def test_make_test_names_the_other_platforms_emulation_before_it_starts(machine, foreign,
                                                                       tmp_path):
    proc = script("test-needs.sh", DGX_OS, tmp_path, **fake_host(tmp_path, machine, []))
    assert proc.returncode == 3
    platform = {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}[foreign]
    assert proc.stderr.splitlines()[:2] == [
        "make test needs, before it starts (nothing was installed):",
        f"  missing: emulation of {platform} on this {machine} host (the suite builds images for "
        "both platforms): sudo apt-get install qemu-user-static binfmt-support, then sudo "
        f"update-binfmts --enable qemu-{foreign}"]


def test_make_test_on_an_arm64_host_with_x86_emulation_needs_nothing_more(tmp_path):
    """This machine has debootstrap, rsync, ssh, zstd, redis-server and docker-registry (the
    Debian set-up installs them): with qemu-x86_64 registered an arm64 host is ready."""
    env = fake_host(tmp_path, "aarch64", ["qemu-x86_64"])
    proc = script("test-needs.sh", DGX_OS, tmp_path, **env)
    assert proc.returncode == 0, proc.stderr


def test_make_test_on_ubuntu_names_debians_keyring_for_the_debian_test_bases(tmp_path):
    """DGX OS and JetPack are Ubuntu: debootstrap of the Debian bases needs Debian's keyring."""
    env = fake_host(tmp_path, "aarch64", ["qemu-x86_64"])
    proc = script("test-needs.sh", DGX_OS, tmp_path, **env,
                  EDGEVLLM_DEBIAN_KEYRING=str(tmp_path / "no-keyring.gpg"))
    assert proc.returncode == 3
    assert proc.stderr.splitlines()[1] == (
        "  missing: Debian's archive keyring (debootstrap checks the Debian test bases with it): "
        "sudo apt-get install debian-archive-keyring")


def test_make_runs_the_needs_check_before_the_suite():
    makefile = (REPO / "Makefile").read_text()
    assert "test: venv engine test-needs lint\n" in makefile
    assert "test-needs:\n\t@bash .ci/test-needs.sh\n" in makefile
