"""One ssh connection per engine for a build (containers/sshforward.py), with the real ssh client
and no server here (tests/e2e/test_containers_sshforward_e2e.py opens real forwards to sshd node
containers):

- host-key checks: ``ssh -G`` (ssh's own reading of its command line and config) shows that the
  options added here change nothing of a user's host-key settings, whatever those are;
- a forward that cannot be opened (nothing listens; a server that never answers; SIGTERM while
  waiting) leaves no ssh process, no socket and no folder; a build's engine falls back to
  docker's own ssh per call, and says so;
- the endpoint grammar: only a unix socket is forwarded.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from edgevllm.common.interrupts import sigterm_as_interrupt
from edgevllm.containers import sshforward
from edgevllm.containers.docker import DockerEngine
from edgevllm.containers.sshforward import (
    ForwardUnavailable,
    SshForward,
    one_connection,
    socket_path,
    ssh_argv,
)

# What a user's config may say of host keys: none of it may change under the options added here.
HOST_KEY_SETTINGS = ("stricthostkeychecking", "userknownhostsfile", "globalknownhostsfile",
                     "checkhostip", "hostkeyalias", "knownhostscommand", "verifyhostkeydns",
                     "updatehostkeys", "hashknownhosts", "hostkeyalgorithms", "proxycommand",
                     "proxyjump", "identityfile", "identityagent", "user")
WEAKENING = ("stricthostkeychecking", "userknownhostsfile", "globalknownhostsfile",
             "checkhostip", "hostkeyalias", "knownhostscommand", "/dev/null")


def require_ssh() -> str:
    found = shutil.which("ssh")
    if found is None:
        pytest.fail("these tests need the ssh client: apt-get install openssh-client")
    return found


def every_ssh_argv(url: str) -> dict[str, list[str]]:
    forward = SshForward(url, "/var/run/docker.sock")
    forward.folder = Path("/tmp/edgevllm-ssh-x")  # the argv only: nothing is started
    return {"forward": forward.argv(),
            "endpoint": ssh_argv(url, "-T", command=sshforward.ENDPOINT_COMMAND),
            "df": ssh_argv(url, command="df -Pk /var/lib/docker")}


def effective(argv: list[str], config: Path) -> dict[str, str]:
    """``ssh -G``: the settings ssh would use for this command line under ``config``."""
    cut = argv.index("--")
    proc = subprocess.run([require_ssh(), "-F", str(config), "-G", *argv[1:cut + 2]],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    settings: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        key, _, value = line.partition(" ")
        settings[key] = f"{settings[key]}\n{value}" if key in settings else value
    return settings


@pytest.mark.parametrize("user_config", [
    "StrictHostKeyChecking yes\n  UserKnownHostsFile {tmp}/known_hosts\n",
    "StrictHostKeyChecking accept-new\n  CheckHostIP yes\n  HostKeyAlias spark-key\n",
    "",  # ssh's defaults: ask (here: refuse, BatchMode) for an unknown host
])
def test_ssh_never_disables_host_key_checks(tmp_path, user_config):
    config = tmp_path / "config"
    config.write_text("Host spark\n  " + user_config.format(tmp=tmp_path) +
                      f"  IdentityFile {tmp_path}/id\n  User me\n")
    plain = effective(["ssh", "--", "spark"], config)
    for name, argv in every_ssh_argv("ssh://spark:2222").items():
        lowered = " ".join(argv).lower()
        assert not [word for word in WEAKENING if word in lowered] and "-F" not in argv, argv
        ours = effective(argv, config)
        for key in HOST_KEY_SETTINGS:
            assert ours.get(key) == plain.get(key), (name, key, ours.get(key), plain.get(key))
        assert ours["port"] == "2222" and ours["batchmode"] == "yes"
    forward = effective(every_ssh_argv("ssh://spark")["forward"], config)
    assert forward["exitonforwardfailure"] == "yes" and forward["controlmaster"] == "false"
    assert forward["localforward"] == "/tmp/edgevllm-ssh-x/docker.sock /var/run/docker.sock"


def refused_url() -> str:
    """An address where nothing listens: ssh is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"ssh://nobody@127.0.0.1:{port}"


