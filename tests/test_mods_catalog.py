"""Mods on the host: manifests, listing, selection, conflicts, staging (the build contract), the
CLI's bad-input lines, the data mods (MoE configs, Thor run-time env) and tune-moe.

tune-moe needs a GPU on the device: here the docker command is only built (--dry-run) and the
result-ingestion path is fed a stand-in tuner output file, as the docstrings below say.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from edgevllm.common.errors import (
    ManifestError,
    ModConflictError,
    ModNotForTargetError,
    UnknownModError,
)
from edgevllm.common.paths import project_root
from edgevllm.mods import catalog as M
from edgevllm.specs.buildspec import load_spec, resolve
from edgevllm.specs.modselect import select_mod_names
from edgevllm.specs.targets import load_target
from support.modenv import outcome, stage_and_apply


def shipped_mods() -> list[str]:
    """Every mod folder in the repository: the data, not a list kept by hand."""
    return sorted(p.parent.name for p in (project_root() / "mods").glob("*/manifest.yaml"))


def mods_for(target: str) -> list[str]:
    return sorted(
        name
        for name in shipped_mods()
        if target
        in yaml.safe_load((project_root() / "mods" / name / "manifest.yaml").read_text())["targets"]
    )


ALL = shipped_mods()


@pytest.fixture(autouse=True)
def no_user_mods(tmp_path, monkeypatch):
    """The catalog also lists the user's own mods ($XDG_CONFIG_HOME/edgevllm/mods), which other
    tests of the session fill (eugr imports): each test here starts from an empty one."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
THOR = list(load_target("thor").default_mods)
SPARK = list(load_target("spark").default_mods)


def inv(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args],
        capture_output=True,
        text=True,
        cwd=project_root(),
        env=dict(os.environ, NO_COLOR="1", **(env or {})),
    )


def write_mod(root: Path, name: str, text: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "manifest.yaml").write_text(text)
    return folder


def test_every_shipped_mod_loads_and_lists():
    assert sorted(m.name for m in M.all_mods()) == ALL
    rows = {r["name"]: r for r in M.list_rows()}
    assert rows["cutlass-dsl-gb10"]["applies_to"] == {"nvidia-cutlass-dsl": ">=4.4,<4.6"}
    assert rows["fused-moe-configs"]["tuned"] is False
    assert [r["name"] for r in M.list_rows("thor")] == mods_for("thor")


def test_target_defaults_select_and_stage_cleanly(tmp_path):
    for target, names in (("thor", THOR), ("spark", SPARK)):
        staged = M.stage_mods(names, target, tmp_path / target)
        assert staged.names == names


def test_staging_again_replaces_its_copy_and_keeps_a_users_folder(tmp_path):
    """The build context under ``--out`` is staged again on every build: a mod's folder it
    wrote is replaced; one it has no record of (the user's) is moved aside, not deleted."""
    dest = tmp_path / "ctx"
    (dest / SPARK[0]).mkdir(parents=True)
    (dest / SPARK[0] / "mine.txt").write_text("mine")
    M.stage_mods(SPARK, "spark", dest)
    M.stage_mods(SPARK, "spark", dest)
    kept = [p for p in dest.iterdir() if p.name.startswith(f"{SPARK[0]}.kept-")]
    assert len(kept) == 1 and (kept[0] / "mine.txt").read_text() == "mine"
    assert not (dest / SPARK[0] / "mine.txt").exists() and (dest / SPARK[0]).is_dir()


