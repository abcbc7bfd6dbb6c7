#!/usr/bin/env bash
# Make sure a Docker engine with buildx is reachable. On a Debian host, as root, install and start
# it (.ci/install-engine.sh, idempotent). On Ubuntu (DGX OS, JetPack: the device itself) check the
# engine, buildx and the NVIDIA container runtime and say what to install with Ubuntu's commands;
# never add another distribution's sources. Elsewhere, say exactly what is missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/host-os.sh"
os_id=$(host_os_id)
if [ "$os_id" = ubuntu ]; then
  if ubuntu_device_check; then
    [ "$(uname -m)" = aarch64 ] || [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] && exit 0
    echo "missing: qemu-user-static + binfmt to build linux/arm64 on $(uname -m):" \
         "sudo apt-get install qemu-user-static binfmt-support" >&2
  fi
  echo "edgevllm on Ubuntu (DGX OS, JetPack) uses the engine NVIDIA ships; install the above" \
       "and run again (nothing was installed)" >&2
  exit 3
fi
if docker info >/dev/null 2>&1 && docker buildx version >/dev/null 2>&1 \
   && command -v bwrap >/dev/null 2>&1 \
   && [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 -o "$(uname -m)" = aarch64 ]; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && [ "$os_id" = debian ]; then
  exec bash "$here/install-engine.sh"
fi
echo "edgevllm needs Docker with buildx (and qemu-user-static + binfmt to build linux/arm64 on x86)." >&2
echo "and bubblewrap (the sandbox a tree's CMake runs in)." >&2
echo "Install them (Debian: apt-get install docker.io docker-buildx qemu-user-static binfmt-support bubblewrap)," >&2
echo "start the daemon, and make sure 'docker info' works for this user; or run as root on Debian: sudo bash .ci/install-engine.sh" >&2
exit 3
