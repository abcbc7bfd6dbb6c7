"""``inv build --engine``: the fixture build (fake-vllm, nvcc-compiled, the host's platform) run on
other Docker engines, driven from here. The engines are node containers running sshd and their own
dockerd (tests/support/sshd_node.py), reached as ``ssh://root@ADDR`` through the real ssh client;
the base image reaches them through ``inv copy``.

- One build on node A over ssh: preflight asks node A (its architecture: native; its free disk),
  the sources are prepared here, the build contexts go to node A, and the compiled wheels, the
  lock, the log and the verdict come back here; the image stays on node A (not on this engine),
  and ``inv verify`` / ``inv probe --engine`` check it there. The same build on node B through
  its socket (the engine as the device itself reaches it, no ssh) gives the same lock tag and
  wheel hashes; both times are printed (the measurement the docs quote). The build over ssh
  holds one ssh connection (containers/sshforward.py), and nothing of it is left after.
- Two targets at once on two engines (thor on node A, spark on node B): one progress line per
  target, one summary. Node A is killed during its compile: one line names it, nothing of thor
  is left under a final name here, spark is built all the same, and the exit code is non-zero;
  neither build leaves an ssh process or a forwarded socket behind.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import zipfile

import pytest

from e2e.conftest import hermetic_spec, write_spec
from support.platforms import how_built, native_arch, native_platform

pytestmark = pytest.mark.e2e

PREFIX = "edgevllm-test-remote"


@pytest.fixture(scope="module")
def nodes(engine, cuda_image_native, tmp_path_factory, cli):
    from support.sshd_node import SshNodes

    workdir = tmp_path_factory.mktemp("ssh")
    with SshNodes(engine, PREFIX, 2, workdir, socket_dir=workdir / "sockets",
                  bridge=True) as made:
        code, out, err = cli("copy", "--image", cuda_image_native, "--to",
                             ",".join(made.urls()), env=made.env(), timeout=600)
        assert code == 0, err
        yield made


@pytest.fixture(scope="module")
def spec_file(cuda_image_native, fake_upstream, tmp_path_factory):
    spec = hermetic_spec("spark", cuda_image_native, fake_upstream, platform=native_platform(),
                         mods=[], image_repo="edgevllm-test/remote")
    return write_spec(tmp_path_factory.mktemp("spec") / "remote.yaml", **spec)


def wheel_hashes(folder) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.glob("*.whl")}


def forward_leftovers(temp) -> list[str]:
    """What the builds' ssh forwards left: folders in their TMPDIR, processes naming it."""
    from support.sshd_node import processes_naming

    return [str(p) for p in temp.glob("edgevllm-ssh-*")] + [
        f"pid {pid}" for pid in processes_naming(f"{temp}/edgevllm-ssh-")]


def timed_build(cli, env, *args) -> tuple[float, int, str, str]:
    started = time.monotonic()
    code, out, err = cli("build", *args, env=env, timeout=1500)
    return time.monotonic() - started, code, out, err


