"""Probe level 1: imports and build facts inside an image, judged against the target.

The judging functions are tested on fact dictionaries; the whole probe runs against fixture
images built from python_image (tests/support/probe_images.py). Those hold a stand-in ``vllm``
whose extensions are real gcc-built shared objects (one needs libcuda.so.1, one an undefined
driver symbol, one segfaults on import) and a stand-in ``torch`` module reporting a CUDA
version and arch list: a CUDA torch needs a GPU driver to be of use and is gigabytes, and no GPU
is here. The real end-to-end images are probed by the build tests (tests/e2e).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from edgevllm.probe import ProbeResult, ProbeTarget, probe_level1, probe_target
from edgevllm.probe.level1 import (
    arch_coverage,
    classify_load_error,
    judge_env,
    judge_first_start,
    judge_mods,
    mod_records,
    recorded_first_start,
)
from support.checks import check_of, present

FIXTURE_ENV = {"EDGEVLLM_PROBE_FIXTURE": "expected"}


def spark(**overrides) -> ProbeTarget:
    fields: dict[str, Any] = dict(name="spark", cuda_arch="12.1a", device_name="NVIDIA GB10",
                  runtime_env=dict(FIXTURE_ENV), required_imports=["vllm", "torch"])
    fields.update(overrides)
    return ProbeTarget(**fields)


# -- judging, on facts ---------------------------------------------------------------------------
@pytest.mark.parametrize("target, arches, expected", [
    ("12.1a", ["sm_90", "sm_121a"], ("native", ["sm_121a"])),
    ("12.1a", ["sm_90", "sm_120f"], ("compatible", ["sm_120f"])),
    ("12.1a", ["sm_120", "sm_121"], ("native", ["sm_121"])),  # any SASS for exactly 12.1 is native
    ("12.1a", ["sm_120a"], ("none", [])),               # sm_120a SASS does not run on GB10
    ("12.1a", ["sm_100", "compute_120"], ("ptx", ["compute_120"])),
    ("12.1a", ["compute_120a"], ("none", [])),          # compute_XYa only JITs for X.Y
    ("11.0a", ["sm_80", "sm_90", "sm_120", "sm_121a"], ("none", [])),
    ("11.0a", ["sm_100", "sm_110"], ("native", ["sm_110"])),
    ("11.0a", ["sm_110a", "sm_110f"], ("native", ["sm_110a", "sm_110f"])),
    ("11.0a", ["compute_90"], ("ptx", ["compute_90"])),
    ("11.0a", [], ("none", [])),
])
def test_arch_coverage_follows_the_compatibility_rules(target, arches, expected):
    assert arch_coverage(target, arches) == expected


def test_load_errors_are_classified():
    no_driver = "ImportError: libcuda.so.1: cannot open shared object file: No such file"
    assert classify_load_error(no_driver, None)[0] == "warn"
    symbol = "ImportError: /x/_C.abi3.so: undefined symbol: cuPointerGetAttribute"
    status, message, remedy = classify_load_error(symbol, None)
    assert remedy is not None
    assert status == "fail" and "cuPointerGetAttribute" in message and "LD_PRELOAD" in remedy
    preloaded = "/usr/lib/aarch64-linux-gnu/nvidia/libcuda.so.1"
    assert classify_load_error(symbol, preloaded)[0] == "warn"
    assert classify_load_error("ImportError: bad ELF header", None)[0] == "fail"


@pytest.mark.parametrize("record", [
    {"mods": [{"name": "a", "outcome": "applied"}, {"name": "b", "outcome": "failed"}]},
    [{"name": "a", "outcome": "applied"}, {"name": "b", "status": "FAILED"}],
    {"a": "applied", "b": "failed"},
    {"a": {"outcome": "applied"}, "b": {"outcome": "failed"}},
])
def test_mods_record_shapes(record):
    assert mod_records(record) == [("a", "applied"), ("b", "failed")]


def facts_with(record: object = None, exists: bool = True) -> dict:
    return {"mods_record": {"exists": exists, "valid": True, "data": record}}


def test_mods_judgement():
    ok = ProbeResult("img", "spark", 1)
    judge_mods(ok, facts_with({"mods": [{"name": "a", "outcome": "already_applied"},
                                        {"name": "b", "outcome": "not-applicable"}]}),
               {"io.edgevllm.mods-selected": "a,b"})
    assert check_of(ok, "mods-record").status == "pass"
    unknown = ProbeResult("img", "spark", 1)
    judge_mods(unknown, facts_with([{"name": "a", "outcome": "skipped"}]), {})
    assert check_of(unknown, "mods-record").status == "fail"
    assert "a=skipped" in unknown.checks[0].message
    none_selected = ProbeResult("img", "spark", 1)
    judge_mods(none_selected, facts_with(exists=False), {"io.edgevllm.mods-selected": ""})
    assert check_of(none_selected, "mods-record").status == "pass"
    missing = ProbeResult("img", "spark", 1)
    judge_mods(missing, facts_with(exists=False), {"io.edgevllm.mods-selected": "a"})
    assert check_of(missing, "mods-record").status == "fail"
    unlabelled = ProbeResult("img", "spark", 1)
    judge_mods(unlabelled, facts_with(exists=False), {})
    assert check_of(unlabelled, "mods-record").status == "fail"


def test_env_judgement_names_each_problem():
    result = ProbeResult("img", "thor", 1)
    judge_env(result, {"env": {"A": "1", "B": "x"}}, {"A": "1", "B": "y", "C": "z"})
    check = check_of(result, "runtime-env")
    assert check.status == "fail"
    assert "B='x' (want 'y')" in check.message and "C unset" in check.message


def test_probe_target_from_mapping_object_and_name():
    data = {"name": "t", "cuda_arch": "11.0a", "runtime_env": {"X": 1},
            "probe": {"required_imports": ["vllm"], "level2_model": "m", "serve_args": ["--a"]}}
    target = probe_target(data)
    assert (target.cuda_arch, target.runtime_env, target.required_imports) == \
        ("11.0a", {"X": "1"}, ["vllm"])
    assert (target.level2_model, target.serve_args) == ("m", ["--a"])
    thor = probe_target("thor")  # the repository's targets/thor.yaml
    assert thor.cuda_arch == "11.0a" and thor.device_name == "NVIDIA Thor"
    assert "vllm" in thor.required_imports


def test_result_json_and_summary(tmp_path):
    result = ProbeResult("img", "spark", 1)
    result.add("import:vllm", "pass", "vllm 1")
    result.add("lock", "warn", "no lock", "build with inv build")
    assert result.passed and result.summary() == "level1 pass (1 ok, 1 warn)"
    result.add("torch-arch", "fail", "no 12.1a", "rebuild")
    assert not result.passed and result.summary() == "level1 fail: torch-arch"
    path = result.write_json(tmp_path / "out" / "probe.json")
    data = json.loads(path.read_text())
    assert data["passed"] is False and data["checks"][2]["remedy"] == "rebuild"
    assert [p.name for p in path.parent.iterdir()] == ["probe.json"]  # no temporary left
    assert "remedy: rebuild" in result.render()


def test_first_start_from_the_verify_record_and_the_image_facts():
    record = {"ptx_units": 83, "ptx_bytes": 716_200_000, "flashinfer": "jit", "caches": []}
    label = {"io.edgevllm.verify": json.dumps({"passed": True, "first_start": record})}
    assert recorded_first_start(label) == record
    assert recorded_first_start({"io.edgevllm.verify": "not json"}) is None
    assert recorded_first_start({}) is None
    facts: dict[str, Any] = {"flashinfer_kernels": {"packages": {"flashinfer-python": "0.7.2",
                                                 "flashinfer-cubin": None},
                                    "jit_cache_modules": 3},
             "env": {"CUDA_CACHE_PATH": "/root/.nv/ComputeCache"}}
    result = ProbeResult(image="img", target="spark", level=1)
    judge_first_start(result, facts, record)
    check = check_of(result, "first-start")
    assert check.status == "pass"
    assert check.message == ("83 PTX-only units (716.2 MB PTX) for the driver's JIT; FlashInfer "
                             "jit (no prebuilt packages; 3 modules already in its JIT cache); "
                             "cache env: CUDA_CACHE_PATH=/root/.nv/ComputeCache")
    result = ProbeResult(image="img", target="spark", level=1)
    facts["flashinfer_kernels"]["packages"]["flashinfer-cubin"] = "0.7.2"
    judge_first_start(result, {**facts, "env": {}}, None)
    message = check_of(result, "first-start").message
    assert message.startswith("PTX-only units not measured (no verify record")
    assert "FlashInfer not judged (flashinfer-cubin 0.7.2;" in message
    assert "cache env: none set in the image" in message


def test_in_image_flashinfer_facts_read_packages_and_the_jit_cache(tmp_path, monkeypatch):
    """The in-image script's own function, run here on a made-up site and cache folder."""
    import importlib.util
    import sys

    from edgevllm.probe import level1

    spec = importlib.util.spec_from_file_location("inimage_check", level1.__file__.replace(
        "level1.py", "inimage_check.py"))
    assert spec is not None and spec.loader is not None
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    site = tmp_path / "site"
    (site / "flashinfer_cubin-0.7.2.dist-info").mkdir(parents=True)
    (site / "flashinfer_cubin-0.7.2.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: flashinfer-cubin\nVersion: 0.7.2\n")
    module = tmp_path / "base" / ".cache" / "flashinfer" / "0.7.2" / "121a" / "cached_ops" / "norm"
    module.mkdir(parents=True)
    (module / "norm.so").write_bytes(b"\x7fELF")
    (module / "build.ninja").write_text("")
    monkeypatch.setattr(sys, "path", [str(site), *sys.path])
    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", str(tmp_path / "base"))
    facts = check.flashinfer_kernel_facts()
    assert facts["packages"]["flashinfer-cubin"] == "0.7.2"
    assert facts["packages"]["flashinfer-jit-cache"] is None
    assert facts["jit_cache_modules"] == 1
    assert facts["aot_modules"] == []
    aot = site / "flashinfer" / "data" / "aot" / "sampling"  # what inv build --aot fills
    aot.mkdir(parents=True)
    (site / "flashinfer" / "__init__.py").write_text("")
    (aot / "sampling.so").write_bytes(b"\x7fELF")
    (aot.parent / "half-written").mkdir()
    assert check.flashinfer_kernel_facts()["aot_modules"] == ["sampling"]


