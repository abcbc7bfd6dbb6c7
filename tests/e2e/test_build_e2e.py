"""End-to-end builds on the real Docker engine, through the same CLI, templates and driver as a
real build (see conftest.py for what stands in for vLLM and the base image, and why).

- thor, the other platform under qemu emulation (linux/arm64, the real target, on an x86_64
  host; linux/amd64 on an arm64 one: support/platforms.py): `edgevllm build --spec`, a
  cherry-picked PR that changes the compiled code, mods applied in the image, arch verify and
  probe level 1 run by the build; the extension carries sm_110a SASS (checked with cuobjdump too),
  no wheel in any layer, no bytes shadowed by a later layer, labels, the mods record, the lock.
- spark, the host's platform (native, fast): sm_121a, no bytes shadowed; a runtime-only change
  reuses the wheels (nothing recompiled); a rebuild from the lock reproduces the tree hash and
  the tag.
- failures: a compile error names the failing stage and shows its log; no image is tagged.
"""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

import pytest

from e2e.conftest import PR_BROKEN, PR_MARKER, hermetic_spec, write_spec
from edgevllm.image.publish import PublishOptions, publish
from support.checks import present
from support.platforms import foreign_arch, foreign_platform, native_platform
from support.publish_images import NoSaveEngine

pytestmark = pytest.mark.e2e


