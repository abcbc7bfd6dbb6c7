# Sourced by ensure-engine.sh and install-engine.sh: which distribution this host runs, read from
# os-release (EDGEVLLM_OS_RELEASE points at another file, for tests), never from
# /etc/debian_version, which Ubuntu (DGX OS, JetPack) has too.
host_os_id() {
  local file="${EDGEVLLM_OS_RELEASE:-/etc/os-release}"
  [ -f "$file" ] || file=/usr/lib/os-release
  [ -f "$file" ] || { echo unknown; return; }
  # The file is data: read the one field, never source it.
  local id
  id=$(sed -n 's/^ID=//p' "$file" | head -n 1 | tr -d "\"'")
  echo "${id:-unknown}"
}

# On Ubuntu (a DGX Spark's DGX OS, a Jetson Thor's JetPack) edgevllm uses what NVIDIA installed:
# check it, and name what is missing with Ubuntu's own commands. Nothing is installed here.
ubuntu_device_check() {
  local missing=0 py
  if ! docker info >/dev/null 2>&1; then
    echo "missing: a running Docker engine for this user: sudo apt-get install docker.io;" \
         "sudo systemctl enable --now docker; sudo usermod -aG docker \$USER (log in again)" >&2
    missing=1
  else
    if ! docker buildx version >/dev/null 2>&1; then
      echo "missing: docker buildx: sudo apt-get install docker-buildx" >&2
      missing=1
    fi
    if ! docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"nvidia"'; then
      echo "missing: the NVIDIA container runtime in Docker: sudo apt-get install" \
           "nvidia-container-toolkit; sudo nvidia-ctk runtime configure --runtime=docker;" \
           "sudo systemctl restart docker" >&2
      missing=1
    fi
  fi
  if ! command -v bwrap >/dev/null 2>&1; then
    echo "missing: bubblewrap (the sandbox a tree's CMake runs in, docs/security.md):" \
         "sudo apt-get install bubblewrap" >&2
    missing=1
  elif ! bwrap --unshare-all --ro-bind / / true >/dev/null 2>&1; then
    echo "missing: a user namespace for bwrap (Ubuntu's AppArmor restriction): sudo apt-get" \
         "install apparmor-profiles; sudo install -m 0644" \
         "/usr/share/apparmor/extra-profiles/bwrap-userns-restrict /etc/apparmor.d/;" \
         "sudo apparmor_parser -r /etc/apparmor.d/bwrap-userns-restrict" >&2
    missing=1
  fi
  py=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")' 2>/dev/null || echo 3)
  if ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
    echo "missing: python3 -m venv: sudo apt-get install python${py}-venv" >&2
    missing=1
  fi
  return $missing
}