def test_stage_contract(tmp_path):
    dest = tmp_path / "ctx"
    staged = M.stage_mods(SPARK, "spark", dest)
    assert (dest / "inimage_applier.py").read_bytes() == (
        project_root() / "edgevllm" / "mods" / "inimage_applier.py"
    ).read_bytes()
    plan = json.loads((dest / "plan.json").read_text())
    assert plan["target"] == "spark" and [m["name"] for m in plan["mods"]] == SPARK
    files = next(s for m in plan["mods"] for s in m["steps"] if s["kind"] == "files")
    assert files["source"] == "fused-moe-configs/configs" and (dest / files["source"]).is_dir()
    assert staged.env == {
        "CUTE_DSL_ARCH": "sm_121a",
        "FASTSAFETENSORS_UNIFIED_MEM": "1",
        "TRITON_PTXAS_PATH": "/usr/local/cuda/bin/ptxas",
        "VLLM_TUNED_CONFIG_FOLDER": "/opt/edgevllm/moe-configs",
    }
    assert [v["name"] for v in staged.versions] == SPARK
    assert all(
        set(v) == {"name", "version"} and v["version"].startswith("1+") for v in staged.versions
    )
    assert "fastsafetensors==0.5.0" in staged.pip_packages


def test_lock_version_changes_with_data(tmp_path, monkeypatch):
    root = tmp_path / "extra"
    folder = write_mod(
        root,
        "mine",
        "name: mine\nversion: '2'\ndescription: d\ntargets: [thor]\n"
        "steps: [{kind: env, vars: {A: '1'}}]\n",
    )
    monkeypatch.setenv("EDGEVLLM_MODS_PATH", str(root))
    first = M.get_mod("mine").lock_version()
    (folder / "data.txt").write_text("x")
    assert M.get_mod("mine").lock_version() != first and first.startswith("2+")


def test_unknown_mod_and_wrong_target():
    with pytest.raises(UnknownModError, match=r"^unknown mod 'nope' \(known: cutlass-dsl-gb10, "):
        M.select_mods(["nope"], "spark")
    with pytest.raises(
        ModNotForTargetError,
        match=r"^mod cutlass-dsl-thor does not support "
        r"target 'spark'",
    ):
        M.select_mods(["cutlass-dsl-thor"], "spark")


def test_the_one_selection_rule():
    assert select_mod_names(THOR, None, ["cutlass-dsl-thor"], ["fastsafetensors"]) == [
        m for m in THOR if m != "fastsafetensors"
    ]
    assert select_mod_names(THOR, ["fastsafetensors"], [], []) == ["fastsafetensors"]
    for only, add, remove in ((None, [], ["nope"]), (["nope"], [], []), (None, ["nope"], [])):
        with pytest.raises(UnknownModError, match="unknown mod 'nope'"):
            select_mod_names(THOR, only, add, remove)
    with pytest.raises(
        UnknownModError,
        match=r"unknown mod 'fastsafetensor' \(did you mean "
        r"'fastsafetensors'\?\)",
    ):
        select_mod_names(THOR, None, [], ["fastsafetensor"])


def test_build_spec_and_mods_stage_share_the_rule(cli):
    """``inv build --no-mod nope`` used to be accepted silently: the spec now uses the rule."""
    with pytest.raises(UnknownModError, match="unknown mod 'nope'"):
        resolve(load_spec("thor", overrides={"remove_mods": ["nope"]}))
    code, _, err = cli("render", "--target", "thor", "--no-mod", "nope", "--out", "/nonexistent")
    assert code == 2 and "unknown mod 'nope'" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "body,field",
    [
        ("targets: [thor]\nsteps: [{kind: env, vars: {A: '1'}, bogus: 1}]\n", "steps.0.env.bogus"),
        (
            "targets: [thor]\napplies_to: {torch: 'latest'}\nsteps: [{kind: env, vars: {A: "
            "'1'}}]\n",
            "applies_to",
        ),
        ("targets: []\nsteps: [{kind: env, vars: {A: '1'}}]\n", "targets"),
        ("targets: [thor]\nsteps: [{kind: edit, packages: [x], path: p}]\n", "steps.0.edit"),
        ("targets: [thor]\nsteps: [{kind: teleport}]\n", "steps.0"),
    ],
)
def test_malformed_manifest_is_one_line_naming_file_and_field(tmp_path, monkeypatch, body, field):
    root = tmp_path / "extra"
    write_mod(root, "bad", "name: bad\nversion: '1'\ndescription: d\n" + body)
    monkeypatch.setenv("EDGEVLLM_MODS_PATH", str(root))
    with pytest.raises(ManifestError) as info:
        M.get_mod("bad")
    message = str(info.value)
    assert message.startswith(f"{root / 'bad' / 'manifest.yaml'}: ")
    assert f"field '{field}" in message
    assert "\n" not in message