def run_in(engine, image: str, *command: str) -> str:
    from edgevllm.containers.docker import RunOptions

    proc = engine.run(RunOptions(image=image, remove=True, command=list(command)), timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout.decode().strip()


def wheels_in_layers(engine, image: str) -> list[str]:
    """Every *.whl path in any layer of the saved image (nested layer tars read as streams)."""
    found = []
    with engine.save_stream([image]) as stream:
        with tarfile.open(fileobj=stream, mode="r|") as outer:
            for member in outer:
                if not member.isfile():
                    continue
                handle = outer.extractfile(member)
                try:
                    with tarfile.open(fileobj=handle, mode="r|*") as layer:
                        found += [m.name for m in layer if m.name.endswith(".whl")]
                except tarfile.TarError:
                    continue  # a config or manifest blob, not a layer
    return found


def sass_of(reports, suffix: str) -> set[str]:
    lib = next(r for r in reports if r.path.endswith(suffix))
    return set(lib.arches("sass"))


@pytest.fixture(scope="module")
def thor_build(engine, cuda_image_foreign, cuda_image_native, fake_upstream, tmp_path_factory, cli):
    out = tmp_path_factory.mktemp("thor-out")
    spec = hermetic_spec(
        "thor",
        cuda_image_foreign,
        fake_upstream,
        platform=foreign_platform(),
        # The emulated road, asked for: the target's own compiler under qemu (an x86_64 host
        # cross-compiles by default: test_cross_build_e2e.py).
        toolchain="emulated",
        mods=["thor-runtime", "fused-moe-configs"],
        # The closure's byte-code is compiled on this host's platform: the emulated base's native
        # twin (same Debian, same Python); no registry here serves the base for both platforms.
        bytecode_image=cuda_image_native,
    )
    spec["vllm"]["cherry_picks"] = [str(PR_MARKER)]
    spec_file = write_spec(out / "thor-spec.yaml", **spec)
    code, stdout, stderr = cli(
        "build",
        "--spec",
        str(spec_file),
        "--out",
        str(out),
        "--json",
        str(out / "result.json"),
        timeout=3000,
    )
    assert code == 0, stderr[-4000:]
    return json.loads((out / "result.json").read_text()), out


def test_thor_dockerfile_carries_arch_and_platform(thor_build):
    result, out = thor_build
    dockerfile = (out / "thor" / "context" / "Dockerfile").read_text()
    assert 'TORCH_CUDA_ARCH_LIST="11.0a"' in dockerfile
    assert result["image"].startswith("edgevllm-test/e2e-thor:0.1.0-thor-")


def test_thor_image_is_the_emulated_platform_with_sm110a_sass(thor_build, engine):
    from edgevllm.verify.api import scan_image

    result, _ = thor_build
    assert engine.image_inspect(result["image"])["Architecture"] == foreign_arch()
    sass = sass_of(scan_image(engine, result["image"]), "vllm/_C.abi3.so")
    assert sass == {"sm_110a"}


def test_thor_extension_sass_confirmed_by_cuobjdump(thor_build, engine, tmp_path):
    """cuobjdump (NVIDIA's, from PyPI) lists the same SASS in the extension copied out of the
    image."""
    import subprocess

    from support.cuda_libs import cuobjdump_binary

    result, _ = thor_build
    container = engine.create(result["image"])
    try:
        engine.copy_from(
            container,
            "/opt/venv/lib/python3.11/site-packages/vllm/_C.abi3.so",
            tmp_path / "_C.abi3.so",
        )
    finally:
        engine.remove_container(container)
    listing = subprocess.run(
        [str(cuobjdump_binary()), "--list-elf", str(tmp_path / "_C.abi3.so")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "sm_110a" in listing and "sm_121" not in listing


def test_thor_picked_pr_is_in_the_compiled_code(thor_build, engine):
    result, _ = thor_build
    marker = run_in(
        engine, result["image"], "python3", "-c", "import vllm._C as c; print(c.marker())"
    )
    assert marker == "pr-1"


def test_thor_no_wheel_in_any_layer(thor_build, engine, cuda_image_foreign):
    """Wheels the base image ships (Debian's ensurepip wheels) are the base's; the build adds
    none."""
    result, _ = thor_build
    added = set(wheels_in_layers(engine, result["image"])) - set(
        wheels_in_layers(engine, cuda_image_foreign)
    )
    assert added == set()
    assert any("python-wheels" in w for w in wheels_in_layers(engine, cuda_image_foreign)), (
        "the check must see wheels in layers when there are some"
    )


def shadowing(layers: dict) -> list[str]:
    """The layers that carry bytes a later layer replaces (the build's layer report)."""
    return [f"{layer['shadowed_bytes']} B of {layer['step'][:160]}" for layer in layers["layers"]
            if layer["shadowed_bytes"]]


def test_thor_layers_shadow_nothing(thor_build):
    """The compiled wheels come over the closure in their own layer (the stage vllm-files), the
    mods after them: no layer of the image replaces a file of another."""
    result, _ = thor_build
    layers = result["layers"]
    assert layers["shadowed_bytes"] == 0, shadowing(layers)
    installs = [layer for layer in layers["layers"] if '"$uv" pip install' in layer["step"]]
    assert len(installs) == 2 and "/tmp/edgevllm-wheels/*.whl" in installs[1]["step"], installs


def test_thor_labels_lock_and_mods_record(thor_build, engine):
    from edgevllm.specs.lock import read_lock

    result, _ = thor_build
    labels = engine.image_labels(result["image"])
    lock = read_lock(result["lock"])
    assert labels["io.edgevllm.target"] == "thor"
    assert labels["io.edgevllm.arch-list"] == "11.0a"
    assert lock.vllm is not None
    assert labels["org.opencontainers.image.revision"] == lock.vllm.commit
    assert labels["io.edgevllm.prs"] == str(PR_MARKER)
    assert [p.pr for p in lock.vllm.picks] == [PR_MARKER]
    assert json.loads(labels["io.edgevllm.verify"])["passed"] is True
    assert json.loads(labels["io.edgevllm.probe"])["passed"] is True
    outcomes = {m["name"]: m["outcome"] for m in json.loads(labels["io.edgevllm.mods"])}
    assert outcomes == {"thor-runtime": "applied", "fused-moe-configs": "applied"}
    record = json.loads(run_in(engine, result["image"], "cat", "/opt/edgevllm/mods.json"))
    assert {m["name"] for m in record["mods"]} == {"thor-runtime", "fused-moe-configs"}
    in_image = json.loads(
        run_in(engine, result["image"], "cat", "/opt/edgevllm/edgevllm.lock.json")
    )
    assert in_image["vllm"]["tree"] == lock.vllm.tree


@pytest.fixture(scope="module")
def spark_spec(cuda_image_native, fake_upstream):
    return hermetic_spec(
        "spark", cuda_image_native, fake_upstream, platform=native_platform(), mods=[]
    )


def test_spark_sm121a_rebuild_and_lock(spark_spec, engine, tmp_path, cli):
    from edgevllm.builder.pipeline import build
    from edgevllm.specs.buildspec import spec_from_dict
    from edgevllm.specs.lock import read_lock
    from edgevllm.verify.api import scan_image

    first = build(spec_from_dict(spark_spec), tmp_path, engine)
    assert sass_of(scan_image(engine, first.image), "vllm/_C.abi3.so") == {"sm_121a"}
    assert first.layers is not None and first.verify is not None
    assert first.layers["shadowed_bytes"] == 0, shadowing(first.layers)
    # The kernel plan (the preflight, from the tree's own CMake) is in the lock and agrees with
    # what verify found in the built library.
    planned = read_lock(first.lock_path)
    assert planned.kernel_plan["cuda_archs"] == ["12.1a"] and planned.cmake_deps == {}
    assert first.verify["plan"] == ["_C: plan: 12.1a; binary: sm_121a ✔"]
    # The locked closure: the tree's requirements/cuda.txt (and the common.txt it includes)
    # resolved for the target, every wheel by sha256; the build tools too.
    assert planned.mode == "compile" and planned.closure is not None
    assert {"packaging", "uv"} <= {w.name for w in planned.closure.wheels}
    assert planned.build_closure is not None
    assert {"setuptools", "wheel"} <= {w.name for w in planned.build_closure.wheels}
    assert all(len(w.sha256) == 64 for w in planned.closure.wheels)
    # The shared tail writes the image's SBOM beside its lock.
    sbom = first.lock_path.with_name(first.lock_path.name.replace(".lock.json", ".sbom.cdx.json"))
    assert first.supply_chain is not None
    assert first.supply_chain["sbom"] == str(sbom) and sbom.is_file()

    changed = build(spec_from_dict({**spark_spec, "env": {"EDGEVLLM_TEST": "2"}}), tmp_path, engine)
    assert changed.compiled is False, "a runtime-only change must not recompile"
    assert changed.wheels_dir == first.wheels_dir
    assert run_in(engine, changed.image, "printenv", "EDGEVLLM_TEST") == "2"

    # `edgevllm build --lock`: everything from the lock. The closure's wheels come back by
    # sha256 (nothing resolved) and the compiled wheels by the compile key (nothing compiled).
    # With $EDGEVLLM_SIGNING_KEY the tail signs the provenance too.
    from edgevllm.inspect.dsse import generate_key

    key, public = generate_key(tmp_path / "signing.pem")
    code, stdout, stderr = cli(
        "build",
        "--lock",
        str(first.lock_path),
        "--out",
        str(tmp_path),
        "--no-verify",
        "--image-repo",
        spark_spec["image_repo"],
        "--publish-cache",
        "--json",
        str(tmp_path / "again.json"),
        env={"EDGEVLLM_LAYER_CACHE": str(tmp_path / "layers"), "EDGEVLLM_SIGNING_KEY": str(key)},
        timeout=1800,
    )
    assert code == 0, stderr[-3000:]
    again = json.loads((tmp_path / "again.json").read_text())
    assert "wheels from the lock (no resolve)" in stderr and "closure: resolving" not in stderr
    assert "build tools:" not in stderr   # taken from the lock too
    assert again["compiled"] is False, "the lock's compile key must find the compiled wheels"
    relocked_path = Path(again["lock"])
    relocked = read_lock(relocked_path)
    assert relocked.closure == planned.closure and relocked.build_closure == planned.build_closure
    code, _, err = cli("verify-supply-chain", "--image", first.tags[0], "--lock",
                       str(relocked_path), "--key", str(public))
    assert code == 0, err
    assert relocked.vllm is not None
    assert relocked.vllm.tree == present(read_lock(first.lock_path).vllm).tree
    assert stdout.strip() == first.tags[0]
    # --publish-cache: the layers are compressed at build time, so the first publish of the
    # image assembles cached frames and never calls docker save.
    primed = again["publish_cache"]
    assert primed["compressed_layers"] + primed["cached_layers"] > 0, primed
    assert "publish cache:" in stderr
    published = publish(
        NoSaveEngine(),
        PublishOptions(
            image=first.tags[0], out_dir=tmp_path / "pub", layer_cache=tmp_path / "layers"
        ),
    )
    assert published.layers is not None
    assert not published.layers.saved and published.layers.compressed_layers == 0


def test_compile_failure_names_stage_and_tags_nothing(spark_spec, engine, tmp_path):
    from edgevllm.builder.pipeline import build
    from edgevllm.common.errors import BuildError
    from edgevllm.specs.buildspec import spec_from_dict

    spec = {
        **spark_spec,
        "vllm": {**spark_spec["vllm"], "cherry_picks": [str(PR_BROKEN)]},
        "image_repo": "edgevllm-test/e2e-broken",
    }
    with pytest.raises(BuildError) as failure:
        build(spec_from_dict(spec), tmp_path, engine)
    message = str(failure.value)
    assert "stage 'build' failed" in message
    assert "this is not CUDA" in message or "error" in message.lower()
    assert not [c for c in engine.images("edgevllm-test/e2e-broken")]


def test_wrong_arch_fails_the_gate_and_is_not_tagged(
    cuda_image_native, fake_upstream, engine, tmp_path, monkeypatch
):
    """A target that asks for GB10 (12.1a) but compiles 12.0a, the silent-12.0 failure users hit:
    sm_120a SASS does not run on GB10, so the arch gate fails and only the -unverified tag
    exists."""
    from edgevllm.builder.pipeline import build
    from edgevllm.common.errors import ArchGateFailed
    from edgevllm.common.paths import data_dirs
    from edgevllm.specs.buildspec import spec_from_dict

    text = (data_dirs("targets")[0] / "spark.yaml").read_text()
    # No needed kernel groups: the preflight would stop this build in seconds
    # (tests/test_sources_plan.py); without them the arch gate after the build must catch it.
    text = re.sub(r"\n  required:\n(    .*\n)+", "\n  required: {}\n", text)
    assert "required: {}" in text
    (tmp_path / "spark120a.yaml").write_text(
        text.replace("name: spark", "name: spark120a").replace(
            'torch_cuda_arch_list: "12.1a"', 'torch_cuda_arch_list: "12.0a"'
        )
    )
    monkeypatch.setenv("EDGEVLLM_TARGETS_PATH", str(tmp_path))
    spec = hermetic_spec(
        "spark120a",
        cuda_image_native,
        fake_upstream,
        platform=native_platform(),
        mods=[],
        image_repo="edgevllm-test/e2e-gate",
    )
    with pytest.raises(ArchGateFailed, match="kernel-arch gate failed for spark120a"):
        build(spec_from_dict(spec), tmp_path / "out", engine)
    tags = engine.images("edgevllm-test/e2e-gate", "{{.Tag}}")
    assert tags and all(t.endswith("-unverified") for t in tags)
    verdict = json.loads((tmp_path / "out" / "spark120a" / "verify.json").read_text())
    assert verdict["passed"] is False
    for tag in tags:
        engine.remove_image(f"edgevllm-test/e2e-gate:{tag}", force=True)


BROKEN_MOD = """\
name: broken-edit
version: "1"
description: edits an anchor that the installed vllm does not have (a mod upstream moved past)
targets: [spark]
steps:
  - kind: edit
    packages: [vllm]
    path: vllm/__init__.py
    replacements:
      - anchor: "this line is not in the file"
        replacement: "patched = True"
"""


def test_failed_mod_never_yields_an_image(
    cuda_image_native, fake_upstream, engine, tmp_path, monkeypatch
):
    """A mod whose anchor is missing fails the runtime stage; the message names the mod, the
    package version, the file and the anchor; no image is tagged, not even as unverified."""
    from edgevllm.builder.pipeline import build
    from edgevllm.common.errors import BuildError
    from edgevllm.specs.buildspec import spec_from_dict

    (tmp_path / "mods" / "broken-edit").mkdir(parents=True)
    (tmp_path / "mods" / "broken-edit" / "manifest.yaml").write_text(BROKEN_MOD)
    monkeypatch.setenv("EDGEVLLM_MODS_PATH", str(tmp_path / "mods"))
    spec = hermetic_spec(
        "spark",
        cuda_image_native,
        fake_upstream,
        platform=native_platform(),
        mods=["broken-edit"],
        image_repo="edgevllm-test/e2e-badmod",
    )
    with pytest.raises(BuildError) as failure:
        build(spec_from_dict(spec), tmp_path / "out", engine)
    message = str(failure.value)
    assert "stage 'runtime' failed" in message
    assert "broken-edit" in message and "vllm/__init__.py" in message
    assert "this line is not in the file" in message
    assert engine.images("edgevllm-test/e2e-badmod") == []


def test_flashinfer_built_from_source_is_locked_and_native(
    spark_spec, fake_flashinfer_upstream, engine, tmp_path
):
    """The second source path: FlashInfer from a git repo is resolved and locked on the host, built
    in its own stage for FLASHINFER_CUDA_ARCH_LIST, installed from the exported wheels, and gated
    by the arch policy (FlashInfer's libraries must run on the target)."""
    from edgevllm.builder.pipeline import build
    from edgevllm.specs.buildspec import spec_from_dict
    from edgevllm.specs.lock import read_lock
    from edgevllm.verify.api import scan_image

    spec = {
        **spark_spec,
        "flashinfer": {"source": {"repo": fake_flashinfer_upstream.url, "ref": "v0.1.0"}},
        "probe_required": ["vllm", "flashinfer"],
    }
    result = build(spec_from_dict(spec), tmp_path, engine)
    lock = read_lock(result.lock_path)
    assert lock.flashinfer is not None and lock.flashinfer.version == "0.1.0"
    assert (
        lock.flashinfer.tree == fake_flashinfer_upstream.git("rev-parse", "v0.1.0^{tree}").strip()
    )
    assert sass_of(scan_image(engine, result.image), "flashinfer/_kernels.abi3.so") == {"sm_121a"}
    assert result.verify is not None and result.probe is not None
    assert result.verify["passed"] is True and result.probe["passed"] is True
    engine.remove_image(result.image, force=True)


def test_ctrl_c_during_the_compile_leaves_nothing_under_a_final_name(
    cuda_image_native, fake_upstream, engine, tmp_path
):
    """SIGINT while nvcc runs: exit 130, one line, no wheel folder under its final name (only the
    lock, which is complete when written), and no image at all."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from e2e.conftest import FIXTURE_TREE, KERNELS
    from support.gitfixtures import commit, head

    # The hold file makes the fixture's compile print a marker and wait before nvcc, so the
    # signal always lands mid-compile (a warm ccache used to let the compile win the race).
    salted = (FIXTURE_TREE / KERNELS).read_text() + f"\n// interrupt test {time.time()}\n"
    commit(
        fake_upstream,
        [head(fake_upstream)],
        {KERNELS: salted, "edgevllm-test-hold": "600"},
        "a tree no cache has seen, holding its compile",
        ref="refs/heads/interrupt",
    )
    spec = hermetic_spec(
        "spark",
        cuda_image_native,
        fake_upstream,
        platform=native_platform(),
        mods=[],
        image_repo="edgevllm-test/e2e-interrupt",
    )
    spec["vllm"]["ref"] = "interrupt"
    spec_file = write_spec(tmp_path / "spec.yaml", **spec)
    out = tmp_path / "out"
    images_before = set(engine.images("edgevllm-test/e2e-interrupt"))
    stderr = tmp_path / "stderr.txt"
    with open(stderr, "w") as err_file:  # a file, not a pipe: nothing can block on a full pipe
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from edgevllm.cli import main; main()",
                "build",
                "--spec",
                str(spec_file),
                "--out",
                str(out),
            ],
            stderr=err_file,
            stdout=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(FIXTURE_TREE.parents[3])},
        )
        if not wait_for_marker(out / "spark" / "logs", "fake-vllm: holding before nvcc", proc, 900):
            proc.kill()
            pytest.fail("the fixture compile never reached its hold point:\n" + stderr.read_text())
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    rest = stderr.read_text()
    assert proc.returncode == 130, rest
    assert "Traceback" not in rest and "error: interrupted" in rest
    wheels = out / "spark" / "wheels"
    assert (
        not wheels.exists()
        or [p.name for p in wheels.iterdir() if not p.name.startswith(".")] == []
    )
    assert set(engine.images("edgevllm-test/e2e-interrupt")) == images_before  # no new image


def wait_for_marker(logs, marker: str, proc, timeout_s: float) -> bool:
    """True once a build log under ``logs`` holds ``marker`` (the build's raw output goes there);
    False when the build process ends first or the deadline passes."""
    from edgevllm.common.poll import poll

    def seen() -> bool | None:
        if proc.poll() is not None:
            return False
        found = any(marker in f.read_text(errors="replace") for f in logs.glob("*.log"))
        return True if found else None

    return bool(poll(seen, timeout_s, interval_s=0.5))