def test_build_on_another_engine_brings_everything_back(nodes, spec_file, engine, tmp_path, cli,
                                                        monkeypatch):
    monkeypatch.setenv("PATH", nodes.env()["PATH"])
    node_a = nodes.urls()[0]
    # The preflight's own checks, asked of node A in seconds: thor's linux/arm64 is emulated
    # there on an x86_64 host (the node's builder lists it: binfmt on its machine), native on an
    # arm64 one; its disk is its own.
    started = time.monotonic()
    code, out, err = cli("doctor", "--target", "thor", "--engine", node_a, env=nodes.env())
    doctor_s = time.monotonic() - started
    rows = {line[6:28].strip(): line[28:].strip() for line in out.splitlines()}
    assert rows["emulation / platform"] == \
        f"linux/arm64 {how_built('linux/arm64')} on {native_arch()}", out + err
    assert rows["disk"].startswith(f"engine {node_a}: ") and "GB free" in rows["disk"], out
    temp = tmp_path / "tmp"
    temp.mkdir()
    remote_s, code, out, err = timed_build(
        cli, {**nodes.env(), "TMPDIR": str(temp)}, "--spec", str(spec_file), "--out",
        str(tmp_path / "a"), "--engine", node_a, "--json", str(tmp_path / "a.json"))
    assert code == 0, err[-4000:]
    assert "no shared ssh connection" not in err  # one ssh connection carried the build
    assert forward_leftovers(temp) == []
    remote_err = err
    assert f"engine {node_a}: {native_arch()} machine, {native_platform()} native" in err
    assert f"engine {node_a}: " in err and " GB free" in err
    result = json.loads((tmp_path / "a.json").read_text())
    built = tmp_path / "a" / "spark"
    wheels = wheel_hashes(next((built / "wheels").iterdir()))
    assert any(name.startswith("vllm-") for name in wheels), wheels
    assert result["compiled"] and result["verify"]["passed"] and result["probe"]["passed"]
    assert (built / "latest.lock.json").is_file() and (built / "verify.json").is_file()
    [log] = (built / "logs").glob("build-*.log")
    assert "compile (wheels stage)" in log.read_text()
    # The image stays where it was built.
    assert nodes.node_engine(0).image_exists(result["image"])
    assert not engine.image_exists(result["image"])
    code, _, err = cli("verify", "--target", "spark", "--image", result["image"],
                       "--engine", node_a, env=nodes.env())
    assert code == 0, err
    code, _, err = cli("probe", "--image", result["image"], "--target", "spark",
                       "--require", "vllm", "--engine", node_a, env=nodes.env())
    assert code == 0, err

    # The same build on node B's engine reached without ssh, as the device itself would.
    local_s, code, out, err = timed_build(
        cli, {}, "--spec", str(spec_file), "--out", str(tmp_path / "b"),
        "--engine", nodes.socket_engine(1).host or "", "--json", str(tmp_path / "b.json"))
    assert code == 0, err[-4000:]
    again = json.loads((tmp_path / "b.json").read_text())
    assert again["image"] == result["image"]  # same lock tag: the same build
    assert wheel_hashes(next((tmp_path / "b" / "spark" / "wheels").iterdir())).keys() == \
        wheels.keys()
    print(f"\ndoctor on node A: {doctor_s:.1f}s")
    for name, text in (("ssh", remote_err), ("socket", err)):
        print(name, "; ".join(line.strip() for line in text.splitlines() if ": done in " in line))
    print(f"fixture build over ssh: {remote_s:.1f}s; through the engine's own socket: "
          f"{local_s:.1f}s; ratio {remote_s / local_s:.2f}")


def test_two_targets_in_parallel_and_a_node_that_goes_away(nodes, spec_file, engine, tmp_path,
                                                            monkeypatch):
    import os
    import subprocess
    import sys
    from pathlib import Path

    monkeypatch.setenv("PATH", nodes.env()["PATH"])
    node_a, node_b = nodes.urls()
    out = tmp_path / "out"
    argv = [sys.executable, "-c", "from edgevllm.cli import main; main()", "build",
            "--spec", str(spec_file), "--target", "thor,spark", "--platform", native_platform(),
            "--out", str(out), "--engine", f"thor={node_a}", "--engine", f"spark={node_b}"]
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, **nodes.env(), "NO_COLOR": "1", "TMPDIR": str(temp)}
    proc = subprocess.Popen(argv, cwd=Path(__file__).parents[2], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and proc.poll() is None:  # the compile step has started
        logs = list((out / "thor" / "logs").glob("build-*.log"))
        if logs and re.search(r"\[build \d+/\d+\] RUN", logs[0].read_text()):
            break
        time.sleep(0.2)
    engine.remove_container(nodes.names[0])  # node A goes away mid-build
    stdout, stderr = proc.communicate(timeout=900)
    assert proc.returncode == 6, stderr
    assert f"spark on {node_b}: built in " in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"thor on {node_a} (engine {node_a} went away" in errors[0], \
        stderr
    assert "Traceback" not in stderr
    assert "no shared ssh connection" not in stderr and forward_leftovers(temp) == []
    # One progress line per target while it ran, one summary after.
    assert any(line.startswith(f"thor on {node_a}: ") for line in stderr.splitlines())
    assert any(line.startswith(f"spark on {node_b}: ") for line in stderr.splitlines())
    assert stderr.count("==> summary") == 1
    # spark was built all the same, on node B, and is the one image printed.
    [image] = stdout.split() or [stderr]
    assert nodes.node_engine(1).image_exists(image)
    assert (out / "spark" / "latest.lock.json").is_file()
    # Nothing of thor under a final name: no lock, no image; a wheels folder only when its export
    # had completed before the node went (then every wheel in it is whole), no temporary leftover.
    thor = out / "thor"
    assert not list(thor.glob("*.lock.json"))
    assert not [p for p in thor.glob("wheels/*") if ".tmp-" in p.name or ".old-" in p.name]
    phase = errors[0].split("went away during ", 1)[1].split(" (after")[0]
    finals = [p for p in thor.glob("wheels/*") if p.is_dir()]
    if phase == "compile (wheels stage)":
        assert not finals, finals
    for folder in finals:
        for wheel in folder.glob("*.whl"):
            assert zipfile.ZipFile(wheel).testzip() is None
