"""The engine abstraction: exact command lines, and one-line errors when something is missing."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from edgevllm.common.errors import (
    BinfmtMissingError,
    DaemonUnreachableError,
    DockerUnavailableError,
    EngineError,
    ImageNotFoundError,
)
from edgevllm.containers import host
from edgevllm.containers.docker import BuildOptions, DockerEngine, RunOptions
from support.checks import present


def test_run_argv_keeps_secret_values_out():
    options = RunOptions(
        image="img:1",
        command=["vllm", "serve", "m", "--x", '{"a": 1}'],
        env={"A": "1"},
        env_names=["HF_TOKEN"],
        ports=["8000:8000"],
        runtime="nvidia",
        ipc="host",
        name="n",
        detach=True,
    )
    line = DockerEngine(context="spark2").command_line(options.argv())
    assert line.startswith("docker --context spark2 run -d --name n --ipc host --runtime nvidia")
    assert "-e HF_TOKEN " in line and "-e A=1" in line
    assert shlex.split(line)[-1] == '{"a": 1}'


def test_build_argv_has_contexts_platform_and_output():
    options = BuildOptions(
        context=Path("/ctx"),
        dockerfile=Path("/ctx/Dockerfile"),
        target="wheels",
        platform="linux/arm64",
        build_contexts={"vllm-src": "/src"},
        output="type=local,dest=/out",
    )
    argv = options.argv()
    assert argv[:2] == ["buildx", "build"] and "--load" not in argv
    assert argv[argv.index("--build-context") + 1] == "vllm-src=/src"
    assert argv[argv.index("--platform") + 1] == "linux/arm64"


def test_missing_binary_and_unreachable_daemon():
    with pytest.raises(DockerUnavailableError, match="not found on PATH: install Docker"):
        DockerEngine(binary="docker-that-does-not-exist").check_daemon()
    with pytest.raises(DockerUnavailableError, match="cannot reach the Docker daemon"):
        DockerEngine(host="unix:///nonexistent/docker.sock").check_daemon()


def test_a_daemon_out_of_reach_is_exit_3_on_every_call(tmp_path):
    """The real docker CLI against a socket nobody listens on: calls that check their exit code
    and calls that read it as an answer (image_exists) alike say the daemon is out of reach,
    never "image not found"; a node's failure stays an EngineError for inv copy."""
    dead = DockerEngine(host=f"unix://{tmp_path / 'nobody.sock'}")
    for call in (lambda: dead.image_exists("x"), lambda: dead.image_inspect("x"),
                 lambda: dead.containers()):
        with pytest.raises(DaemonUnreachableError, match="cannot reach the Docker daemon") as exc:
            call()
        assert exc.value.exit_code == 3 and isinstance(exc.value, EngineError)


def test_binfmt_missing_for_a_cross_build(tmp_path, monkeypatch):
    monkeypatch.setattr(host, "BINFMT_DIR", tmp_path)
    monkeypatch.setattr(host, "host_arch", lambda: "amd64")
    with pytest.raises(BinfmtMissingError, match="update-binfmts --enable qemu-aarch64"):
        host.check_emulation("linux/arm64")
    (tmp_path / "qemu-aarch64").write_text("enabled\ninterpreter /usr/bin/qemu-aarch64-static\n")
    host.check_emulation("linux/arm64")


def test_an_old_qemu_is_a_warning_naming_the_fix(tmp_path, monkeypatch):
    """The version comes from the handler's own interpreter (``--version`` of its target, since
    the binfmt name refuses it). A stand-in prints qemu 7.2's banner; the real handler's qemu
    must agree with what its binary says."""
    monkeypatch.setattr(host, "BINFMT_DIR", tmp_path)
    monkeypatch.setattr(host, "host_arch", lambda: "amd64")
    old = tmp_path / "qemu-old"
    old.write_text("#!/bin/sh\necho 'qemu-aarch64 version 7.2.22 (Debian 1:7.2+dfsg-7)'\n")
    old.chmod(0o755)
    (tmp_path / "qemu-aarch64").write_text(f"enabled\ninterpreter {old}\nflags: PF\n")
    assert host.emulator_version("linux/arm64") == (7, 2)
    warning = host.slow_emulation("linux/arm64")
    assert warning and "qemu 7.2" in warning and "qemu-user-static/trixie" in warning
    assert host.slow_emulation("linux/arm64", remote_engine=True) is None
    assert host.slow_emulation("linux/amd64") is None  # native: nothing is emulated
    (tmp_path / "qemu-aarch64").write_text("enabled\ninterpreter /nonexistent/qemu\n")
    assert host.emulator_version("linux/arm64") is None
    assert host.slow_emulation("linux/arm64") is None