GB10_DUP = """name: dup-gb10
version: '1'
description: a second mod editing the GB10 gate
targets: [spark]
steps:
  - kind: edit
    packages: [nvidia-cutlass-dsl-libs-cu13]
    path: cutlass/cute/nvgpu/warp/mma.py
    replacements:
      - in_class: MmaSM120BlockScaledOp
        anchor: "        if not arch == Arch.sm_120a:\\n"
        replacement: "        if False:\\n"
"""


def test_two_mods_editing_the_same_anchor_conflict(tmp_path, monkeypatch):
    root = tmp_path / "extra"
    write_mod(root, "dup-gb10", GB10_DUP)
    monkeypatch.setenv("EDGEVLLM_MODS_PATH", str(root))
    with pytest.raises(
        ModConflictError,
        match=r"^mod dup-gb10 edits the same anchor as mod "
        r"cutlass-dsl-gb10 in cutlass/cute/nvgpu/warp/",
    ):
        M.select_mods(["cutlass-dsl-gb10", "dup-gb10"], "spark")


def test_cli_bad_input_is_one_line_with_exit_code(tmp_path):
    root = tmp_path / "extra"
    write_mod(root, "dup-gb10", GB10_DUP)
    env = {"EDGEVLLM_MODS_PATH": str(root)}
    cases = [
        (
            ["mods-apply", "--target", "spark", "--site-packages", str(tmp_path), "--mod", "nope"],
            "error: unknown mod 'nope'",
            2,
        ),
        (
            [
                "mods-apply",
                "--target",
                "spark",
                "--site-packages",
                str(tmp_path),
                "--mod",
                "cutlass-dsl-gb10,dup-gb10",
            ],
            "error: mod dup-gb10 edits the same anchor as mod cutlass-dsl-gb10",
            2,
        ),
    ]
    for args, start, code in cases:
        proc = inv(*args, env=env)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == code and len(lines) == 1 and lines[0].startswith(start), (
            proc.stderr
        )
    broken = tmp_path / "broken-root"
    write_mod(
        broken,
        "broken",
        "name: broken\nversion: '1'\ndescription: d\ntargets: [thor]\n"
        "steps: [{kind: env, vars: {A: '1'}}]\nextra_field: 1\n",
    )
    proc = inv("mods", env={"EDGEVLLM_MODS_PATH": str(broken)})
    assert proc.returncode == 2
    assert (
        proc.stderr.strip() == f"error: {broken / 'broken' / 'manifest.yaml'}: "
        "unknown field 'extra_field' (known: applies_to, description, name, steps, targets, tuned, "
        "version)"
    )


def test_inv_mods_lists_ranges_and_targets():
    proc = inv("mods")
    assert proc.returncode == 0
    line = next(x for x in proc.stdout.splitlines() if x.startswith("flashinfer-sm121"))
    assert "spark" in line and "flashinfer-python >=0.6.9,<0.6.12" in line
    rows = json.loads(inv("mods", "--json", "--target", "thor").stdout)
    assert sorted(r["name"] for r in rows) == mods_for("thor")


