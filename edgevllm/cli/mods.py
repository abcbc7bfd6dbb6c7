"""``inv mods``, ``inv mods-apply``, ``inv tune-moe``: list, apply and tune mods."""

from __future__ import annotations

import json as jsonlib
from pathlib import Path

from edgevllm.cli._common import cli_task
from edgevllm.common import console
from edgevllm.common.errors import ConfigError, ModFailedError
from edgevllm.common.grammar import flag_int
from edgevllm.common.kv import split_csv
from edgevllm.specs.outcomes import NOT_APPLICABLE


@cli_task(
    help={
        "target": "only mods for this target (thor, spark)",
        "json": "print the list as JSON",
    }
)
def mods(c, target=None, json=False):
    """List the mods: name, targets, the package versions each applies to, description."""
    from edgevllm.mods.catalog import format_rows, list_rows
    from edgevllm.specs.targets import load_target

    if target:
        load_target(target)  # an unknown target is an error, not an empty list
    rows = list_rows(target)
    print(jsonlib.dumps(rows, indent=2) if json else format_rows(rows))


@cli_task(
    help={
        "target": "target name (thor, spark): its default mods, unless --mod is given",
        "site_packages": "apply to the distributions in this folder (repeatable)",
        "python": "apply with this interpreter (its own site-packages unless --site-packages)",
        "mod": "apply only this mod (repeatable, or comma-separated)",
        "json": "write the outcome record here (and runtime env vars to the same name .env)",
        "pip_find_links": "extra folder/URL of wheels for install steps (repeatable)",
        "pip_no_index": "install steps use only --pip-find-links (hermetic)",
    },
    iterable=["site_packages", "mod", "pip_find_links"],
)
def mods_apply(
    c,
    target,
    site_packages=None,
    python=None,
    mod=None,
    json=None,
    pip_find_links=None,
    pip_no_index=False,
):
    """Apply mods to an existing Python environment (e.g. a stock image) and print the outcomes."""
    from edgevllm.mods.catalog import apply_to_environment

    if not site_packages and not python:
        raise ConfigError("give --site-packages DIR or --python PATH (the environment to patch)")
    for folder in site_packages or []:  # a typo would get a new environment installed into it
        if not Path(folder).is_dir():
            raise ConfigError(f"--site-packages {folder}: no such folder; give the site-packages "
                              "folder of the environment to patch")
    try:
        record, table = apply_to_environment(
            target,
            split_csv(mod),
            [Path(p) for p in site_packages or []],
            python,
            Path(json) if json else None,
            pip_find_links or [],
            pip_no_index,
        )
    except ModFailedError as exc:
        print(exc.table, end="")
        raise
    print(table, end="")
    env = {
        k: v
        for m in record["mods"]
        if m["outcome"] != NOT_APPLICABLE
        for k, v in m.get("env", {}).items()
    }
    if env:
        console.info("set at run time: " + " ".join(f"{k}={v}" for k, v in sorted(env.items())))


@cli_task(
    help={
        "image": "a built image (run on the target device, with the NVIDIA runtime)",
        "target": "target name: its device name goes into the config file name",
        "model": "model whose MoE shape to tune (HF id or path visible in the container)",
        "script": "host path of vLLM's benchmarks/kernels/benchmark_moe.py (same vLLM version)",
        "experts": "expected expert count E (the stored file must have it)",
        "intermediate": "expected intermediate size N (the stored file must have it)",
        "dtype": "benchmark_moe.py --dtype (auto, fp8_w8a8, int8_w8a16)",
        "tp_size": "tensor-parallel size the model is served with",
        "batch_size": "only these batch sizes (repeatable)",
        "trust_remote_code": "pass --trust-remote-code to the tuner",
        "dry_run": "print the docker command and exit",
    },
    iterable=["batch_size"],
)
def tune_moe(
    c,
    image,
    target,
    model,
    script=None,
    experts=None,
    intermediate=None,
    dtype="auto",
    tp_size="1",
    batch_size=None,
    trust_remote_code=False,
    dry_run=False,
):
    """Tune the fused-MoE kernel in an image on the device; store the JSON in the config mod."""
    from edgevllm.containers.docker import DockerEngine
    from edgevllm.mods.catalog import get_mod
    from edgevllm.mods.tunemoe import (
        MOE_MOD,
        TuneRequest,
        run_options,
        scratch_dir,
        tune,
    )
    from edgevllm.specs.targets import load_target

    device = load_target(target).device_name
    configs = get_mod(MOE_MOD).folder / "configs"
    with scratch_dir() as out:
        req = TuneRequest(
            image=image,
            model=model,
            script=Path(script or "benchmark_moe.py"),
            out_dir=Path(out),
            tp_size=flag_int(tp_size, "--tp-size", 1, 64),
            dtype=dtype,
            batch_sizes=tuple(flag_int(b, "--batch-size", 1, 1 << 20)
                              for b in split_csv(batch_size)),
            trust_remote_code=trust_remote_code,
        )
        engine = DockerEngine()
        if dry_run:
            print(engine.command_line(run_options(req).argv()))
            return
        stored = tune(
            req,
            engine,
            configs,
            device,
            flag_int(experts, "--experts", 1, 1 << 20) if experts else None,
            flag_int(intermediate, "--intermediate", 1, 1 << 30) if intermediate else None,
        )
    for path in stored:
        console.info(
            f"stored {path} (set 'tuned: true' in the manifest once all files are measured)"
        )
