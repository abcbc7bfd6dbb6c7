"""A small stand-in vLLM wheel (pure Python) for end-to-end builds of a recipe's image.

Why a stand-in: the real vLLM closure for linux/arm64 is about 9.6 GiB (torch and NVIDIA's CUDA
wheels), which an emulated build on a CI box cannot install in minutes. The wheel holds:

- ``vllm``: a package reporting its version (what the probe imports);
- ``torch``: a stand-in for torch, so InstantTensor (whose package imports torch, and whose
  wheel on PyPI requires ``torch>=2.8``) imports for real. It reports a CUDA 13 build for sm_121a
  (``torch.version.cuda``, ``torch._C._cuda_getArchFlags``), the facts the probe reads of a real
  torch; nothing here computes. The build drops the real torch from the closure with a resolver
  override, so the only torch in the image is this one.

The wheel is written with zipfile (a valid RECORD with sha256 per file), the same bytes every
time, so its hash, the closure and the lock are stable between runs.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

VERSION = "0.1.0"
TORCH_STANDIN = '''"""Stand-in for torch (edgevllm's tests/support/standin_wheels.py)."""
__version__ = "2.14.0+standin"
from . import _C, cuda, distributed, version  # noqa: E402,F401


class dtype:
    def __init__(self, name):
        self.name = name


for _name in ("float64 float32 float16 bfloat16 int64 int32 int16 int8 uint8 bool "
              "float8_e4m3fn float8_e5m2 uint16 uint32 uint64 complex64 complex128").split():
    globals()[_name] = dtype(_name)


class device:
    pass


class Tensor:
    pass


class Size(tuple):
    pass
'''
FILES = {
    "vllm/__init__.py": f'__version__ = "{VERSION}"\n',
    "torch/__init__.py": TORCH_STANDIN,
    "torch/version.py": 'cuda = "13.0"\n',
    "torch/_C.py": 'def _cuda_getArchFlags():\n    return "sm_121a"\n',
    "torch/cuda.py": "def is_available():\n    return False\n\n\ndef get_arch_list():\n"
                     "    return []\n",
    "torch/distributed.py": "",
}


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def standin_vllm_wheel(dest: Path, extra: dict[str, bytes] | None = None) -> Path:
    """``dest/vllm-0.1.0-py3-none-any.whl`` (written once; the same bytes every time);
    ``extra``: more files by their path in the wheel (a CUDA library for verify to read)."""
    wheel = dest / f"vllm-{VERSION}-py3-none-any.whl"
    info = f"vllm-{VERSION}.dist-info"
    files = {name: text.encode() for name, text in FILES.items()} | (extra or {})
    files[f"{info}/METADATA"] = (f"Metadata-Version: 2.1\nName: vllm\nVersion: {VERSION}\n"
                                 "Summary: edgevllm test stand-in\n").encode()
    files[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: edgevllm-tests\n"
                              b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    files[f"{info}/top_level.txt"] = b"torch\nvllm\n"
    record = [_record_line(n, d) for n, d in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    partial = wheel.with_name(wheel.name + ".partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as out:
        for name, data in files.items():
            entry = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            entry.external_attr = 0o644 << 16
            out.writestr(entry, data)
    partial.replace(wheel)
    return wheel


def host_library(work: Path, compiler: str = "gcc") -> bytes:
    """A shared object with no device code and no dependency (not even libc), built with the
    host's gcc for the host's platform (or ``compiler``'s, e.g. aarch64-linux-gnu-gcc): what the
    probe's ``vllm-extensions`` check loads in a stand-in vLLM (a pure-Python vLLM fails it)."""
    import subprocess

    source = work / "standin_host.c"
    source.write_text("int edgevllm_standin(void) { return 1; }\n")
    built = work / "libstandin_host.so"
    proc = subprocess.run([compiler, "-shared", "-fPIC", "-nostdlib", "-o", str(built),
                           str(source)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{compiler} could not build a stand-in library (install it: gcc, "
                           f"gcc-aarch64-linux-gnu): {proc.stderr}")
    return built.read_bytes()
