#!/usr/bin/env bash
# Make sure a Docker engine with buildx is reachable. On a Debian host, as root, install and start
# it (.ci/install-engine.sh, idempotent); otherwise say exactly what is missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if docker info >/dev/null 2>&1 && docker buildx version >/dev/null 2>&1 \
   && [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 -o "$(uname -m)" = aarch64 ]; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && [ -f /etc/debian_version ]; then
  exec bash "$here/install-engine.sh"
fi
echo "edgevllm needs Docker with buildx (and qemu-user-static + binfmt to build linux/arm64 on x86)." >&2
echo "Install them (Debian/Ubuntu: apt-get install docker.io docker-buildx qemu-user-static binfmt-support)," >&2
echo "start the daemon, and make sure 'docker info' works for this user; or run as root: sudo bash .ci/install-engine.sh" >&2
exit 3