def test_mods_apply_cli_on_an_environment(tmp_path):
    """inv mods-apply with --python and --site-packages: an env-only mod with a real verification
    (the CUDA toolkit's ptxas must assemble sm_110a; nvcc/ptxas from /usr/local/cuda)."""
    if not Path("/usr/local/cuda/bin/ptxas").is_file():
        pytest.fail("/usr/local/cuda/bin/ptxas is missing: install the CUDA 13 toolkit")
    site = tmp_path / "site"
    site.mkdir()
    record = tmp_path / "rec" / "mods.json"
    apply = ["mods-apply", "--target", "thor", "--python", sys.executable, "--site-packages",
             str(site), "--mod", "thor-runtime", "--json", str(record)]
    proc = inv(*apply)
    assert proc.returncode == 0, proc.stderr
    assert "thor-runtime  applied" in proc.stdout
    data = json.loads(record.read_text())
    mod = outcome(data, "thor-runtime")
    assert mod["steps"][1]["detail"] == "/usr/local/cuda/bin/ptxas assembles sm_110a"
    assert "VLLM_USE_FLASHINFER_MOE_FP4=0" in record.with_suffix(".env").read_text()
    assert "set at run time: LD_PRELOAD=" in proc.stderr
    again = inv(*apply)  # the same line again
    assert "thor-runtime  already-applied" in again.stdout
    # without --json there is no env file: an env-only mod has nothing to write
    spark = inv(
        "mods-apply", "--target", "spark", "--site-packages", str(site), "--mod", "spark-runtime"
    )
    assert spark.returncode == 0 and "spark-runtime  already-applied" in spark.stdout
    spark = inv(
        "mods-apply",
        "--target",
        "spark",
        "--site-packages",
        str(site),
        "--mod",
        "spark-runtime",
        "--json",
        str(tmp_path / "spark.json"),
    )
    mod = outcome(json.loads((tmp_path / "spark.json").read_text()), "spark-runtime")
    assert mod["outcome"] == "applied"
    assert mod["steps"][1]["detail"] == "/usr/local/cuda/bin/ptxas assembles sm_121a"


def test_fused_moe_configs_installed_and_verified(tmp_path):
    """The real config data and verification; the destination is moved under tmp_path."""
    from edgevllm.mods.catalog import stage_mods

    stage = tmp_path / "stage"
    stage_mods(["fused-moe-configs"], "thor", stage)
    plan = json.loads((stage / "plan.json").read_text())
    dest = tmp_path / "moe-configs"
    for step in plan["mods"][0]["steps"]:
        if step["kind"] == "files":
            step["dest"] = str(dest)
        if step["kind"] == "env":
            step["vars"]["VLLM_TUNED_CONFIG_FOLDER"] = str(dest)
    (stage / "plan.json").write_text(json.dumps(plan))
    site = tmp_path / "site"
    site.mkdir()
    rc, record, _, _ = stage_and_apply([], "thor", site, tmp_path)
    assert record is not None
    mod = outcome(record, "fused-moe-configs")
    assert rc == 0 and mod["outcome"] == "applied"
    assert sorted(p.name for p in dest.iterdir()) == [
        "E=128,N=768,device_name=NVIDIA_Thor.json",
        "E=512,N=2688,device_name=NVIDIA_Thor.json",
    ]
    assert mod["steps"][2]["detail"] == f"2 fused-MoE config(s) in {dest}"
    rc, record, _, _ = stage_and_apply([], "thor", site, tmp_path)
    assert record is not None
    assert outcome(record, "fused-moe-configs")["outcome"] == "already-applied"


def test_tune_moe_dry_run_builds_the_docker_command(tmp_path):
    """No GPU here: only the command is built (--dry-run)."""
    script = tmp_path / "benchmark_moe.py"
    script.write_text("# stand-in path; not run\n")
    proc = inv(
        "tune-moe",
        "--image",
        "edgevllm/vllm:x",
        "--target",
        "thor",
        "--model",
        "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
        "--script",
        str(script),
        "--experts",
        "128",
        "--intermediate",
        "768",
        "--dry-run",
    )
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.strip()
    assert line.startswith(
        "docker run --rm --ipc host --runtime nvidia --gpus all --entrypoint python3 "
    )
    assert f"-v {script}:/edgevllm-tune/benchmark_moe.py:ro" in line
    assert line.endswith(
        "edgevllm/vllm:x /edgevllm-tune/benchmark_moe.py --model "
        "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 --tp-size 1 --dtype auto "
        "--tune --save-dir /edgevllm-tune/out"
    )


