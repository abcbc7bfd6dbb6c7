"""The level-1 check script (``probe/inimage_check.py``) run as the host runs it inside an image
(``python3 -`` with the script on stdin and ``level1.check_arguments``' command line), here in a
real subprocess on a made-up site folder, and its facts judged by ``level1.judge_all``: the
contract between the two sides without a Docker engine.

The site holds plain Python packages that import, are missing, lack a dependency, raise,
segfault or hang, a stand-in ``torch`` (a CUDA torch needs a GPU: the stand-in reports the CUDA
version and arch list a build would) and a stand-in ``vllm`` whose extensions are real
gcc-built shared objects: one loads, one is no ELF file, one segfaults while it loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from edgevllm.common import labels
from edgevllm.probe import ProbeResult, ProbeTarget
from edgevllm.probe.level1 import MARKER, check_arguments, check_script, judge_all
from edgevllm.probe.result import ABSENT, FAIL, PASS, WARN
from support.checks import check_of

SEGFAULT_C = "#include <signal.h>\n__attribute__((constructor)) static void boom(void) " \
             "{ raise(SIGSEGV); }\n"
FINE_C = "int edgevllm_probe_fine(void) { return 1; }\n"
# A real extension module (what Python loads as ``vllm._C``): it defines its PyInit function.
EXTENSION_C = ("#include <Python.h>\nstatic struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "
               "\"_C\", NULL, -1, NULL};\nPyMODINIT_FUNC PyInit__C(void) "
               "{ return PyModule_Create(&def); }\n")


def _package(site: Path, name: str, init: str) -> None:
    (site / name).mkdir(parents=True, exist_ok=True)
    (site / name / "__init__.py").write_text(init)


def _shared_object(source: str, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    c_file = out.with_suffix(".c")
    c_file.write_text(source)
    include = sysconfig.get_paths()["include"]
    proc = subprocess.run(["gcc", "-shared", "-fPIC", f"-I{include}", "-o", str(out),
                           str(c_file)], capture_output=True, text=True)
    c_file.unlink()
    assert proc.returncode == 0, f"gcc is needed (apt-get install gcc): {proc.stderr}"


def run_check(site: Path, argv: list[str], env: dict[str, str] | None = None) -> dict:
    """The script on stdin of a fresh interpreter whose only extra packages are ``site``'s;
    its facts (the marker line), or the test fails with what it printed."""
    clean = {"PATH": os.environ["PATH"], "PYTHONPATH": str(site), "HOME": str(site.parent),
             "PYTHONNOUSERSITE": "1", **(env or {})}
    proc = subprocess.run([sys.executable, "-S", *argv], input=check_script(),
                          capture_output=True, env=clean, timeout=120)
    for line in proc.stdout.decode().splitlines():
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER):])
    raise AssertionError(f"no facts (exit {proc.returncode}): {proc.stderr.decode()[-2000:]}")


def _target(**overrides) -> ProbeTarget:
    fields: dict = dict(name="spark", cuda_arch="12.1a", runtime_env={"EDGEVLLM_X": "1"},
                        required_imports=["vllm", "torch"], cuda_version="13.0.2")
    fields.update(overrides)
    return ProbeTarget(**fields)


@pytest.fixture
def site(tmp_path) -> Path:
    site = tmp_path / "site"
    _package(site, "goodpkg", "__version__ = '1.2.3'\n")
    _package(site, "needsdep", "import edgevllm_no_such_dependency\n")
    _package(site, "raises", "raise RuntimeError('the import fails here')\n")
    _package(site, "crashes", "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    _package(site, "hangs", "import time\ntime.sleep(600)\n")
    return site


def test_each_import_is_reported_as_what_happened_and_the_others_still_run(site):
    facts = run_check(site, ["-", "--import-timeout", "2", *sum(
        (["--component", n] for n in ("goodpkg", "absentpkg", "needsdep", "raises", "crashes",
                                      "hangs", "goodpkg.sub")), [])])
    imports = facts["imports"]
    assert imports["goodpkg"]["ok"] and imports["goodpkg"]["version"] == "1.2.3"
    assert imports["goodpkg"]["file"].endswith("goodpkg/__init__.py")
    assert imports["absentpkg"] == {"ok": False, "missing": True, "error": imports[
        "absentpkg"]["error"]} and "absentpkg" in imports["absentpkg"]["error"]
    # A package that is there but lacks what it imports is broken, not missing.
    assert imports["needsdep"]["missing"] is False
    assert "edgevllm_no_such_dependency" in imports["needsdep"]["error"]
    assert imports["raises"]["error"] == "RuntimeError: the import fails here"
    assert imports["crashes"] == {"ok": False, "missing": False,
                                  "error": "import killed by SIGSEGV"}
    assert imports["hangs"]["error"] == "import timed out after 2s"
    assert imports["goodpkg.sub"]["missing"] is True  # a submodule of a package that is there
    assert facts["python"]["executable"] == sys.executable


def test_only_the_named_environment_reaches_the_facts(site):
    facts = run_check(site, ["-", "--env-key", "EDGEVLLM_X", "--env-key", "UNSET_ONE"],
                      env={"EDGEVLLM_X": "1", "HF_TOKEN": "hf_secret_value"})
    assert facts["env"] == {"EDGEVLLM_X": "1", "UNSET_ONE": None}
    assert "hf_secret_value" not in json.dumps(facts)


def test_the_mods_record_is_kept_and_the_lock_only_named(site, tmp_path):
    record = tmp_path / "mods.json"
    record.write_text(json.dumps({"mods": [{"name": "a", "status": "applied"}]}))
    lock = tmp_path / "lock.json"
    lock.write_text(json.dumps({"vllm": {"commit": "c" * 40}, "torch": "2.14"}))
    facts = run_check(site, ["-", "--mods-record", str(record), "--lock", str(lock)])
    assert facts["mods_record"]["data"] == {"mods": [{"name": "a", "status": "applied"}]}
    assert facts["lock"] == {"path": str(lock), "exists": True, "valid": True,
                             "keys": ["torch", "vllm"]}
    lock.write_text("{not json")
    record.unlink()
    facts = run_check(site, ["-", "--mods-record", str(record), "--lock", str(lock)])
    assert facts["mods_record"] == {"path": str(record), "exists": False}
    assert facts["lock"]["valid"] is False and "JSONDecodeError" in facts["lock"]["error"]


def _stand_in_torch(site: Path, cuda: str | None, arches: str) -> None:
    """A stand-in for a CUDA torch (no GPU here): what a build reports, nothing else."""
    _package(site, "torch", f"__version__ = '2.14.0'\nclass version:\n    cuda = {cuda!r}\n"
             "class _C:\n    @staticmethod\n    def _cuda_getArchFlags():\n"
             f"        return {arches!r}\n"
             "class cuda:\n    @staticmethod\n    def is_available():\n"
             "        raise RuntimeError('no driver')\n"
             "    @staticmethod\n    def get_arch_list():\n        return []\n")


def _judged(facts: dict, target: ProbeTarget, labels: dict | None = None) -> ProbeResult:
    result = ProbeResult("image", target.name, 1)
    judge_all(result, facts, set(target.required_imports), target, labels or {}, None)
    return result


def test_a_torch_and_vllm_as_a_good_build_reports_them_pass(site, tmp_path):
    _stand_in_torch(site, "13.0", "sm_90 sm_100 sm_120")
    _package(site, "vllm", "__version__ = '0.33.0'\n")
    _shared_object(EXTENSION_C, site / "vllm" / "_C.abi3.so")
    _shared_object(FINE_C, site / "vllm" / "libs" / "libhelper.so")
    target = _target()
    facts = run_check(site, check_arguments(target, ["vllm", "torch"], 30),
                      env={"EDGEVLLM_X": "1"})
    assert facts["torch"]["arch_list"] == ["sm_90", "sm_100", "sm_120"]
    assert facts["torch"]["cuda_available"].startswith("error: RuntimeError: no driver")
    assert [(i["path"], i["ok"], i["kind"]) for i in facts["vllm_extensions"]["items"]] == [
        ("_C.abi3.so", True, "extension"), ("libs/libhelper.so", True, "library")]
    result = _judged(facts, target)
    assert check_of(result, "import:vllm").status == PASS
    assert check_of(result, "torch-cuda").status == PASS
    assert check_of(result, "torch-arch").status == PASS  # 12.0 runs on 12.1a: compatible
    assert check_of(result, "vllm-ext:_C.abi3.so").message == "loads (extension)"
    assert check_of(result, "runtime-env").status == PASS
    assert check_of(result, "lock").status == WARN  # no lock at the image's path here


def test_a_vllm_whose_extensions_break_is_judged_per_file_and_loading_goes_on(site):
    _package(site, "vllm", "__version__ = '0.33.0'\n")
    ops = site / "vllm" / "ops"
    _shared_object(SEGFAULT_C, ops / "a_crash.so")
    (ops / "b_text.so").write_text("not an ELF file\n")
    _shared_object(FINE_C, ops / "libc_fine.so")
    (site / "vllm" / "__pycache__").mkdir()
    (site / "vllm" / "__pycache__" / "skipped.so").write_text("never read")
    target = _target(required_imports=["vllm"])
    facts = run_check(site, check_arguments(target, ["vllm"], 30), env={"EDGEVLLM_X": "1"})
    items = {i["path"]: i for i in facts["vllm_extensions"]["items"]}
    assert list(items) == ["ops/a_crash.so", "ops/b_text.so", "ops/libc_fine.so"]
    assert items["ops/a_crash.so"]["error"] == "loading killed by SIGSEGV"
    assert not items["ops/b_text.so"]["ok"] and items["ops/libc_fine.so"]["ok"]
    result = _judged(facts, target)
    assert check_of(result, "vllm-ext:ops/a_crash.so").status == FAIL
    assert check_of(result, "vllm-ext:ops/b_text.so").status == FAIL
    assert check_of(result, "vllm-ext:ops/libc_fine.so").status == PASS
    assert not result.passed


def test_a_vllm_without_kernels_fails_when_required_and_warns_when_not(site):
    _package(site, "vllm", "__version__ = '0.33.0'\n")
    facts = run_check(site, ["-", "--component", "vllm"])
    assert facts["vllm_extensions"]["items"] == []
    assert check_of(_judged(facts, _target(runtime_env={}, required_imports=["vllm"])),
                    "vllm-extensions").status == FAIL
    assert check_of(_judged(facts, _target(runtime_env={}, required_imports=[])),
                    "vllm-extensions").status == WARN


@pytest.mark.parametrize(("cuda", "arches", "check", "status", "said"), [
    (None, "sm_90", "torch-cuda", FAIL, "is a CPU-only build"),
    ("12.8", "sm_120", "torch-cuda", FAIL, "built for CUDA 12.8, the target runs CUDA 13.0.2"),
    ("13.0", "sm_80 sm_90", "torch-arch", FAIL, "does not cover 12.1a: sm_80 sm_90"),
    ("13.0", "compute_120", "torch-arch", WARN, "only PTX for 12.1a"),
], ids=["cpu", "cuda-12", "no-arch", "ptx"])
def test_a_torch_built_wrong_for_the_target_is_said(site, cuda, arches, check, status, said):
    _stand_in_torch(site, cuda, arches)
    target = _target(runtime_env={}, required_imports=["torch"])
    facts = run_check(site, check_arguments(target, ["torch"], 30))
    found = check_of(_judged(facts, target), check)
    assert found.status == status and said in found.message, found


def test_a_torch_that_breaks_when_read_is_one_failed_check(site):
    _package(site, "torch", "__version__ = '2.14.0'\n")  # no version.cuda: reading it raises
    target = _target(runtime_env={}, required_imports=["torch"])
    facts = run_check(site, check_arguments(target, ["torch"], 30))
    found = check_of(_judged(facts, target), "torch-cuda")
    assert found.status == FAIL and "AttributeError" in found.message


def test_required_components_fail_when_absent_optional_ones_are_absent(site):
    target = _target(runtime_env={}, required_imports=["absentpkg"])
    facts = run_check(site, check_arguments(target, ["absentpkg", "otherpkg", "raises"], 5))
    result = _judged(facts, target)
    assert check_of(result, "import:absentpkg").status == FAIL
    assert check_of(result, "import:otherpkg").status == ABSENT
    raised = check_of(result, "import:raises")  # broken but optional: a warning, said
    assert raised.status == WARN and "the import fails here" in raised.message


@pytest.mark.parametrize(("library", "ok"), [("libc.so.6", True), ("libnope-edgevllm.so", False)])
def test_fastsafetensors_cudart_is_loaded_by_the_name_it_uses(site, library, ok):
    _package(site, "fastsafetensors", "__version__ = '0.1.15'\n")
    target = _target(runtime_env={}, required_imports=["fastsafetensors"])
    facts = run_check(site, check_arguments(target, ["fastsafetensors"], 30),
                      env={"FASTSAFETENSORS_CUDART_LIB": library})
    assert facts["cudart"]["name"] == library and facts["cudart"]["ok"] is ok
    found = check_of(_judged(facts, target), "fastsafetensors-cudart")
    assert found.status == (PASS if ok else FAIL)


def test_a_flashinfer_with_a_jit_but_no_nvcc_is_said_and_a_partial_build_only_warned(site):
    _package(site, "flashinfer", "__version__ = '0.7.2'\n")
    _package(site / "flashinfer", "jit", "")
    target = _target(runtime_env={}, required_imports=["flashinfer"])
    facts = run_check(site, check_arguments(target, ["flashinfer"], 30),
                      env={"CUDA_HOME": str(site / "no-cuda"), "PATH": "/nonexistent"})
    assert facts["jit"]["nvcc"] is None and facts["flashinfer_kernels"]["aot_modules"] == []
    found = check_of(_judged(facts, target), "flashinfer-jit")
    assert found.status == FAIL and "lacks nvcc" in found.message
    partial = {labels.EXTENSIONS: json.dumps({"serves": False})}  # builder/subset's label
    assert check_of(_judged(facts, target, partial), "flashinfer-jit").status == WARN


def test_the_host_asks_for_each_component_and_only_the_environment_it_judges():
    from edgevllm.probe.level1 import CACHE_ENV, LOCK_FILE, MODS_RECORD

    target = _target(runtime_env={"B_VAR": "1", "A_VAR": "2", "LD_PRELOAD": "x"})
    argv = check_arguments(target, ["vllm", "torch"], 42)
    assert argv[0] == "-"  # the script comes on stdin: nothing is copied into the image
    pairs = list(zip(argv[1::2], argv[2::2], strict=True))
    assert ("--target-arch", "12.1a") in pairs and ("--import-timeout", "42") in pairs
    assert ("--mods-record", MODS_RECORD) in pairs and ("--lock", LOCK_FILE) in pairs
    assert [v for k, v in pairs if k == "--component"] == ["vllm", "torch"]
    keys = [v for k, v in pairs if k == "--env-key"]
    assert keys == sorted({"A_VAR", "B_VAR", "LD_PRELOAD", *CACHE_ENV})  # each once, in order


def test_a_target_mapping_keeps_an_empty_import_list_and_reads_values_as_text():
    from edgevllm.probe.target import probe_target

    found = probe_target({"name": "t", "cuda_arch": "11.0a", "runtime_env": {"N": 1},
                          "probe": {"required_imports": [], "serve_args": ["--port", 8000]}})
    assert found.required_imports == []  # nothing required: not the defaults
    assert found.runtime_env == {"N": "1"} and found.serve_args == ["--port", "8000"]
    assert found.cuda_version is None and found.level2_model is None


def test_the_first_start_caches_the_image_sets_are_read_from_its_environment(site, tmp_path):
    """What the script reports of the cache variables is what the host judges: only those set
    reach the facts, each with its value."""
    target = _target(runtime_env={}, required_imports=[])
    facts = run_check(site, check_arguments(target, [], 5),
                      env={"CUDA_CACHE_PATH": "/cache/cuda", "TRITON_CACHE_DIR": "/cache/t"})
    assert facts["env"]["CUDA_CACHE_PATH"] == "/cache/cuda"
    assert facts["env"]["TRITON_CACHE_DIR"] == "/cache/t"
    assert facts["env"]["FLASHINFER_WORKSPACE_BASE"] is None
    assert "imports" in facts and facts["imports"] == {}