# -- the whole probe, against fixture images -----------------------------------------------------
@pytest.fixture(scope="module")
def images(engine):
    from support.probe_images import level1_image

    built = {variant: level1_image(engine, variant) for variant in ("good", "bad")}
    yield built
    for tag in built.values():
        engine.remove_image(tag, force=True)


def leftover_containers(engine) -> list:
    return [c for c in engine.containers(label="io.edgevllm.probe")
            if c.get("Image", "").startswith("edgevllm-test-probe-")]


@pytest.mark.e2e
def test_good_image_passes(engine, images):
    result = probe_level1(engine, images["good"], spark())
    statuses = {c.id: c.status for c in result.checks}
    assert result.passed, result.render()
    assert statuses["import:vllm"] == statuses["import:torch"] == "pass"
    assert statuses["import:flashinfer"] == statuses["import:cutlass"] == "absent"
    assert statuses["vllm-ext:_C_stable_libtorch.abi3.so"] == "pass"
    assert statuses["vllm-ext:vllm_flash_attn/_vllm_fa2_C.abi3.so"] == "pass"
    assert statuses["vllm-ext:cumem_allocator.abi3.so"] == "warn"  # needs libcuda: off-device
    assert statuses["torch-arch"] == "pass" and "sm_121a" in check_of(result, "torch-arch").message
    for check_id in ("torch-cuda", "mods-record", "runtime-env", "lock"):
        assert statuses[check_id] == "pass", check_id
    assert check_of(result, "import:vllm").detail["version"] == "0.33.0+standin"
    assert result.facts["image_id"].startswith("sha256:")
    first = check_of(result, "first-start")  # no verify label, no FlashInfer in the fixture
    assert first.status == "pass" and first.message.startswith("PTX-only units not measured")
    assert leftover_containers(engine) == []


