#!/usr/bin/env bash
# What `make test` needs besides the engine (.ci/ensure-engine.sh), named before the suite starts
# rather than by a failure an hour in. The tests build most of their images for the host's own
# platform (tests/support/platforms.py) and a few for the other one, to test building under
# emulation: on an x86_64 host those linux/arm64 ones need qemu-aarch64, on an arm64 host (a
# Spark, a Thor) the linux/amd64 ones need qemu-x86_64. Checks only; installs nothing.
# EDGEVLLM_BINFMT_DIR points at another binfmt_misc folder (the tests of this script).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/host-os.sh"
binfmt=${EDGEVLLM_BINFMT_DIR:-/proc/sys/fs/binfmt_misc}
os_id=$(host_os_id)
case "$os_id" in
  debian|ubuntu) install="sudo apt-get install" ;;
  *) install="install (your distribution's packages):" ;;
esac
missing=()
machine=$(uname -m)
case "$machine" in
  x86_64|amd64) foreign=aarch64; foreign_platform=linux/arm64 ;;
  aarch64|arm64) foreign=x86_64; foreign_platform=linux/amd64 ;;
  *) echo "make test: this host is '$machine'; the suite builds linux/amd64 and linux/arm64" \
          "images and runs on x86_64 or aarch64 hosts only" >&2; exit 3 ;;
esac
if [ ! -e "$binfmt/qemu-$foreign" ]; then
  missing+=("emulation of $foreign_platform on this $machine host (the suite builds images for\
 both platforms): $install qemu-user-static binfmt-support, then\
 sudo update-binfmts --enable qemu-$foreign")
fi
# The test bases are Debian roots: debootstrap checks Debian's signatures with Debian's keyring,
# which an Ubuntu host (DGX OS, JetPack) lacks until it is installed.
keyring=${EDGEVLLM_DEBIAN_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}
if [ ! -f "$keyring" ]; then
  missing+=("Debian's archive keyring (debootstrap checks the Debian test bases with it):\
 $install debian-archive-keyring")
fi
# program → package: the base images (debootstrap), the registry, cluster and cache tests, the
# sandbox a tree's CMake runs in (bwrap), copies to another registry and out of an OCI layout
# (skopeo).
for pair in debootstrap:debootstrap rsync:rsync ssh:openssh-client zstd:zstd \
            redis-server:redis-server docker-registry:docker-registry bwrap:bubblewrap \
            skopeo:skopeo; do
  program=${pair%%:*} package=${pair#*:}
  if ! command -v "$program" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$program" ] \
     && [ ! -x "/usr/bin/$program" ]; then
    missing+=("$program: $install $package")
  fi
done
# cosign checks what inv push --attach signs and attests (Debian trixie packages it; elsewhere
# its release binary).
if ! command -v cosign >/dev/null 2>&1 && [ ! -x /usr/bin/cosign ]; then
  missing+=("cosign: $install cosign (Debian trixie), or the release binary from\
 https://github.com/sigstore/cosign/releases")
fi
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "make test needs, before it starts (nothing was installed):" >&2
for line in "${missing[@]}"; do
  echo "  missing: $line" >&2
done
if [ "$os_id" = debian ]; then
  echo "  on Debian, as root: bash .ci/install-engine.sh installs all of them" >&2
fi
exit 3
