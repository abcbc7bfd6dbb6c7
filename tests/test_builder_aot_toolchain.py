"""The AOT step's native toolchain, as the in-image script (``builder/aot/inimage_build.py``)
reads a CUDA toolkit: the real nvcc's release, the runtime headers' release, CCCL's toolkit check
turned off only when they differ, the library folder and the driver stub (a stand-in linked with
the real ``cc``, carrying the driver's soname), and its one-line failures (no nvcc, no arch list)
run as a real process. The toolkits are folders made here around the real nvcc."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from edgevllm.builder.aot import inimage_build

NVCC = Path("/usr/local/cuda-13.0/bin/nvcc")
SCRIPT = Path(inimage_build.__file__)


def real_nvcc() -> Path:
    if not NVCC.is_file():
        pytest.fail(f"the CUDA 13.0 toolkit is needed at {NVCC.parent.parent} (CONTRIBUTING.md)")
    return NVCC


def toolkit(root: Path, cudart: int | None = 13000, lib: str | None = "lib64",
            stub: bool = False) -> Path:
    """A CUDA home: the real nvcc linked in, runtime headers saying ``cudart``, libcudart.so in
    ``lib`` and, with ``stub``, the driver stub NVIDIA's toolkit ships."""
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "nvcc").symlink_to(real_nvcc())
    if cudart is not None:
        (root / "include").mkdir()
        (root / "include" / "cuda_runtime_api.h").write_text(
            f"/* a header */\n#define CUDART_VERSION  {cudart}\n")
    if lib is not None:
        (root / lib).mkdir()
        (root / lib / "libcudart.so").write_bytes(b"\x7fELF")
    if stub:
        (root / "lib64" / "stubs").mkdir(parents=True)
        (root / "lib64" / "stubs" / "libcuda.so").write_bytes(b"\x7fELF")
    return root


def test_the_real_nvcc_and_its_headers_agree_on_the_release():
    home = real_nvcc().parent.parent
    assert inimage_build.nvcc_release(str(home)) == "13.0"
    assert inimage_build.headers_release(str(home)) == "13.0"


@pytest.mark.parametrize("number, release", [(13000, "13.0"), (12080, "12.8"), (13010, "13.1"),
                                             (12090, "12.9")])
def test_the_headers_release_is_cudart_versions(tmp_path, number, release):
    home = toolkit(tmp_path / "cuda", cudart=number)
    assert inimage_build.headers_release(str(home)) == release


def test_no_headers_or_no_define_is_no_release(tmp_path):
    home = toolkit(tmp_path / "cuda", cudart=None)
    assert inimage_build.headers_release(str(home)) is None
    (home / "include").mkdir()
    (home / "include" / "cuda_runtime_api.h").write_text("#define CUDART_OTHER 13000\n")
    assert inimage_build.headers_release(str(home)) is None


def test_no_nvcc_is_no_release(tmp_path):
    assert inimage_build.nvcc_release(str(tmp_path)) is None


def test_matching_headers_keep_cccls_check(tmp_path):
    home = toolkit(tmp_path / "cuda", cudart=13000, stub=True)
    found, cuda_flags, ld_flags = inimage_build.toolchain(str(home), str(tmp_path / "work"))
    assert (found["nvcc"], found["headers"]) == ("13.0", "13.0")
    assert cuda_flags == [] and ld_flags == [] and found["notes"] == []
    assert found["cuda_home"] == os.path.realpath(home)


def test_older_headers_turn_cccls_check_off_and_say_so(tmp_path):
    home = toolkit(tmp_path / "cuda", cudart=12080, stub=True)
    found, cuda_flags, _ = inimage_build.toolchain(str(home), str(tmp_path / "work"))
    assert cuda_flags == ["-DCCCL_DISABLE_CTK_COMPATIBILITY_CHECK"]
    assert found["notes"] == ["nvcc 13.0 with CUDA 12.8 runtime headers: CCCL's toolkit check off"]


def test_a_toolkit_with_lib_not_lib64_is_searched_there(tmp_path):
    home = toolkit(tmp_path / "cuda", lib="lib", stub=True)
    _, _, ld_flags = inimage_build.toolchain(str(home), str(tmp_path / "work"))
    assert ld_flags == [f"-L{home / 'lib'}"]


def test_without_a_driver_stub_one_is_linked_with_the_drivers_soname(tmp_path):
    home = toolkit(tmp_path / "cuda", stub=False)
    work = tmp_path / "work"
    work.mkdir()
    found, _, ld_flags = inimage_build.toolchain(str(home), str(work))
    assert ld_flags == [f"-L{work / 'stubs'}"]
    stub = work / "stubs" / "libcuda.so"
    dynamic = subprocess.run(["readelf", "-d", str(stub)], capture_output=True, text=True,
                             check=True).stdout
    assert "Library soname: [libcuda.so.1]" in dynamic
    assert inimage_build.elf_machine(str(stub)) == inimage_build.elf_machine(sys.executable)
    assert any("stand-in with the driver's soname" in note for note in found["notes"])


def test_no_nvcc_stops_the_step_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        inimage_build.toolchain(str(tmp_path), str(tmp_path / "work"))
    assert stopped.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"edgevllm aot: error: no nvcc under {tmp_path} (CUDA_HOME): the AOT step "
                   "builds FlashInfer's modules with the image's CUDA compiler"]


def run_script(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"config": "config.json", "modules": []}))
    return subprocess.run([sys.executable, str(SCRIPT), "--plan", str(plan), "--record",
                           str(tmp_path / "rec" / "aot.json")], capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"], **env}, timeout=120)


def test_the_step_without_an_arch_list_is_one_line_and_no_record(tmp_path):
    proc = run_script(tmp_path, {})
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "edgevllm aot: error: FLASHINFER_CUDA_ARCH_LIST is not set: the arch to build for "
        "comes from the target"]
    assert not (tmp_path / "rec").exists()


def test_the_step_without_nvcc_is_one_line_and_leaves_no_workspace(tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = run_script(tmp_path, {"FLASHINFER_CUDA_ARCH_LIST": "12.1a", "TMPDIR": str(scratch),
                                 "CUDA_HOME": str(tmp_path / "none")})
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"edgevllm aot: error: no nvcc under {tmp_path / 'none'}")
    assert list(scratch.iterdir()) == []  # its temporary workspace removed


def test_install_puts_a_whole_library_in_place(tmp_path):
    built = tmp_path / "built.so"
    built.write_bytes(os.urandom(4096))
    dest = tmp_path / "aot" / "mod_a" / "mod_a.so"
    inimage_build.install(str(built), str(dest))
    assert dest.read_bytes() == built.read_bytes()
    built.write_bytes(b"second")
    inimage_build.install(str(built), str(dest))
    assert dest.read_bytes() == b"second"
    assert sorted(p.name for p in dest.parent.iterdir()) == ["mod_a.so"]  # no .partial left
    assert inimage_build.sha256_of(str(dest)) == hashlib.sha256(b"second").hexdigest()
