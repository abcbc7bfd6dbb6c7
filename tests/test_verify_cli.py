"""``edgevllm verify`` as a user runs it (a subprocess): table, verdict, JSON, exit codes, and
one ``error:`` line without a traceback for every kind of bad input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from edgevllm.verify.cuobjdump import Listing, disagreement
from support.checks import present
from support.cuda_libs import cuobjdump_binary, nvcc_libs

ROOT = Path(__file__).resolve().parent.parent
VLLM_DIR = "site-packages/vllm"


def _verify(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, EDGEVLLM_CUOBJDUMP=str(cuobjdump_binary()), NO_COLOR="1", COLUMNS="160")
    return subprocess.run([sys.executable, "-c", "from edgevllm.cli import main; main()", "verify",
                           *map(str, args)], cwd=ROOT, capture_output=True, text=True, env=env)


def _one_error_line(proc: subprocess.CompletedProcess, code: int) -> str:
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


@pytest.fixture
def image_dir(tmp_path) -> Path:
    folder = tmp_path / "root" / VLLM_DIR
    folder.mkdir(parents=True)
    shutil.copyfile(nvcc_libs()["sm_121a"], folder / "_C.abi3.so")
    shutil.copyfile(nvcc_libs()["ptx_compute_110"], tmp_path / "root" / "libjit.so")
    return tmp_path / "root"


def test_pass_with_table_json_and_cuobjdump(image_dir, tmp_path):
    out = tmp_path / "report" / "verify.json"
    proc = _verify("--target", "spark", "--path", image_dir, "--json", out, "--cuobjdump")
    assert proc.returncode == 0, proc.stderr
    assert ".../vllm/_C.abi3.so" in proc.stdout and "sm_121a" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1].startswith("PASS: ")
    report = json.loads(out.read_text())
    assert report["passed"] and report["cuobjdump_checked"]
    assert {lib["path"]: lib["level"] for lib in report["libraries"]} == {
        f"{VLLM_DIR}/_C.abi3.so": "native", "libjit.so": "ptx-jit"}
    assert not [p for p in out.parent.iterdir() if p.name != "verify.json"]  # no temporaries left


def test_gate_failure_exits_8_with_one_line(image_dir):
    proc = _verify("--target", "thor", "--path", image_dir)
    line = _one_error_line(proc, 8)
    assert "arch gate failed for thor" in line
    assert "FAIL" in proc.stdout


@pytest.mark.parametrize("case,code,needle", [
    ("not-elf", 8, "not an ELF"),
    ("corrupt", 8, "corrupt"),
    ("not-tarball", 10, "neither a tar, gzip nor zstd"),  # the same line and code as inv load
    ("json-is-a-folder", 2, "is a folder"),
    ("json-below-a-file", 2, "is a file, not a folder"),
    ("empty-folder", 8, "no CUDA libraries found under"),
    ("pure-python", 8, "no CUDA libraries found under"),
    ("host-only-gated", 8, "_C.abi3.so: gated but carries no GPU code"),
    ("bad-arch", 2, "sm_12x"),
    ("missing-image", 4, "not found"),
    ("no-source", 2, "exactly one of"),
    ("two-sources", 2, "exactly one of"),
    ("unknown-target", 2, "no-such"),
    ("bad-policy", 2, "policy"),
    ("missing-path", 2, "no such file"),
    ("empty-policy", 2, "no rule gates anything"),
    ("report-only-policy", 2, "no rule gates anything"),
    ("nothing-gated", 8, "none of the libraries with CUDA code"),
    ("looping-path", 2, "a symlink that loops"),
])
def test_bad_input_gives_one_line(tmp_path, image_dir, case, code, needle):
    text = tmp_path / "libtext.so"
    text.write_text("not a library\n")
    data = nvcc_libs()["sm_121a"].read_bytes()
    cut = tmp_path / "libcut.so"
    cut.write_bytes(data[: len(data) // 2])
    policy = tmp_path / "policy.yaml"
    policy.write_text("rules: 3\n")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty-policy.yaml").write_text("rules: []\n")
    (tmp_path / "report-policy.yaml").write_text(
        "rules:\n  - name: all\n    match: ['**/*.so']\n    mode: report\ndefault: report\n")
    foreign = tmp_path / "foreign"  # CUDA libraries, but none a rule of the policy names
    foreign.mkdir()
    shutil.copyfile(nvcc_libs()["sm_110a"], foreign / "libother.so")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "py" / "pkg").mkdir(parents=True)
    (tmp_path / "py" / "pkg" / "__init__.py").write_text("x = 1\n")
    args = {
        "not-elf": ["--target", "spark", "--path", text],
        "corrupt": ["--target", "spark", "--path", cut],
        "not-tarball": ["--target", "spark", "--tarball", text],
        "missing-image": ["--target", "spark", "--image", "edgevllm-test/no-such-image:0"],
        "no-source": ["--target", "spark"],
        "two-sources": ["--target", "spark", "--path", image_dir, "--tarball", text],
        "unknown-target": ["--target", "no-such", "--path", image_dir],
        "bad-policy": ["--target", "spark", "--path", image_dir, "--policy", policy],
        "missing-path": ["--target", "spark", "--path", tmp_path / "nothing"],
        "json-is-a-folder": ["--target", "spark", "--path", image_dir, "--json", tmp_path],
        "json-below-a-file": ["--target", "spark", "--path", image_dir, "--json", text / "x.json"],
        "empty-folder": ["--target", "spark", "--path", tmp_path / "empty"],
        "pure-python": ["--target", "spark", "--path", tmp_path / "py"],
        "host-only-gated": ["--target", "spark", "--path", _host_only_vllm(tmp_path)],
        "bad-arch": ["--target", "sm_12x", "--path", image_dir],
        "empty-policy": ["--target", "spark", "--path", image_dir,
                         "--policy", tmp_path / "empty-policy.yaml"],
        "report-only-policy": ["--target", "spark", "--path", image_dir,
                               "--policy", tmp_path / "report-policy.yaml"],
        "nothing-gated": ["--target", "thor", "--path", foreign],
        "looping-path": ["--target", "spark", "--path", tmp_path / "loop"],
    }[case]
    assert needle in _one_error_line(_verify(*args), code)


def _host_only_vllm(tmp_path: Path) -> Path:
    """A real host-only shared object (gcc, no device code) where vLLM's _C belongs."""
    root = tmp_path / "hostonly"
    (root / "vllm").mkdir(parents=True)
    source = tmp_path / "host.c"
    source.write_text("int answer(void) { return 42; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(root / "vllm" / "_C.abi3.so"),
                    str(source)], check=True)
    return root


