"""One ssh connection for all of a build's docker calls (containers/sshforward.py), against a real
sshd node container with its own Docker engine (tests/support/sshd_node.py), through the real ssh
client and the real docker CLI and buildx:

- inside ``one_connection`` every call, a buildx build included, goes through one forwarded
  socket: two ssh starts in all (ask the endpoint, open the forward) where docker's own ssh
  starts one per call; on leaving, and on an error inside, the ssh process is gone and its
  socket and private folder are removed;
- the socket over there is the one ``docker system dial-stdio`` would dial there: a context of
  the node's docker CLI naming another socket is followed; a tcp:// one is not forwarded (one
  warning, docker's own ssh per call);
- host keys are checked as the user's ssh config says: with an empty known_hosts file the
  forward is refused (and the engine falls back, saying why); once the key is known it opens.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from edgevllm.containers.docker import BuildOptions, DockerEngine
from edgevllm.containers.sshforward import one_connection
from support.platforms import native_arch
from support.sshd_node import processes_naming

pytestmark = pytest.mark.e2e

PREFIX = "edgevllm-test-sshtunnel"


@pytest.fixture(scope="module")
def node(engine, tmp_path_factory):
    from support.sshd_node import SshNodes

    with SshNodes(engine, PREFIX, 1, tmp_path_factory.mktemp("sshnode")) as made:
        yield made


@pytest.fixture
def counted(node, tmp_path, monkeypatch):
    """PATH with an ``ssh`` that logs each start (then runs the nodes' ssh), TMPDIR our own."""
    log = tmp_path / "ssh-starts.log"
    wrapper = tmp_path / "bin" / "ssh"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\necho "$*" >>{log}\nexec {node.workdir}/bin/ssh "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{wrapper.parent}:{node.env()['PATH']}")
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(temp))
    return log, temp


def starts(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.is_file() else []


def some_calls(engine: DockerEngine, tmp: Path) -> None:
    """The kind of calls a build makes, a buildx build with a context upload included."""
    assert engine.server_arch() == native_arch()
    assert engine.root_dir().startswith("/")
    assert engine.buildx_platforms()
    assert not engine.image_exists("edgevllm-test/sshtunnel-nothing:none")
    context = tmp / "context"
    context.mkdir(parents=True, exist_ok=True)
    (context / "payload.txt").write_text("through the forward\n")
    (context / "Dockerfile").write_text("FROM scratch\nCOPY payload.txt /\n")
    lines: list[str] = []
    code = engine.build(BuildOptions(context=context, dockerfile=context / "Dockerfile",
                                     output=f"type=local,dest={tmp / 'built'}"), lines.append)
    assert code == 0, "\n".join(lines[-20:])
    assert (tmp / "built" / "payload.txt").read_text() == "through the forward\n"


def test_one_connection_carries_every_call_and_is_closed_after(node, counted, tmp_path):
    log, temp = counted
    engine = DockerEngine(host=node.urls()[0])
    some_calls(engine, tmp_path / "per-call")  # docker's own ssh: one start per connection
    per_call = len(starts(log))
    log.unlink()
    with one_connection(engine):
        assert engine.dial and engine.dial.startswith(f"unix://{temp}/edgevllm-ssh-")
        folder = Path(engine.dial[len("unix://"):]).parent
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert len(processes_naming(str(folder))) == 1
        some_calls(engine, tmp_path / "shared")
    shared = starts(log)
    assert len(shared) == 2, shared  # the endpoint asked, the forward opened
    assert "docker context inspect" in shared[0] and "-L" in shared[1].split()
    assert per_call >= 6, per_call
    assert engine.dial is None and list(temp.iterdir()) == []
    assert processes_naming(str(folder)) == []
    print(f"\nssh starts: {per_call} without the shared connection, 2 with it")


def test_an_error_inside_still_closes_it(node, counted):
    _, temp = counted
    engine = DockerEngine(host=node.urls()[0])
    with pytest.raises(RuntimeError, match="a step failed"), one_connection(engine):
        folder = Path(str(engine.dial)[len("unix://"):]).parent
        assert processes_naming(str(folder))
        raise RuntimeError("a step failed")
    assert engine.dial is None and list(temp.iterdir()) == []
    assert processes_naming(str(folder)) == []


def test_the_socket_is_the_one_dial_stdio_would_dial(node, engine, counted, capsys):
    log, temp = counted
    name = node.names[0]

    def on_node(*command: str) -> None:
        proc = engine.exec(name, list(command))
        assert proc.returncode == 0, proc.stderr

    remote = DockerEngine(host=node.urls()[0])
    on_node("ln", "-sf", "/var/run/docker.sock", "/run/edgevllm-alt.sock")
    on_node("docker", "context", "create", "alt", "--docker", "host=unix:///run/edgevllm-alt.sock")
    on_node("docker", "context", "create", "far", "--docker", "host=tcp://127.0.0.1:2375")
    try:
        on_node("docker", "context", "use", "alt")
        with one_connection(remote):
            assert remote.server_arch() == native_arch()
        assert starts(log)[-1].endswith(":/run/edgevllm-alt.sock -- root@" + node.addresses[0])
        on_node("docker", "context", "use", "far")
        with one_connection(remote):
            assert remote.dial is None
        err = capsys.readouterr().err
        assert (f"engine {node.urls()[0]}: no shared ssh connection (its docker endpoint there "
                "is 'tcp://127.0.0.1:2375', not a unix socket)") in err
    finally:
        on_node("docker", "context", "use", "default")
        on_node("docker", "context", "rm", "-f", "alt", "far")
    assert list(temp.iterdir()) == []


def test_host_keys_are_checked_as_the_users_config_says(node, tmp_path, monkeypatch, capsys):
    """The user's config here checks host keys (ssh's default), known_hosts starts empty."""
    address = node.addresses[0]
    known = tmp_path / "known_hosts"
    known.touch()
    config = tmp_path / "ssh_config"
    config.write_text(f"Host *\n  User root\n  IdentityFile {node.workdir / 'id_ed25519'}\n"
                      f"  IdentitiesOnly yes\n  UserKnownHostsFile {known}\n")
    wrapper = tmp_path / "bin" / "ssh"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {shutil.which("ssh")} -F {config} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{wrapper.parent}:{os.environ['PATH']}")
    remote = DockerEngine(host=f"ssh://root@{address}")
    with one_connection(remote):
        assert remote.dial is None
    err = capsys.readouterr().err
    assert "no shared ssh connection" in err and "Host key verification failed" in err, err
    scan = subprocess.run(["ssh-keyscan", "-t", "ed25519", address], capture_output=True,
                          text=True, timeout=30)
    assert scan.returncode == 0 and scan.stdout, scan.stderr
    known.write_text(scan.stdout)
    with one_connection(remote):
        assert remote.dial is not None
        assert remote.server_arch() == native_arch()
    assert "no shared ssh connection" not in capsys.readouterr().err