@pytest.mark.e2e
def test_good_image_fails_for_the_wrong_target_arch_env_and_required_components(engine, images):
    thor = spark(name="thor", cuda_arch="11.0a", runtime_env={"EDGEVLLM_PROBE_FIXTURE": "other"},
                 required_imports=["vllm", "torch"])
    result = probe_level1(engine, images["good"], thor, required=["vllm", "flashinfer"])
    failed = {c.id for c in result.by_status("fail")}
    assert failed == {"import:flashinfer", "torch-arch", "runtime-env"}, result.render()
    assert "11.0a" in check_of(result, "torch-arch").message
    assert "want 'other'" in check_of(result, "runtime-env").message


@pytest.mark.e2e
def test_bad_image_fails_with_each_reason(engine, images):
    result = probe_level1(engine, images["bad"], spark())
    statuses = {c.id: c.status for c in result.checks}
    assert not result.passed
    assert statuses["vllm-ext:_C.abi3.so"] == "pass"
    assert "SIGSEGV" in check_of(result, "vllm-ext:_crash_C.abi3.so").message
    assert statuses["vllm-ext:_crash_C.abi3.so"] == "fail"
    # the crash of one extension does not hide the next one
    moe = check_of(result, "vllm-ext:_moe_C.abi3.so")
    assert moe.status == "fail" and "cuPointerGetAttribute" in moe.message
    assert statuses["torch-cuda"] == "fail" and "CPU-only" in check_of(result, "torch-cuda").message
    mods = check_of(result, "mods-record")
    assert mods.status == "fail"
    assert "cutlass-dsl-arch=failed" in mods.message
    assert "fastsafetensors=not-recorded" in mods.message
    assert statuses["lock"] == "warn"
    assert result.summary().startswith("level1 fail: ")
    assert leftover_containers(engine) == []


