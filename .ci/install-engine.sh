#!/usr/bin/env bash
# Installs what the end-to-end tests need on a Debian host, idempotently:
# the Docker engine + buildx from trixie (low pin), qemu-user-static + binfmt for linux/arm64,
# debootstrap for the locally built base images, Debian's docker-registry, and redis-server
# (the shared compile cache test), bubblewrap (the sandbox of the kernel plan), cosign (the
# signature and attestation tests), skopeo (copies between registries and OCI layouts).
# Starts dockerd (no iptables) and the arm64 binfmt handler. Safe to run again.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

log() { printf '[install-engine] %s\n' "$*"; }

. "$(cd "$(dirname "$0")" && pwd)/host-os.sh"
os_id=$(host_os_id)
if [ "$os_id" != debian ]; then
  # Ubuntu has /etc/debian_version too: only os-release tells them apart. Never add Debian's
  # sources (or its docker.io) beside NVIDIA's Docker on DGX OS or JetPack.
  echo "install-engine: this host runs '$os_id', not Debian: nothing installed, no apt source added." >&2
  if [ "$os_id" = ubuntu ]; then
    ubuntu_device_check || true
    echo "install-engine: on Ubuntu (DGX OS, JetPack) install what is missing above with apt-get, then: bash .ci/ensure-engine.sh" >&2
  fi
  exit 3
fi
if [ "$(id -u)" != 0 ]; then
  echo "install-engine: run as root (it installs Debian packages and starts dockerd)" >&2
  exit 2
fi

add_trixie_source() {
  local list=/etc/apt/sources.list.d/edgevllm-trixie.sources
  local pin=/etc/apt/preferences.d/edgevllm-trixie
  if [ ! -f "$list" ]; then
    cat >"$list" <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  fi
  if [ ! -f "$pin" ]; then
    printf 'Package: *\nPin: release n=trixie\nPin-Priority: 100\n' >"$pin"
  fi
}

need_pkgs=()
dpkg -s docker.io >/dev/null 2>&1 || need_pkgs+=(docker.io/trixie docker-cli/trixie docker-buildx/trixie)
dpkg -s docker-compose >/dev/null 2>&1 || need_pkgs+=(docker-compose/trixie)
# bubblewrap: the sandbox a tree's CMake runs in (the kernel plan, docs/security.md).
# skopeo: copies an image and its cosign tags to another registry, and the bundle's OCI layout
# into one (tests/test_inspect_cosign.py, tests/test_image_ocilayout_cosign.py).
for p in binfmt-support debootstrap docker-registry zstd rsync openssh-client redis-server bubblewrap skopeo; do
  dpkg -s "$p" >/dev/null 2>&1 || need_pkgs+=("$p")
done
# cosign (trixie: bookworm has none): the real verifier of the signatures and attestations
# inv push --attach writes (tests/test_inspect_cosign.py).
dpkg -s cosign >/dev/null 2>&1 || need_pkgs+=(cosign/trixie)
# qemu >= 8, from trixie where the host's is older: bookworm's qemu 7.2 emulates Python about 4x
# slower than trixie's 10.0 (byte-compiling the real vLLM closure: 33 min against 8), and the real
# torch 2.14 did not import under it.
qemu_version=$(dpkg-query -W -f='${Version}' qemu-user-static 2>/dev/null || true)
if [ -z "$qemu_version" ] || dpkg --compare-versions "$qemu_version" lt 1:8; then
  need_pkgs+=(qemu-user-static/trixie qemu-user/trixie qemu-user-binfmt/trixie)
fi
if [ ${#need_pkgs[@]} -gt 0 ]; then
  add_trixie_source
  log "apt-get install ${need_pkgs[*]}"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi

# The docker-registry package starts a registry service on :5000 under systemd; tests start their own.
if [ ! -d /proc/sys/fs/binfmt_misc ] || [ ! -f /proc/sys/fs/binfmt_misc/register ]; then
  mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null || true
fi
# qemu 10 ships a systemd binfmt.d file (no binfmt-support entry). Its "F" flag makes the kernel
# hold the interpreter it was registered with, so a handler registered before an upgrade keeps
# running the old qemu: register again whenever the installed version is not the registered one.
# The handler is the other platform's: aarch64 on an x86_64 host (the targets' images), x86_64 on
# an arm64 host (the test suite's linux/amd64 images).
register_foreign() {
  local name=$1
  local conf=/usr/lib/binfmt.d/$name.conf marker=/var/lib/edgevllm/binfmt-$name
  local version
  version=$(dpkg-query -W -f='${Version}' qemu-user-static 2>/dev/null || true)
  if [ -f "$conf" ]; then
    if [ -f /proc/sys/fs/binfmt_misc/$name ] && [ "$(cat "$marker" 2>/dev/null)" = "$version" ]; then
      return 0
    fi
    [ -f /proc/sys/fs/binfmt_misc/$name ] && echo -1 >/proc/sys/fs/binfmt_misc/$name
    printf '%s' "$(grep -v '^#' "$conf" | head -n 1)" >/proc/sys/fs/binfmt_misc/register
    mkdir -p "$(dirname "$marker")" && printf '%s' "$version" >"$marker"
    log "registered $name ($version)"
    return 0
  fi
  update-binfmts --enable "$name" >/dev/null 2>&1 || true
  if [ ! -f /proc/sys/fs/binfmt_misc/$name ]; then
    update-binfmts --import "$name" >/dev/null 2>&1 || true
    update-binfmts --enable "$name" >/dev/null 2>&1 || true
  fi
}
case "$(uname -m)" in
  aarch64|arm64) register_foreign qemu-x86_64 ;;
  *) register_foreign qemu-aarch64 ;;
esac

# The Debian docker.io package ships /usr/bin/docker; a stray client elsewhere on PATH is fine.
if ! docker info >/dev/null 2>&1; then
  log "starting dockerd"
  mkdir -p /var/log
  (setsid dockerd --iptables=false >/var/log/edgevllm-dockerd.log 2>&1 &)
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
  docker info >/dev/null 2>&1 || { echo "install-engine: dockerd did not start; see /var/log/edgevllm-dockerd.log" >&2; exit 3; }
fi
docker buildx version >/dev/null 2>&1 || { echo "install-engine: docker buildx missing (apt-get install docker-buildx/trixie)" >&2; exit 3; }
log "engine ready: $(docker version --format '{{.Server.Version}}'), $(docker buildx version | head -1)"
