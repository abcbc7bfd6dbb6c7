"""The set-up scripts' choice on a device-like root: what ``make image`` / ``make test`` run first
(the Makefile's ``engine`` target: .ci/ensure-engine.sh, and .ci/install-engine.sh behind it) on
DGX OS and JetPack, as root.

The root is the debootstrapped Debian arm64 rootfs of the other e2e tests (so it has
``/etc/debian_version``, the file that once made the scripts take Ubuntu for Debian) with the
``/etc/os-release`` of DGX OS or JetPack written over it, run in a container under qemu with no
network and no Docker. ``apt-get``, ``apt`` and ``dpkg`` are wrapped to record every call. Each
script must exit 3, add no apt source, install nothing (no wrapped call, the dpkg database
unchanged), and print the Ubuntu commands for what is missing.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
UBUNTU = ('PRETTY_NAME="Ubuntu 24.04.3 LTS"\nNAME="Ubuntu"\nVERSION_ID="24.04"\n'
          'VERSION="24.04.3 LTS (Noble Numbat)"\nVERSION_CODENAME=noble\nID=ubuntu\n'
          "ID_LIKE=debian\nUBUNTU_CODENAME=noble\n")
DEVICES = {  # the file each device adds beside os-release
    "dgx-os": ("/etc/dgx-release", 'DGX_NAME="DGX Spark"\nDGX_PRETTY_NAME="NVIDIA DGX Spark"\n'),
    "jetpack": ("/etc/nv_tegra_release", "# R38 (release), REVISION: 2.0, BOARD: generic\n"),
}
# Runs in the container: wrap the package tools, snapshot, run one script, compare.
CHECK = r"""
set -u
mkdir -p /rec/bin
for tool in apt-get apt dpkg; do
  printf '#!/bin/sh\necho "%s $*" >> /rec/calls\n' "$tool" > /rec/bin/$tool
  chmod 755 /rec/bin/$tool
done
: > /rec/calls
printf '%s' "$OS_RELEASE" > /etc/os-release
printf '%s' "$DEVICE_TEXT" > "$DEVICE_FILE"
[ "$NO_VENV" = 1 ] && rm -rf /usr/lib/python3*/ensurepip
snapshot() { find /etc/apt -type f -exec sha256sum {} + | sort; sha256sum /var/lib/dpkg/status; }
snapshot > /rec/before
PATH=/rec/bin:$PATH bash /src/.ci/$SCRIPT
echo "exit=$?"
snapshot > /rec/after
cmp -s /rec/before /rec/after && echo "apt-unchanged" || diff /rec/before /rec/after
echo "calls=$(wc -l < /rec/calls)"
cat /rec/calls
"""


def run_script(engine, image: str, device: str, script: str, no_venv: bool = False):
    from edgevllm.containers.docker import RunOptions

    path, text = DEVICES[device]
    proc = engine.run(RunOptions(
        image=image, remove=True, network="none", volumes=[f"{REPO / '.ci'}:/src/.ci:ro"],
        env={"OS_RELEASE": UBUNTU, "DEVICE_FILE": path, "DEVICE_TEXT": text, "SCRIPT": script,
             "NO_VENV": "1" if no_venv else "0"},
        command=["bash", "-c", CHECK]), timeout=300)
    return proc.stdout.decode(), proc.stderr.decode()


def test_the_makefile_sets_up_with_ensure_engine():
    recipe = re.search(r"^engine:\n((?:\t.*\n)+)", (REPO / "Makefile").read_text(), re.M)
    assert recipe and recipe.group(1).strip() == "@bash .ci/ensure-engine.sh"


@pytest.mark.parametrize("device", sorted(DEVICES))
@pytest.mark.parametrize("script", ["ensure-engine.sh", "install-engine.sh"])
def test_ubuntu_device_root_gets_no_source_and_no_package(engine, python_image_arm64, device,
                                                          script):
    stdout, stderr = run_script(engine, python_image_arm64, device, script)
    assert "exit=3" in stdout, stdout + stderr
    assert "apt-unchanged" in stdout and "calls=0" in stdout, stdout
    assert "deb.debian.org" not in stderr and "trixie" not in stderr
    assert ("missing: a running Docker engine for this user: sudo apt-get install docker.io; "
            "sudo systemctl enable --now docker") in stderr, stderr
    if script == "install-engine.sh":
        assert "this host runs 'ubuntu', not Debian: nothing installed, no apt source added." \
            in stderr


def test_a_missing_venv_module_is_named_with_the_ubuntu_package(engine, python_image_arm64):
    stdout, stderr = run_script(engine, python_image_arm64, "dgx-os", "ensure-engine.sh",
                                no_venv=True)
    assert "exit=3" in stdout and "calls=0" in stdout, stdout + stderr
    assert re.search(r"missing: python3 -m venv: sudo apt-get install python3\.\d+-venv", stderr)
