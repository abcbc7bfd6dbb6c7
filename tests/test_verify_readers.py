"""The readers of verify's inputs hold their ceilings and never pass silently: a wheel member or
a tar member that declares more than it can hold, a tar.zst that decodes to hundreds of MiB, a
truncated archive, an unreadable folder and a symlink loop each give one line (exit 8).

Archives are built here with the standard library (zipfile, tarfile) and zstandard; libraries
are the nvcc-built ones of tests/support/cuda_libs.py. Memory is measured in a child process
(its ``VmHWM``) running the real CLI."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import zstandard

from edgevllm.common.errors import NotATarballError, ResourceLimitError, ScanError
from edgevllm.verify.readers import scan_directory, scan_tar_stream, scan_wheel
from support.cuda_libs import nvcc_libs
from support.fake_rootfs import tar_of

ROOT = Path(__file__).resolve().parent.parent
SITE = "opt/venv/lib/python3.12/site-packages"
ELF_HEAD = b"\x7fELF\x02\x01\x01" + bytes(57)  # a 64-bit LE ELF header with no sections


def _one_line(proc: subprocess.CompletedProcess, code: int) -> str:
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


def _cli_with_peak(*args: str | Path, env: dict | None = None, prefix: tuple = ()):
    """The verify CLI in a child; returns (process, its peak resident memory in MiB). VmHWM is
    this process image's own high-water mark (ru_maxrss would carry the forking parent's)."""
    code = ("import sys\nfrom edgevllm.cli import main\n"
            "try:\n    main()\nfinally:\n"
            "    status = open('/proc/self/status').read()\n"
            "    peak = int(status.split('VmHWM:')[1].split()[0])\n"
            "    print(f'PEAK {peak // 1024}', file=sys.stdout)\n")
    proc = subprocess.run([*prefix, sys.executable, "-c", code, "verify", *map(str, args)],
                          cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "NO_COLOR": "1", **(env or {})}, timeout=300)
    peak = int(proc.stdout.rsplit("PEAK ", 1)[1].split()[0])
    return proc, peak


def _forged_wheel(path: Path, declared: int) -> Path:
    """A real zip whose one member says (in both headers) it inflates to ``declared`` bytes."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("vllm/_C.abi3.so", ELF_HEAD + bytes(600))
    data = bytearray(path.read_bytes())
    local = data.index(b"PK\x03\x04")
    central = data.index(b"PK\x01\x02")
    data[local + 22:local + 26] = declared.to_bytes(4, "little")
    data[central + 24:central + 28] = declared.to_bytes(4, "little")
    path.write_bytes(bytes(data))
    return path


def test_a_wheel_member_declaring_more_than_its_bytes_can_hold_is_refused(tmp_path):
    wheel = _forged_wheel(tmp_path / "bomb-1.0-py3-none-any.whl", 0xFFFF_FFF0)
    assert wheel.stat().st_size < 1024
    with pytest.raises(ResourceLimitError, match="more than its compression can produce"):
        scan_wheel(wheel)
    proc, peak = _cli_with_peak("--target", "spark", "--path", wheel)
    assert "declares 4.0 GiB" in _one_line(proc, 8) and peak < 300, peak


def _tar_zst(path: Path, members: dict[str, tuple[bytes, int]]) -> Path:
    """A tar.zst whose members are ``head`` followed by zeros up to ``size`` (streamed)."""
    with open(path, "wb") as out:
        with zstandard.ZstdCompressor(level=1).stream_writer(out) as zst:
            with tarfile.open(fileobj=zst, mode="w|") as tar:
                for name, (head, size) in members.items():
                    info = tarfile.TarInfo(name)
                    info.size = size
                    tar.addfile(info, _Zeros(head, size))
    return path


class _Zeros(io.RawIOBase):
    def __init__(self, head: bytes, size: int):
        self.head, self.left = head, size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        count = min(len(buffer), self.left)
        piece = self.head[:count]
        buffer[:count] = piece + bytes(count - len(piece))
        self.head, self.left = self.head[len(piece):], self.left - count
        return count