@contextlib.contextmanager
def silent_server():
    """A TCP server that accepts and never says a word: ssh waits for a banner."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        yield f"ssh://nobody@127.0.0.1:{server.getsockname()[1]}"


@pytest.fixture
def started(monkeypatch, tmp_path):
    """Every ssh this module starts (real processes), in a TMPDIR of the test's own."""
    require_ssh()
    procs: list[subprocess.Popen] = []
    real = subprocess.Popen

    def recording(*args, **kwargs):
        proc = real(*args, **kwargs)
        procs.append(proc)
        return proc

    monkeypatch.setattr(sshforward.subprocess, "Popen", recording)
    monkeypatch.setattr(sshforward.tempfile, "tempdir", str(tmp_path))
    return procs


def left_behind(procs: list[subprocess.Popen], tmp_path: Path) -> list[str]:
    running = [f"ssh pid {p.pid}" for p in procs if p.poll() is None]
    return running + [str(p) for p in tmp_path.iterdir()]


def test_a_refused_forward_leaves_nothing(started, tmp_path):
    forward = SshForward(refused_url(), "/var/run/docker.sock")
    with pytest.raises(ForwardUnavailable, match=r"ssh ended \(.*refused"):
        forward.open()
    assert len(started) == 1 and left_behind(started, tmp_path) == []


def test_a_server_that_never_answers_is_given_up_and_its_ssh_ended(started, tmp_path):
    with silent_server() as url:
        forward = SshForward(url, "/var/run/docker.sock", timeout_s=1.5)
        with pytest.raises(ForwardUnavailable, match="no forward within 2s"):
            forward.open()
        assert len(started) == 1 and left_behind(started, tmp_path) == []


def test_sigterm_while_opening_ends_ssh_and_removes_its_folder(started, tmp_path):
    with silent_server() as url:
        forward = SshForward(url, "/var/run/docker.sock")
        before = signal.getsignal(signal.SIGTERM)
        timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM))
        timer.start()
        with pytest.raises(KeyboardInterrupt), sigterm_as_interrupt():
            forward.open()
        timer.join()
        assert len(started) == 1 and left_behind(started, tmp_path) == []
        assert signal.getsignal(signal.SIGTERM) == before


def test_a_build_engine_without_one_connection_falls_back_and_says_so(started, tmp_path,
                                                                      capsys):
    url = refused_url()
    engine = DockerEngine(host=url)
    with one_connection(engine):
        assert engine.dial is None
        assert engine.base_argv() == ["docker", "--host", url]  # docker's own ssh, per call
    err = capsys.readouterr().err
    assert f"engine {url}: no shared ssh connection (could not ask its docker endpoint" in err
    assert "refused" in err and "every docker call opens its own" in err
    assert left_behind(started, tmp_path) == []


def test_an_engine_not_over_ssh_is_left_as_it_is(started, tmp_path):
    engine = DockerEngine(host="unix:///var/run/docker.sock")
    with one_connection(engine):
        assert engine.dial is None
    assert started == []


def test_the_dialled_socket_stands_in_for_the_engine_in_its_messages():
    engine = DockerEngine(host="ssh://me@spark")
    engine.dial = "unix:///tmp/edgevllm-ssh-abc/docker.sock"
    assert engine.base_argv() == ["docker", "--host", engine.dial]
    assert engine.describe() == "ssh://me@spark"
    with pytest.raises(Exception, match="Cannot connect to the Docker daemon at ssh://me@spark") \
            as caught:
        engine.raise_if_unreachable(f"Cannot connect to the Docker daemon at {engine.dial}. Is "
                                    "the docker daemon running?")
    assert "edgevllm-ssh-abc" not in str(caught.value)


@pytest.mark.parametrize("endpoint, path", [
    ("unix:///var/run/docker.sock", "/var/run/docker.sock"),
    ("unix:///run/user/1000/docker.sock", "/run/user/1000/docker.sock"),
])
def test_a_unix_endpoint_is_forwarded(endpoint, path):
    assert socket_path(endpoint) == path


@pytest.mark.parametrize("endpoint", ["tcp://127.0.0.1:2375", "ssh://other", "",
                                      "unix:///a:b.sock", "unix://relative.sock",
                                      "unix:///x.sock\n-oProxyCommand=x"])
def test_anything_else_is_not(endpoint):
    with pytest.raises(ForwardUnavailable, match="not a unix socket"):
        socket_path(endpoint)
