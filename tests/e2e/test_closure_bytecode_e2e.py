"""The shared closure install end to end, cross-built: a prebuilt image for the other platform
(linux/arm64 under qemu on an x86_64 host, linux/amd64 under qemu on an arm64 one) whose closure's
byte-code is compiled on the build platform (the host's), through ``build()`` as
``inv build --vllm-wheel FILE`` runs it.

What stands in for what: a small pure-Python "vllm" wheel written here (it imports two real
PyPI packages, idna and packaging, which the closure resolves with uv and downloads by hash);
the Debian bookworm test images (Python 3.11) as the runtime base, the foreign one for the image
and the native one as its build-platform twin (``bytecode_image``: no registry here serves one
reference for both platforms). No mods, no verify (no CUDA in this closure).

What it checks: both byte-code steps ran on the host's platform, the closure's and the one of
the stand-in vLLM, which comes over the closure in a layer of its own (the closure stage
installs every wheel but it); the image starts without compiling anything (``import`` writes no
.pyc in a fresh container, with PYTHONDONTWRITEBYTECODE unset; the same check on a module whose
.pyc was removed sees the new file, for the closure's idna and for vllm, so the check can fail);
the .pyc are unchecked-hash ones; the layers report their bytes and nothing is shadowed; another
target reuses every install step, the vLLM's too.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import uuid
import zipfile
from pathlib import Path

import pytest

from e2e.conftest import write_spec
from support.platforms import (
    foreign_arch,
    foreign_platform,
    machine,
    native_arch,
    require_runnable,
)

pytestmark = pytest.mark.e2e

PYTHON = "python3.11"   # bookworm's
IMPORTS = "import vllm, idna, packaging.version; print(vllm.VERSION)"


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def fake_vllm_wheel(folder: Path) -> Path:
    """vllm 0.0.1 (pure Python) needing idna and packaging: a closure of three wheels and uv."""
    files = {
        "vllm/__init__.py": b"import idna\nimport packaging.version\nfrom vllm import util\n"
                            b"VERSION = util.version()\n",
        # a new closure each run, so the install and byte-code steps run (and print) each time
        "vllm/util.py": f"RUN = {uuid.uuid4().hex!r}\n\ndef version():\n    return '0.0.1'\n"
                        .encode(),
        "vllm-0.0.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: vllm\nVersion: 0.0.1\n"
                                         b"Requires-Dist: idna\nRequires-Dist: packaging\n",
        "vllm-0.0.1.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: edgevllm-test\n"
                                      b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [_record_line(name, data) for name, data in files.items()]
    files["vllm-0.0.1.dist-info/RECORD"] = ("\n".join(record)
                                            + "\nvllm-0.0.1.dist-info/RECORD,,\n").encode()
    wheel = folder / "vllm-0.0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in files.items():
            archive.writestr(zipfile.ZipInfo(name, (2026, 1, 1, 0, 0, 0)), data)
    return wheel


def bytecode_spec(engine, wheel: Path, target: str = "spark") -> dict:
    from support.images import python_image

    return {"target": target, "platform": foreign_platform(), "mode": "prebuilt",
            "vllm_wheel": str(wheel), "python": PYTHON,
            "base_image": python_image(engine, foreign_arch()),
            "bytecode_image": python_image(engine, native_arch()),
            "apt_packages": [], "mods": [], "torch": {"version": None},
            "packages": {"flashinfer-python": None, "nvidia-cutlass-dsl": None},
            "verify": False, "image_repo": f"edgevllm-test/e2e-bytecode-{target}"}


@pytest.fixture(scope="module")
def emulated_build(engine, tmp_path_factory, cli):
    """The build summary (``edgevllm build --json``), with the spec and wheel it was built from."""
    require_runnable(foreign_arch())   # names the qemu handler this host lacks
    work = tmp_path_factory.mktemp("bytecode")
    wheel = fake_vllm_wheel(work)
    spec = write_spec(work / "spec.yaml", **bytecode_spec(engine, wheel))
    code, _, stderr = cli("build", "--spec", str(spec), "--out", str(work / "out"),
                          "--json", str(work / "result.json"), timeout=3000)
    assert code == 0, stderr[-6000:]
    result = json.loads((work / "result.json").read_text())
    yield {**result, "work": work, "wheel": wheel}
    for tag in result["tags"]:
        engine.remove_image(tag)


def run_sh(engine, image: str, script: str) -> str:
    proc = engine.run_cli(["run", "--rm", "--platform", foreign_platform(), "--entrypoint", "sh",
                           image, "-c", script], timeout=600)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return proc.stdout.decode()


def test_bytecode_is_compiled_on_the_build_platform(emulated_build):
    log = Path(emulated_build["log"]).read_text()
    compiled = re.findall(r"edgevllm: (\d+) \.pyc files compiled on (\S+)", log)
    assert compiled, f"no byte-code step in {emulated_build['log']}"
    count, compiled_on = compiled[-1]
    assert int(count) > 10 and compiled_on == machine(native_arch()), compiled  # not qemu's
    # The stand-in vLLM's own two modules, from its dist-info RECORD, compiled there too.
    over = re.findall(r"edgevllm: (\d+) \.pyc files over the closure compiled on (\S+)", log)
    assert over and over[-1] == ("2", machine(native_arch())), over


def test_a_fresh_container_compiles_nothing(emulated_build, engine):
    listing = "find / -xdev -name '*.pyc' 2>/dev/null | sort"
    script = (f"unset PYTHONDONTWRITEBYTECODE; {listing} > /tmp/before; "
              f"python -c '{IMPORTS}' >/dev/null; {listing} > /tmp/after; "
              "echo imported; diff /tmp/before /tmp/after; wc -l < /tmp/before; "
              # the check can fail: without its .pyc, idna's core recompiles on import
              "rm /opt/venv/lib/python3.11/site-packages/idna/__pycache__/core.*.pyc "
              "/opt/venv/lib/python3.11/site-packages/vllm/__pycache__/util.*.pyc; "
              f"{listing} > /tmp/removed; python -c '{IMPORTS}' >/dev/null; "
              f"{listing} > /tmp/again; "
              "echo control; diff /tmp/removed /tmp/again | grep '^>' || true")
    out = run_sh(engine, emulated_build["image"], script).split()
    imported, control = out.index("imported"), out.index("control")
    assert out[imported + 1:imported + 2] and out[imported + 1].isdigit(), \
        f"import vllm wrote .pyc files in a fresh container: {out[imported + 1:control]}"
    assert int(out[imported + 1]) > 10
    rewritten = sorted(Path(p).parent.parent.name + "/" + Path(p).name.split(".")[0]
                       for p in out[control + 1:] if p != ">")
    assert rewritten == ["idna/core", "vllm/util"], \
        f"removing a .pyc did not make the import write that one (and only it): {rewritten}"


def test_pyc_are_unchecked_hash_ones(emulated_build, engine):
    pyc = "/opt/venv/lib/python3.11/site-packages/vllm/__pycache__/__init__.cpython-311.pyc"
    out = run_sh(engine, emulated_build["image"], f"od -An -tu4 -j4 -N4 {pyc}")
    assert int(out.split()[0]) == 0b01   # hash-based, not checked against the source


def test_layers_report_bytes_and_nothing_shadowed(emulated_build):
    summary = emulated_build["layers"]
    assert summary is not None and summary["shadowed_bytes"] == 0, json.dumps(summary)
    steps = [layer["step"] for layer in summary["layers"]]
    # Two layers of .pyc only: the closure's, then the stand-in vLLM's two modules.
    bytecode = [layer["files"] for layer in summary["layers"]
                if "COPY /bytecode/ /" in layer["step"]]
    assert len(bytecode) == 2 and bytecode[0] > 10 and bytecode[1] == 2, steps
    # The closure's install and vLLM's are separate layers: only vLLM's reads requirements-mode.
    installs = [layer for layer in summary["layers"] if "\"$uv\" pip install" in layer["step"]]
    assert len(installs) == 2 and "requirements-mode.txt" in installs[1]["step"], steps
    assert installs[1]["files"] > 2 and installs[1]["bytes"] < installs[0]["bytes"], installs
    assert sum(layer["bytes"] for layer in summary["layers"]) == summary["total_bytes"] > 0


def test_another_target_reuses_the_closure_and_a_size_budget_fails_it(
        emulated_build, engine, cli, tmp_path):
    """A second target with the same closure: its build runs no closure step again (BuildKit
    has them all), and its size budget, far below the image, fails it in one line (exit 6)."""
    from edgevllm.common.paths import data_dirs

    spark = (data_dirs("targets")[0] / "spark.yaml").read_text()
    (tmp_path / "targets").mkdir()
    (tmp_path / "targets" / "budget.yaml").write_text(
        spark.replace("name: spark", "name: budget") + "size_budget_gb: 0.001\n")
    spec = write_spec(tmp_path / "spec.yaml",
                      **bytecode_spec(engine, emulated_build["wheel"], target="budget"))
    code, _, stderr = cli("build", "--spec", str(spec), "--out", str(tmp_path / "out"),
                          env={"EDGEVLLM_TARGETS_PATH": str(tmp_path / "targets")}, timeout=3000)
    for line in engine.run_cli(["images", "-q", "edgevllm-test/e2e-bytecode-budget"]).stdout \
            .decode().split():
        engine.run_cli(["rmi", "-f", line])
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert code == 6 and len(errors) == 1, stderr[-4000:]
    assert "field 'size_budget_gb' (0.001 GB)" in errors[0] and "largest layers:" in errors[0]
    log = next((tmp_path / "out" / "budget" / "logs").glob("build-*.log")).read_text()
    steps = re.findall(r"^(#\d+) \[((?:closure|vllm)[a-z-]*) \d+/\d+\] (?:RUN|COPY)", log,
                       re.MULTILINE)
    assert {stage for _, stage in steps} == {"closure-files", "closure-bytecode", "closure",
                                             "vllm-files", "vllm-bytecode"}, log
    ran = [f"{number} {stage}" for number, stage in steps if f"{number} CACHED" not in log]
    assert not ran, f"install steps ran again for another target: {ran}\n{log[-3000:]}"