@pytest.mark.parametrize("spelling", ["sm_121a", "121a", "12.1a", "sm_121", "spark"])
def test_target_accepts_arch_spellings(image_dir, spelling):
    proc = _verify("--target", spelling, "--path", image_dir)
    assert proc.returncode == 0, proc.stderr
    assert "(compute 12.1)" in proc.stdout


def test_disagreement_is_described():
    parser = Listing(elf=("sm_110", "sm_121a"), ptx=("sm_121f",))
    assert disagreement(parser, parser) is None
    other = Listing(elf=("sm_110", "sm_120"), ptx=("sm_121f",))
    assert "extra ['sm_120'], lacks ['sm_121a']" in present(disagreement(parser, other))


@pytest.mark.parametrize("mode", ["prebuilt", "precompiled", "compile"])
def test_an_image_s_own_label_does_not_choose_its_gate(engine, tmp_path, mode, capsys,
                                                       monkeypatch):
    """`inv verify --image` takes its gate from the target and the command line (or a signed
    --lock), never from the image: a lock label asking for the stock-kernel gate or planned
    PTX is reported in one line and not obeyed (an unsigned image would choose a laxer gate)."""
    from edgevllm.cli.verify import _gate
    from edgevllm.common.labels import LOCK
    from edgevllm.containers.docker import BuildOptions
    from edgevllm.inspect.gate import Gate

    monkeypatch.setenv("NO_COLOR", "1")
    (tmp_path / "Dockerfile").write_text("FROM scratch\nCOPY Dockerfile /\n")
    tag = f"edgevllm-test/verify-mode:{mode}"
    lines: list[str] = []
    options = BuildOptions(context=tmp_path, dockerfile=tmp_path / "Dockerfile", tags=[tag],
                           labels={LOCK: json.dumps({"mode": mode, "kernel_plan": {
                               "extensions": {"_moe_C": {"arches": ["12.1a", "8.0+PTX"]}}}})})
    assert engine.build(options, lines.append) == 0, "\n".join(lines[-20:])
    capsys.readouterr()
    assert _gate(tag, engine, None, None) == Gate()
    said = [line for line in capsys.readouterr().err.splitlines() if "not obeyed" in line]
    assert len(said) == 1 and "PTX-only units of _moe_C" in said[0], said
    assert ("stock-kernel gate" in said[0]) is (mode != "compile")
    assert _gate("edgevllm-test/verify-mode:absent", engine, None, None) == Gate()
