"""The engine a flag names and the machine it runs on: the flag's grammar, the endpoint the docker
CLI would use (real docker CLI, real contexts in a throw-away DOCKER_CONFIG), and the preflight's
answers for this machine's engine and for an engine that cannot be asked about its disk."""

from __future__ import annotations

import subprocess

import pytest

from edgevllm.common.errors import ConfigError, DiskSpaceError
from edgevllm.containers.docker import DockerEngine, parse_ssh_url
from edgevllm.containers.enginehost import (
    check_build_disk,
    check_engine_disk,
    check_load_disk,
    engine_free_gb,
    engine_platform,
    load_disk_verdict,
)
from edgevllm.containers.host import host_arch


@pytest.mark.parametrize("spec, host, context", [
    ("ssh://me@spark", "ssh://me@spark", None),
    ("ssh://spark:2222", "ssh://spark:2222", None),
    ("tcp://10.0.0.2:2376", "tcp://10.0.0.2:2376", None),
    ("unix:///run/docker.sock", "unix:///run/docker.sock", None),
    ("thor-ctx", None, "thor-ctx"),
    ("local", None, None),
    (None, None, None),
])
def test_engine_forms_accepted(spec, host, context):
    engine = DockerEngine.named(spec)
    assert (engine.host, engine.context) == (host, context)


@pytest.mark.parametrize("spec", ["ssh://me@spark/x y", "ssh://a@b@c", "http://spark",
                                  "tcp://a;rm -rf /", "-H", "my context", "ctx$(id)"])
def test_engine_forms_refused_with_the_grammar(spec):
    with pytest.raises(ConfigError, match="expected"):
        DockerEngine.named(spec)


def test_ssh_url_parts():
    assert parse_ssh_url("ssh://me@spark:2222") == ("me@spark", 2222)
    assert parse_ssh_url("ssh://spark") == ("spark", None)


def test_endpoint_of_host_context_and_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    subprocess.run(["docker", "context", "create", "spark-ctx", "--docker",
                    "host=ssh://me@spark"], check=True, capture_output=True)
    assert DockerEngine.named("spark-ctx").endpoint() == "ssh://me@spark"
    assert not DockerEngine.named("spark-ctx").runs_here
    assert DockerEngine().endpoint().startswith("unix://") and DockerEngine().runs_here
    monkeypatch.setenv("DOCKER_HOST", "ssh://me@thor")
    assert DockerEngine().endpoint() == "ssh://me@thor" and not DockerEngine().runs_here
    with pytest.raises(ConfigError, match="no such docker context"):
        DockerEngine.named("nobody-ctx").endpoint()


def test_this_machines_engine_builds_its_own_platform_natively(engine):
    how = engine_platform(engine, f"linux/{host_arch()}")
    assert (how.how, how.arch) == ("native", host_arch())
    assert how.line() == f"engine default: {host_arch()} machine, linux/{host_arch()} native"


def test_an_engine_not_reached_over_ssh_has_unknown_disk_and_says_so(monkeypatch):
    tcp = DockerEngine.named("tcp://192.0.2.1:2376")  # nothing is asked of it
    assert engine_free_gb(tcp) is None
    monkeypatch.delenv("EDGEVLLM_MIN_DISK_GB", raising=False)
    assert check_engine_disk(tcp, 60) == ("engine tcp://192.0.2.1:2376: free disk unknown (only "
                                          "an ssh:// engine is asked); the build needs about "
                                          "60 GB there")


def test_an_ssh_engine_that_does_not_answer_has_unknown_disk(tmp_path, monkeypatch):
    """The real ssh client against a port nobody listens on: no figure, no hang, no crash."""
    engine = DockerEngine.named("ssh://root@127.0.0.1:1")
    monkeypatch.setattr(DockerEngine, "root_dir", lambda self: "/var/lib/docker")
    assert engine_free_gb(engine) is None
    monkeypatch.setattr("edgevllm.containers.enginehost.engine_free_gb", lambda e: 3.0)
    monkeypatch.setenv("EDGEVLLM_MIN_DISK_GB", "")
    with pytest.raises(DiskSpaceError, match="only 3.0 GB free on engine ssh://root@127.0.0.1:1"):
        check_engine_disk(engine, 60)


def test_a_builds_disk_is_this_machines_for_a_local_engine_and_the_engines_otherwise(
        tmp_path, monkeypatch):
    """One question for every build (runner, pipeline, doctor): the disk where the engine
    builds. A local engine: the output's folder here; a remote one: its own machine."""
    monkeypatch.delenv("EDGEVLLM_MIN_DISK_GB", raising=False)
    local = DockerEngine()
    assert local.runs_here
    assert check_build_disk(local, tmp_path / "out", 0.001) == \
        f">= 0.001 GB free under {tmp_path / 'out'}"
    with pytest.raises(DiskSpaceError, match=f"GB free under {tmp_path / 'out'}, this needs"):
        check_build_disk(local, tmp_path / "out", 10**9)
    remote = DockerEngine.named("tcp://192.0.2.1:2376")   # nothing is asked of it
    assert check_build_disk(remote, tmp_path / "out", 10**9).startswith(
        "engine tcp://192.0.2.1:2376: free disk unknown")   # this machine's disk is not its


@pytest.mark.parametrize("free, level, says", [
    (None, "info", "free disk unknown; docker load needs 10.3 GB"),
    (9.0, "error", "only 9.0 GB free under /var/lib/docker, and docker load first unpacks the "
                   "whole 10.3 GB archive there"),
    (15.0, "warn", "enough to unpack the 10.3 GB archive; the layers the engine does not hold "
                   "yet need up to as much again"),
    (40.0, "info", "40 GB free under /var/lib/docker (docker load needs 10.3 GB)"),
])
def test_a_load_needs_the_archive_free_and_may_need_twice(free, level, says):
    got, line = load_disk_verdict(10.27, free, "under /var/lib/docker")
    assert got == level and says in line, line


def test_a_local_engines_load_verdict_reads_its_root_folders_disk(engine):
    level, line = check_load_disk(engine, 1_000_000)
    assert level == "info" and f"under {engine.root_dir()}" in line, line
    level, line = check_load_disk(engine, 10**16)   # 10 PB: more than any disk here
    assert level == "error" and "docker load first unpacks the whole 10000000.0 GB" in line