@pytest.mark.e2e
def test_image_without_the_interpreter_is_a_probe_error(engine, images):
    from edgevllm.common.errors import ProbeError

    with pytest.raises(ProbeError, match="needs /nonexistent/python3 on its PATH"):
        probe_level1(engine, images["good"], spark(), python="/nonexistent/python3")
    assert leftover_containers(engine) == []


@pytest.mark.e2e
def test_missing_image_is_an_engine_error(engine):
    from edgevllm.common.errors import ImageNotFoundError

    with pytest.raises(ImageNotFoundError):
        probe_level1(engine, "edgevllm-test-probe-l1:does-not-exist", spark())


# -- through the command line --------------------------------------------------------------------
@pytest.mark.e2e
def test_cli_failure_still_writes_the_json_and_exits_9(engine, images, tmp_path):
    from support.probe_images import probe_cli

    out = tmp_path / "probe.json"
    # targets/spark.yaml wants TORCH_CUDA_ARCH_LIST etc. in the env: the fixture lacks them
    proc = probe_cli("--image", images["good"], "--target", "spark", "--require", "vllm,torch",
                     "--json", str(out))
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 9, stderr
    data = json.loads(out.read_text())
    assert data["passed"] is False and data["level"] == 1
    assert [c["id"] for c in data["checks"] if c["status"] == "fail"] == ["runtime-env"]
    assert "TORCH_CUDA_ARCH_LIST unset" in stdout and "FAILED: level1 fail: runtime-env" in stdout
    assert stderr.strip().splitlines()[-1].startswith("error: probe of ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["probe.json"]


@pytest.mark.e2e
@pytest.mark.parametrize("args, code, message", [
    (["--image", "edgevllm-test-probe-l1:nope", "--target", "thor"], 4, "not found"),
    (["--image", "x", "--target", "no-such-target"], 2, "unknown target 'no-such-target'"),
    (["--image", "x", "--target", "thor", "--level", "3"], 2,
     "--level 3: expected a whole number from 1 to 2"),
    (["--image", "x", "--target", "thor", "--level", "2", "--env", "NOEQUALS"], 2, "KEY=VALUE"),
])
def test_cli_bad_input_is_one_line(engine, args, code, message):
    from support.probe_images import probe_cli

    proc = probe_cli(*args)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code, stderr
    assert message in stderr and "Traceback" not in stderr
    assert len(stderr.strip().splitlines()) == 1


def test_torch_cuda_major_must_match_the_target():
    from edgevllm.probe.level1 import judge_torch

    facts = {"torch": {"version": "2.14.0+cu128", "cuda": "12.8", "arch_list": ["sm_121a"]}}
    wrong = ProbeResult("img", "spark", 1)
    judge_torch(wrong, facts, spark(cuda_version="13.0.2"))
    check = check_of(wrong, "torch-cuda")
    assert check.remedy is not None
    assert check.status == "fail" and "CUDA 12.8" in check.message and "cu130" in check.remedy
    assert wrong.get("torch-arch") is None
    right = ProbeResult("img", "spark", 1)
    judge_torch(right, {"torch": dict(facts["torch"], cuda="13.0")}, spark(cuda_version="13.0.2"))
    assert check_of(right, "torch-cuda").status == check_of(right, "torch-arch").status == "pass"
    assert present(probe_target("spark").cuda_version).startswith("13.")
