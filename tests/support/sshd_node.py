"""Cluster nodes for the distribution tests: containers running sshd and their own Docker engine.

``sshd_node_image(engine)``: a Debian rootfs (debootstrap: openssh-server, rsync) imported as an
image, cached like the other test images. ``SshNodes`` starts N of them on the local engine, each
privileged with its own dockerd (the host's dockerd/containerd/runc/docker binaries mounted
read-only, vfs storage, no iptables), reachable over ssh at its bridge address with a key made for
the test. ``env()`` gives a PATH whose ``ssh`` adds that key and skips host-key checks (standing in
for the user's ~/.ssh/config), so ``docker --host ssh://root@ADDR`` and rsync work unchanged.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

from edgevllm.common.errors import DaemonUnreachableError
from edgevllm.containers.docker import DockerEngine, RunOptions

from .cacheuse import record
from .images import _key, cache_root, debootstrap_rootfs, image_lock, require_program
from .platforms import native_arch, platform_of

SUITE = "bookworm"
PACKAGES = ["openssh-server", "rsync", "ca-certificates", "procps"]
ENGINE_BINARIES = {"dockerd": "/usr/sbin/dockerd", "containerd": "/usr/bin/containerd",
                   "runc": "/usr/sbin/runc",
                   "containerd-shim-runc-v2": "/usr/bin/containerd-shim-runc-v2",
                   "docker": "/usr/bin/docker"}
START = ("mkdir -p /run/sshd /root/.ssh && cp /keys/authorized_keys /root/.ssh/ && "
         "chmod 600 /root/.ssh/authorized_keys && /usr/sbin/sshd -e && "
         "exec dockerd --iptables=false --ip6tables=false --bridge=none --storage-driver=vfs "
         "--userland-proxy=false >/var/log/dockerd.log 2>&1")


def sshd_node_image(engine: DockerEngine) -> str:
    """The node image for this host's platform: its containers run the host's own engine
    binaries (mounted), which only run natively."""
    arch = native_arch()
    key = _key(SUITE, PACKAGES)
    # The x86_64 tag and tarball keep the names they had before arm64 hosts ran the suite.
    suffix = "" if arch == "amd64" else f"-{arch}"
    tag = f"edgevllm-test/sshd-node:{SUITE}{suffix}-{key}"
    record(tag)
    with image_lock(f"sshd-node-image{suffix}"):
        if engine.image_exists(tag):
            return tag
        tarball = cache_root() / f"rootfs-sshd-{SUITE}{suffix}-{key}.tar"
        if not tarball.exists():
            debootstrap_rootfs(arch, SUITE, PACKAGES, tarball)
        engine.import_rootfs(tarball, tag, platform=platform_of(arch), changes=[
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"])
    return tag


def _engine_mounts() -> list[str]:
    mounts = []
    for name, inside in ENGINE_BINARIES.items():
        found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
        if found is None:
            raise RuntimeError(f"'{name}' is needed for the node containers' own Docker engine: "
                               "bash .ci/install-engine.sh installs it")
        mounts.append(f"{os.path.realpath(found)}:{inside}:ro")
    return mounts


class SshNodes:
    """N node containers; use as a context manager (removed on exit)."""

    def __init__(self, engine: DockerEngine, prefix: str, count: int, workdir: Path,
                 socket_dir: Path | None = None, bridge: bool = False):
        """``socket_dir``: each node's engine also listens on ``<socket_dir>/<name>/docker.sock``
        here (the engine as its own machine reaches it: no ssh in between). ``bridge``: the
        node's engine has its default bridge network, which a build's RUN steps need."""
        require_program("ssh-keygen", "apt-get install openssh-client")
        self.engine, self.workdir, self.socket_dir = engine, workdir, socket_dir
        self.bridge = bridge
        self.names = [f"{prefix}-{i}" for i in range(count)]
        self.addresses: list[str] = []

    def __enter__(self) -> SshNodes:  # noqa: PYI034 - a plain class, not subclassed
        image = sshd_node_image(self.engine)
        keys = self.workdir / "keys"
        keys.mkdir(parents=True, exist_ok=True)
        key = self.workdir / "id_ed25519"
        if not key.exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
                           check=True)
        shutil.copy(key.with_suffix(".pub"), keys / "authorized_keys")
        self._ssh_wrapper(key)
        for name in self.names:
            self.engine.remove_container(name)
            start, mounts = START, [f"{keys}:/keys:ro", *_engine_mounts()]
            if self.bridge:
                start = start.replace("--bridge=none ", "")
            if self.socket_dir is not None:  # overlay2 on a host folder: vfs copies every layer
                (self.socket_dir / name / "data").mkdir(parents=True, exist_ok=True)
                mounts += [f"{self.socket_dir / name}:/run/outside",
                           f"{self.socket_dir / name / 'data'}:/var/lib/docker"]
                start = start.replace("--storage-driver=vfs", "--storage-driver=overlay2")
                start += " -H unix:///var/run/docker.sock -H unix:///run/outside/docker.sock"
            self.engine.start(RunOptions(
                image=image, name=name, command=["sh", "-c", start], volumes=mounts,
                extra=["--privileged"]))
            info = self.engine.container_inspect(name) or {}
            self.addresses.append(info["NetworkSettings"]["IPAddress"])
        self._wait_ready()
        return self

    def __exit__(self, *exc) -> None:
        for name in self.names:
            self.engine.remove_container(name)
            if self.socket_dir is not None:  # the engine's images and cache, made by the test
                shutil.rmtree(self.socket_dir / name, ignore_errors=True)

    def _ssh_wrapper(self, key: Path) -> None:
        config = self.workdir / "ssh_config"
        config.write_text(f"Host *\n  User root\n  IdentityFile {key}\n  IdentitiesOnly yes\n"
                          "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n"
                          "  LogLevel ERROR\n  BatchMode yes\n")
        wrapper = self.workdir / "bin" / "ssh"
        wrapper.parent.mkdir(exist_ok=True)
        wrapper.write_text(f'#!/bin/sh\nexec {shutil.which("ssh")} -F {config} "$@"\n')
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)

    def env(self) -> dict[str, str]:
        return {"PATH": f"{self.workdir / 'bin'}:{os.environ.get('PATH', '')}"}

    def urls(self) -> list[str]:
        return [f"ssh://root@{address}" for address in self.addresses]

    def socket_engine(self, index: int) -> DockerEngine:
        """The node's engine through its socket here (needs ``socket_dir``)."""
        assert self.socket_dir is not None
        return DockerEngine(host=f"unix://{self.socket_dir / self.names[index]}/docker.sock")

    def node_engine(self, index: int) -> DockerEngine:
        """The node's own engine, reached over ssh (needs ``env()`` in os.environ)."""
        return DockerEngine(host=self.urls()[index])

    def _wait_ready(self, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        for name in self.names:
            while True:
                try:
                    proc = self.engine.exec(name, ["docker", "info", "--format", "{{.Driver}}"])
                    if proc.returncode == 0:
                        break
                except DaemonUnreachableError:
                    pass  # the node's own dockerd is not up yet (its words, not the host's)
                if time.monotonic() > deadline:
                    logs = self.engine.exec(name, ["cat", "/var/log/dockerd.log"])
                    raise RuntimeError(f"node {name}: its Docker engine did not start: "
                                       f"{logs.stdout.decode()[-500:]}")
                time.sleep(1)


def processes_naming(text: str) -> list[int]:
    """Live processes whose command line names ``text`` (an ssh forward's folder: none may
    outlive the build that opened it)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text in (entry / "cmdline").read_bytes().decode(
                    errors="replace"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found