def test_tune_moe_ingests_the_result_atomically(tmp_path):
    """The tuner's output is a stand-in file (tuning needs the device's GPU)."""
    from edgevllm.common.errors import ModError
    from edgevllm.mods.tunemoe import ingest

    out, configs = tmp_path / "out", tmp_path / "configs"
    out.mkdir()
    configs.mkdir()
    table = {
        "1": {
            "BLOCK_SIZE_M": 16,
            "BLOCK_SIZE_N": 32,
            "BLOCK_SIZE_K": 64,
            "GROUP_SIZE_M": 1,
            "num_warps": 4,
            "num_stages": 3,
        }
    }
    (out / "E=128,N=768,device_name=NVIDIA_Thor.json").write_text(json.dumps(table))
    stored = ingest(out, configs, "NVIDIA Thor", 128, 768)
    assert [p.name for p in stored] == ["E=128,N=768,device_name=NVIDIA_Thor.json"]
    assert json.loads(stored[0].read_text()) == table
    assert [p.name for p in configs.iterdir()] == [stored[0].name]  # no temporaries left
    with pytest.raises(ModError, match="tuned on NVIDIA_Thor, not NVIDIA_GB10"):
        ingest(out, configs, "NVIDIA GB10")
    with pytest.raises(ModError, match="no E=512,N=2688 config for NVIDIA_Thor"):
        ingest(out, configs, "NVIDIA Thor", 512, 2688)
    (out / "E=128,N=768,device_name=NVIDIA_Thor.json").write_text('{"1": {"BLOCK_SIZE_M": 16}}')
    with pytest.raises(ModError, match="entry '1' is not a batch size with"):
        ingest(out, configs, "NVIDIA Thor")


def test_mods_apply_failed_mod_is_one_line_exit_7(tmp_path):
    """A mod whose anchor is missing in the installed file: the CLI prints the table on stdout,
    one error line on stderr naming mod, package version, file and anchor, and exits 7."""
    root = tmp_path / "extra"
    write_mod(
        root,
        "demo-fix",
        "name: demo-fix\nversion: '1'\ndescription: d\ntargets: [thor]\n"
        "applies_to: {demo-pkg: '>=1'}\nsteps:\n  - kind: edit\n    packages: [demo-pkg]\n"
        "    path: demo_pkg/gate.py\n    replacements:\n"
        '      - {anchor: \'allowed = ["q"]\', replacement: \'allowed = ["q", "r"]\'}\n',
    )
    site = tmp_path / "site"
    (site / "demo_pkg").mkdir(parents=True)
    (site / "demo_pkg" / "gate.py").write_text('allowed = ["a"]\n')
    info = site / "demo_pkg-1.2.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.2.0\n")
    (info / "RECORD").write_text("demo_pkg/gate.py,,\n")
    proc = inv(
        "mods-apply",
        "--target",
        "thor",
        "--site-packages",
        str(site),
        "--mod",
        "demo-fix",
        env={"EDGEVLLM_MODS_PATH": str(root)},
    )
    assert proc.returncode == 7
    assert "demo-fix  failed" in proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0] == (
        f"error: mod demo-fix: demo-pkg 1.2.0: file {site}/demo_pkg/gate.py: "
        "missing anchor: 'allowed = [\"q\"]'"
    )


def test_the_applier_knows_exactly_the_step_kinds_a_manifest_may_use():
    """The in-image applier (stdlib only) and the manifest schema list step kinds separately;
    they must be the same set, or a valid manifest would fail in the image."""
    from typing import get_args

    from edgevllm.mods import inimage_applier as applier
    from edgevllm.mods.manifest import Step

    union = get_args(get_args(Step)[0])
    schema_kinds = {get_args(model.model_fields["kind"].annotation)[0] for model in union}
    assert set(applier.STEP_KINDS) == schema_kinds