def test_the_registered_qemu_version_is_read_from_its_binary():
    """The real handler of the other platform (qemu-aarch64 on an x86_64 host, qemu-x86_64 on an
    arm64 one)."""
    from support.platforms import foreign_arch, foreign_platform, machine

    handler = host.BINFMT_DIR / f"qemu-{machine(foreign_arch())}"
    if not handler.exists():
        pytest.fail(f"no {handler.name} binfmt handler: bash .ci/install-engine.sh registers it")
    interpreter = next(
        ln.split(None, 1)[1] for ln in handler.read_text().splitlines()
        if ln.startswith("interpreter ")
    )
    banner = subprocess.run(
        [os.path.realpath(interpreter), "--version"], capture_output=True, text=True
    ).stdout
    major, minor = present(host.emulator_version(foreign_platform()))
    assert f"version {major}.{minor}." in banner


def test_unknown_image_is_one_line(engine):
    with pytest.raises(ImageNotFoundError, match="image 'edgevllm-test/nope:0' not found"):
        engine.image_inspect("edgevllm-test/nope:0")


def test_start_does_not_change_the_callers_options(engine):
    from edgevllm.common.errors import EngineError
    from edgevllm.containers.docker import RunOptions

    options = RunOptions(image="edgevllm-test/nope:0", command=["true"])
    with pytest.raises(EngineError):
        engine.start(options)  # no such image: the call fails, the options stay as given
    assert options.detach is False


def test_every_daemon_call_has_a_deadline(monkeypatch):
    """A hung daemon is one error line naming the call, never a hang."""
    import subprocess

    from edgevllm.common.errors import EngineError

    seen = []

    def hang(argv, **kwargs):
        seen.append(kwargs.get("timeout"))
        raise subprocess.TimeoutExpired(argv, kwargs.get("timeout") or 0)

    monkeypatch.setattr(subprocess, "run", hang)
    with pytest.raises(EngineError, match="docker images timed out"):
        DockerEngine(binary="sh").images("x")
    with pytest.raises(EngineError, match="docker version timed out"):
        DockerEngine(binary="sh").check_daemon()
    assert all(t is not None and t > 0 for t in seen)


@pytest.mark.parametrize("spec,context,host", [
    (None, None, None), ("", None, None), ("local", None, None), ("default", None, None),
    ("ssh://me@spark2", None, "ssh://me@spark2"), ("tcp://10.0.0.2:2375", None, "tcp://10.0.0.2:2375"),
    ("spark2", "spark2", None),
])
def test_engine_named_by_a_flag(spec, context, host):
    engine = DockerEngine.named(spec)
    assert (engine.context, engine.host) == (context, host)


def test_the_engine_is_one_face_over_its_nouns_and_each_call_lives_in_one():
    """``DockerEngine`` adds only ``named``; every call is defined by one noun (daemon, images,
    containers, networks, buildx, registry), each standing on the daemon alone."""
    from edgevllm.containers import buildx, container, daemon, images, networks, registry

    nouns = [images.Images, container.Containers, networks.Networks, buildx.Buildx,
             registry.Registry]
    assert all(noun.__bases__ == (daemon.Daemon,) for noun in nouns)
    owner: dict[str, str] = {}
    for noun in [daemon.Daemon, *nouns]:
        for name in (n for n in vars(noun) if not n.startswith("__")):
            assert name not in owner, f"{name}: in {owner[name]} and {noun.__name__}"
            owner[name] = noun.__name__
    assert {n for n in vars(DockerEngine) if not n.startswith("__")} == {"named"}
    assert all(hasattr(DockerEngine, name) for name in owner)