def test_a_large_tar_member_streams_through_a_file_not_memory(tmp_path):
    big = _tar_zst(tmp_path / "big.tar.zst", {f"{SITE}/vllm/_C.abi3.so": (ELF_HEAD, 400 << 20)})
    assert big.stat().st_size < 200 << 10  # ~100 KB that decode to 400 MiB
    proc, peak = _cli_with_peak("--target", "spark", "--tarball", big)
    assert "gated but carries no GPU code" in _one_line(proc, 8)
    assert peak < 250, f"peak {peak} MiB for a 400 MiB member"


def test_the_library_ceiling_is_a_setting(tmp_path):
    big = _tar_zst(tmp_path / "big.tar.zst", {f"{SITE}/vllm/_C.abi3.so": (ELF_HEAD, 8 << 20)})
    proc, _ = _cli_with_peak("--target", "spark", "--tarball", big,
                             env={"EDGEVLLM_MAX_LIBRARY_SIZE": "4M"})
    line = _one_line(proc, 8)
    assert "declares 8.0 MiB, over the 4.0 MiB" in line and "EDGEVLLM_MAX_LIBRARY_SIZE" in line
    proc, _ = _cli_with_peak("--target", "spark", "--tarball", big, "--max-library-size", "4M")
    assert "declares 8.0 MiB, over the 4.0 MiB" in _one_line(proc, 8)
    proc, _ = _cli_with_peak("--target", "spark", "--tarball", big,
                             env={"EDGEVLLM_MAX_LIBRARY_SIZE": "lots"})
    assert "EDGEVLLM_MAX_LIBRARY_SIZE='lots'" in _one_line(proc, 2)
    proc, _ = _cli_with_peak("--target", "spark", "--tarball", big, "--max-library-size", "x")
    assert "--max-library-size 'x'" in _one_line(proc, 2)


def test_a_root_filesystem_tar_cut_between_members_is_truncated():
    library = nvcc_libs()["sm_121a"].read_bytes()
    whole = tar_of({f"{SITE}/vllm/_C.abi3.so": library, "etc/hostname": b"x\n"})
    reports = scan_tar_stream(io.BytesIO(whole), "whole")
    assert [r.path for r in reports] == [f"{SITE}/vllm/_C.abi3.so"]
    first_member_end = 512 + (len(library) + 511) // 512 * 512
    with pytest.raises(NotATarballError, match="stops before its end"):
        scan_tar_stream(io.BytesIO(whole[:first_member_end]), "cut")


def test_an_empty_layer_of_zero_blocks_is_whole():
    assert scan_tar_stream(io.BytesIO(bytes(1024)), "empty") == []


def test_a_symlink_loop_in_a_folder_is_an_error(tmp_path):
    shutil.copyfile(nvcc_libs()["sm_121a"], tmp_path / "libok.so")
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    with pytest.raises(ScanError, match="symlink loop"):
        scan_directory(tmp_path)
    (tmp_path / "a").unlink()
    (tmp_path / "b").unlink()
    (tmp_path / "up").symlink_to(tmp_path)  # a link to a folder is not followed, not an error
    assert [r.path for r in scan_directory(tmp_path)] == ["libok.so"]


def test_an_unreadable_folder_stops_the_scan(tmp_path):
    """As root, permissions only bind without CAP_DAC_OVERRIDE: the CLI runs with it dropped."""
    if not shutil.which("setpriv"):
        pytest.fail("this test needs setpriv (util-linux) to drop CAP_DAC_OVERRIDE")
    site = tmp_path / "root" / "vllm"
    site.mkdir(parents=True)
    shutil.copyfile(nvcc_libs()["sm_121a"], site / "_C.abi3.so")
    locked = tmp_path / "root" / "locked"
    locked.mkdir()
    locked.chmod(0)
    try:
        prefix = ("setpriv", "--bounding-set=-dac_override,-dac_read_search") \
            if os.geteuid() == 0 else ()
        proc, _ = _cli_with_peak("--target", "spark", "--path", tmp_path / "root", prefix=prefix)
    finally:
        locked.chmod(0o755)
    assert f"{locked}: cannot read this folder" in _one_line(proc, 8)
