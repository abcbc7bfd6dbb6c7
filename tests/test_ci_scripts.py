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
