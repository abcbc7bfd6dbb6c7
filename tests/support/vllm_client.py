"""A venv with the real vLLM 0.33.0 wheel, enough to run ``vllm.benchmarks.serve`` without a GPU.

Why not vLLM's full closure: it is ~4 GB of CUDA wheels (torch cu13, flashinfer, cutlass-dsl...),
none of which the benchmark client uses. The wheel goes in with ``--no-deps`` and only what
``import vllm.benchmarks.serve`` reaches is added (found by importing until nothing is missing):
``import vllm`` runs ``vllm/env_override.py`` which imports torch (the CPU build, from pip's
find-links), and the datasets module imports ``vllm.lora.utils`` -> model_executor -> v1 request
-> structured output, which pulls xgrammar/llguidance, fastapi, openai, transformers and friends.
All pinned below, installed with ``--no-deps`` so nothing else is resolved.

The venv lives under ``${EDGEVLLM_TEST_CACHE}/vllm-client-<hash>`` (file-locked; a half-built one
is never under the final name) and ``client_python()`` returns its interpreter. A missing piece
raises ``DownloadFailed`` naming what to install: tests fail, never skip.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from support.downloads import DownloadFailed, file_lock, pypi_download, test_cache_dir
from support.platforms import native_wheel_tags

VLLM = "vllm==0.33.0"
# The CPU build of torch: PyPI's Linux torch is the CUDA build (and vLLM 0.33.0 pins 2.14.0, which
# the client never checks); pip finds this one through its find-links (/opt/wheels here).
TORCH = "torch==2.13.0+cpu"
CLOSURE = (
    "aiohappyeyeballs==2.7.1 aiohttp==3.14.5 aiosignal==1.4.0 annotated-doc==0.0.7 "
    "annotated-types==0.8.0 anyio==4.16.0 apache-tvm-ffi==0.1.11 attrs==26.1.0 "
    "cachetools==8.0.1 cbor2==6.3.0 certifi==2026.10.18 click==8.5.1 cloudpickle==3.1.2 "
    "einops==0.8.2 fastapi==0.165.0 filelock==4.2.12 frozenlist==1.8.0 fsspec==2026.9.0 "
    "h11==0.16.0 hf-xet==1.8.0 httpcore2==2.16.2 httpx2==2.16.2 huggingface_hub==2.4.0 "
    "idna==3.20 Jinja2==3.1.6 llguidance==1.9.1 markdown-it-py==4.3.0 MarkupSafe==3.0.4 "
    "mdurl==0.1.2 mpmath==1.4.1 msgspec==0.22.0 multidict==7.2.1 networkx==3.6.1 "
    "numpy==2.4.6 openai==3.54.0 openai-harmony==0.0.8 opentelemetry-api==1.45.2 "
    "packaging==26.3 partial-json-parser==0.2.1.1.post7 pillow==13.0.0 "
    "prometheus_client==0.26.0 propcache==0.5.4 psutil==7.2.2 py-cpuinfo==9.0.0 "
    "pybase64==1.5.1 pydantic==2.14.3 pydantic_core==2.50.4 Pygments==2.21.0 PyYAML==6.0.3 "
    "pyzmq==27.3.0 regex==2026.11.15 requests==2.34.2 rich==15.0.0 safetensors==0.8.0 "
    "shellingham==1.5.4 sniffio==1.3.1 starlette==1.10.0 sympy==1.14.0 tokenizers==0.23.3 "
    "tqdm==4.70.1 transformers==5.20.2 truststore==0.10.5 typer==0.29.2 "
    "typing_extensions==4.16.0 typing-inspection==0.4.5 urllib3==2.8.0 uvloop==0.23.0 "
    "xgrammar==0.2.8 yarl==1.25.1"
).split()


def _key() -> str:
    text = "|".join([VLLM, TORCH, *CLOSURE, sys.version.split()[0]])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _pip(python: Path, args: list[str], what: str) -> None:
    proc = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", *args],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise DownloadFailed(f"installing {what} into the vLLM client venv failed ({last}); "
                             f"{TORCH} must be in pip's find-links (download.pytorch.org/whl/cpu)")


def _build(venv: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    wheel = pypi_download(VLLM, platform_tags=native_wheel_tags("2_28"))   # runs on this host
    _pip(python, [str(wheel)], VLLM)
    _pip(python, [TORCH], TORCH)
    _pip(python, CLOSURE, "the benchmark client's dependencies")
    check = subprocess.run([str(python), "-c", "import vllm.benchmarks.serve"],
                           capture_output=True, text=True)
    if check.returncode != 0:
        last = (check.stderr.strip().splitlines() or ["no output"])[-1]
        raise DownloadFailed(f"vllm.benchmarks.serve does not import in the client venv: {last}")


def client_python() -> Path:
    """The interpreter of the (cached) venv that runs vLLM 0.33.0's benchmark client."""
    root = test_cache_dir()
    venv = root / f"vllm-client-{_key()}"
    with file_lock(root / f".{venv.name}.lock"):
        if not (venv / "bin" / "python").exists():
            partial = root / f".{venv.name}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            _build(partial)
            # only bin/python is ever called (no console scripts), so the finished venv
            # can move to its final name
            partial.rename(venv)
    return venv / "bin" / "python"
