"""The mode registry: every build mode has its module (behind the one seam) and its template on
the shared base; the mode is decided in one place (builder/modes.start, with specs' rule)."""

from __future__ import annotations

from pathlib import Path

from edgevllm.builder.modes import MODES, prepare, start
from edgevllm.builder.render import template_name
from edgevllm.builder.runner import Workspace
from edgevllm.common.paths import templates_dir
from edgevllm.specs.buildspec import load_spec
from edgevllm.specs.moderecord import mode_records


def test_every_mode_has_a_module_and_a_template_on_the_base():
    assert set(MODES) == set(mode_records())  # and each its record
    for name, mode in MODES.items():
        assert mode.name == name and callable(mode.prepare)
        template = (templates_dir() / template_name(name)).read_text()
        assert '{% extends "base.Dockerfile.j2" %}' in template, name


def test_a_job_without_fetching_asks_nothing_and_locks_nothing(tmp_path):
    """inv render's job: the spec alone decides; no engine, no lock, placeholders for what the
    build would fetch (a PR's tree is not fetched to check its change)."""
    spec = load_spec("spark", overrides={"vllm": {"pr": 5}})
    job = start(spec, Workspace(tmp_path, context_dir=tmp_path), engine=None, locked=None,
                fetch=False)
    assert job.eff.mode == "compile" and job.sources is None and job.check is None
    assert job.eff.mode_reason.endswith("a Python-only one builds precompiled")
    build = prepare(job)
    assert build.lock is None and build.compile_key is None
    assert build.contexts["vllm-src"].startswith("<prepared vLLM tree: ")
    assert build.stages == ("wheels", "runtime")
    assert not (tmp_path / "src").exists()


def test_the_builder_the_rule_sees():
    """With no engine (inv render) the builder is this machine; spark's only source patch is its
    compile-only setting (kernel_plan.native_patches), so it does not force a compile."""
    from edgevllm.builder.modes import builder_of
    from edgevllm.containers.host import host_arch
    from edgevllm.specs.targets import load_target

    spark = load_target("spark")
    assert "vllm-cmake-keep-121a" in spark.kernel_plan.native_patches
    builder = builder_of(None, spark)
    assert builder.arch == host_arch() and builder.source_patches == ()


def test_a_default_prebuilt_turns_compile_where_this_keys_wheels_exist(
        engine, python_image_native, tmp_path, monkeypatch):
    """Road 1 of the rule, through modes.start with real git and the real engine (base image
    digests): a release under emulation builds prebuilt; wheels of another compile key change
    nothing; wheels under this build's own key make it compile, reusing them (nothing compiles).
    The fixture tree stands in for upstream, so its tag v0.1.0 reads as a release."""
    import dataclasses
    import shutil

    from edgevllm.builder.modes import compile_mode
    from edgevllm.specs.buildspec import Builder, resolve
    from edgevllm.specs.refs import UPSTREAM_REPOS
    from support.gitfixtures import make_upstream_repo

    fixture = Path(__file__).parent / "e2e" / "fixtures" / "fake-vllm"
    upstream = make_upstream_repo(tmp_path / "up", fixture)
    monkeypatch.setitem(UPSTREAM_REPOS, "vllm", upstream.url)
    monkeypatch.setenv("EDGEVLLM_CACHE", str(tmp_path / "cache"))
    spec = load_spec("spark", overrides={
        "vllm": {"repo": upstream.url, "ref": "v0.1.0"}, "mods": [],
        "images": {"build": python_image_native, "runtime": python_image_native},
        "torch": {"version": None}, "apt_packages": [], "python": "python3.11",
        "packages": {"flashinfer-python": None, "nvidia-cutlass-dsl": None},
        # The emulated road's key: the stand-in's closure has no target CUDA runtime, which the
        # cross road (the default on amd64) needs; test_cross_build_e2e.py builds that road.
        "toolchain": "emulated"})
    x86 = Builder(arch="amd64")
    ws = Workspace(tmp_path / "out" / "spark")
    assert start(spec, ws, engine, None, builder=x86).eff.mode == "prebuilt"

    other = ws.wheels("0000000000000000")
    other.mkdir(parents=True)
    (other / "vllm-0.1.0-py3-none-any.whl").write_bytes(b"not this key's")
    job = start(spec, ws, engine, None, builder=x86)
    assert job.eff.mode == "prebuilt" and job.prepared is None

    forced = resolve(spec.model_copy(update={"mode": "compile"}), builder=x86)
    key = compile_mode.prepare(dataclasses.replace(job, eff=forced)).compile_key
    assert key and key != "0000000000000000"
    shutil.copytree(other, ws.wheels(key))
    job = start(spec, ws, engine, None, builder=x86)
    assert job.eff.mode == "compile" and str(ws.wheels(key)) in job.eff.mode_reason
    assert job.prepared is not None and prepare(job) is job.prepared
    assert job.prepared.compile_key == key and job.prepared.eff.mode_reason == job.eff.mode_reason


def test_the_modes_stand_side_by_side_over_the_closure():
    """A mode imports what the modes share (builder/modes/closure.py), never another mode; the
    shared module imports no mode; the registry (``__init__``) alone sees them all."""
    import ast

    folder = Path(__file__).resolve().parents[1] / "edgevllm" / "builder" / "modes"
    names = set(MODES)
    for path in sorted(folder.glob("*.py")):
        if path.stem == "__init__":
            continue
        tree = ast.parse(path.read_text())
        imported = {n.module.rsplit(".", 1)[-1] for n in ast.walk(tree)
                    if isinstance(n, ast.ImportFrom) and n.module
                    and n.module.startswith("edgevllm.builder.modes.")}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                     and n.module == "edgevllm.builder.modes" for a in n.names}
        assert not imported & (names - {path.stem}), f"{path.name} imports another mode"
        assert path.stem == "closure" or path.stem in names, f"{path.name}: a mode in no MODES"
        if path.stem in names:
            assert "closure" in imported, f"{path.name} does not stand on closure.py"
