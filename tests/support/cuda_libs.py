"""Real CUDA libraries for the verify tests: built with nvcc, and real aarch64 wheels from PyPI.

``nvcc_libs()`` compiles one small CUDA source (several kernels) into a shared object per
variant (SASS sm_110/110a/110f/120a/120f/121/121a/121f, PTX only, several gencodes, LZ4 and
uncompressed fatbins, two translation units with different arches) plus a relocatable
``-rdc=true -c`` object. Results are cached by source, flags and nvcc version under
``$EDGEVLLM_TEST_CACHE/nvcc-libs``. ``aarch64_cuda_lib()``: libnvjpeg.so.13 from NVIDIA's
aarch64 nvidia-nvjpeg wheel on PyPI (sm_75..sm_121 SASS + compute_121 PTX, ZSTD).
``compressed_libs()``: the same source with every entry ZSTD- or LZ4-compressed.
``real_wheel(spec)``: a real aarch64 wheel (vLLM, torch, flashinfer-cubin, bitsandbytes);
``wheel_verdict(spec, target)``: ``verify`` of a whole wheel, kept on disk keyed by the wheel and
the verify sources, so that only the first run after a change pays for reading 400 MB zips.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .downloads import file_lock, pypi_download, test_cache_dir, unpacked_wheel
from .platforms import native_wheel_tags

NVCC = Path(os.environ.get("EDGEVLLM_NVCC", "/usr/local/cuda-13.0/bin/nvcc"))
NVJPEG_SPEC = "nvidia-nvjpeg==13.3.2.43"
CUOBJDUMP_SPEC = "nvidia-cuda-cuobjdump==13.5.37"
AARCH64_TAGS = ["manylinux2014_aarch64", "manylinux_2_17_aarch64"]

SOURCE = """
__global__ void scale(float *x, float a) { x[threadIdx.x] *= a; }
__global__ void shift(float *x, float b) { x[threadIdx.x] += b; }
__global__ void square(float *x) { x[threadIdx.x] = x[threadIdx.x] * x[threadIdx.x]; }
extern "C" void run_all(float *x) {
  scale<<<1, 32>>>(x, 2.f); shift<<<1, 32>>>(x, 1.f); square<<<1, 32>>>(x);
}
"""
OTHER_SOURCE = """
__global__ void other(int *y) { y[threadIdx.x] ^= 7; }
extern "C" void run_other(int *y) { other<<<1, 32>>>(y); }
"""


def _gencode(arch: str, code: str) -> list[str]:
    return ["-gencode", f"arch={arch},code={code}"]


def _sass(sm: str) -> list[str]:
    return _gencode(f"compute_{sm}", f"sm_{sm}")


# name → nvcc flags (shared object unless the name ends in .o)
VARIANTS: dict[str, list[str]] = {
    **{
        f"sm_{sm}": _sass(sm)
        for sm in ("110", "110a", "110f", "121", "121a", "121f", "120a", "120f")
    },
    "ptx_compute_110": _gencode("compute_110", "compute_110"),
    "ptx_compute_121a": _gencode("compute_121a", "compute_121a"),
    "multi_gencode": _sass("110a")
    + _sass("121a")
    + _sass("120f")
    + _gencode("compute_121", "compute_121"),
    "lz4": ["--compress-mode=speed"] + _sass("110a") + _gencode("compute_110", "compute_110"),
    "uncompressed": ["--compress-mode=none"]
    + _sass("121a")
    + _gencode("compute_121a", "compute_121a"),
    "rdc.o": ["-rdc=true"] + _sass("121a") + _sass("110f"),
}


def require_nvcc() -> Path:
    if not os.access(NVCC, os.X_OK):
        raise AssertionError(
            f"nvcc not found at {NVCC}: install the CUDA 13.0 toolkit "
            "(or set EDGEVLLM_NVCC) to build the test libraries"
        )
    return NVCC


def _run(argv: list[str], cwd: Path) -> None:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed:\n{proc.stderr[-2000:]}")


def _build(name: str, flags: list[str], work: Path) -> Path:
    (work / "k.cu").write_text(SOURCE)
    out = work / _filename(name)
    mode = ["-c"] if name.endswith(".o") else ["-shared"]
    _run([str(NVCC), *mode, "-Xcompiler", "-fPIC", *flags, "-o", out.name, "k.cu"], work)
    return out


def _build_mixed(work: Path) -> Path:
    """Two translation units, one with sm_121a + sm_110a SASS, one with sm_90 SASS only."""
    (work / "k.cu").write_text(SOURCE)
    (work / "o.cu").write_text(OTHER_SOURCE)
    pic = ["-Xcompiler", "-fPIC", "-c"]
    _run([str(NVCC), *pic, *_sass("121a"), *_sass("110a"), "-o", "k.o", "k.cu"], work)
    _run([str(NVCC), *pic, *_sass("90"), "-o", "o.o", "o.cu"], work)
    _run([str(NVCC), "-shared", "-o", "libmixed_tu.so", "k.o", "o.o"], work)
    return work / "libmixed_tu.so"


def _digest(*parts: object) -> str:
    """The cache key of a build of ``parts`` with this nvcc: 16 hex digits of the sha256 of
    ``repr((*parts, nvcc --version))``."""
    version = subprocess.run([str(NVCC), "--version"], capture_output=True, text=True).stdout
    return hashlib.sha256(repr((*parts, version)).encode()).hexdigest()[:16]


def _nvcc_cache() -> Path:
    """The folder the nvcc-built test libraries are cached in (nvcc required)."""
    require_nvcc()
    return test_cache_dir("nvcc-libs")


def _key() -> str:
    return _digest(SOURCE, OTHER_SOURCE, sorted(VARIANTS.items()))


@functools.lru_cache(maxsize=None)
def nvcc_libs() -> dict[str, Path]:
    """``{variant: path}`` for every entry of VARIANTS plus ``mixed_tu``; built once, cached."""
    root = _nvcc_cache()
    final = root / _key()
    with file_lock(root / f".{final.name}.lock"):
        if not final.is_dir():
            _build_all(final)
    return {name: final / _filename(name) for name in [*VARIANTS, "mixed_tu"]}


def _filename(name: str) -> str:
    return name if name.endswith(".o") else f"lib{name}.so"


def _build_all(final: Path) -> None:
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        for name, flags in VARIANTS.items():
            work = Path(tempfile.mkdtemp(dir=tmp))
            shutil.move(str(_build(name, flags, work)), tmp)
        shutil.move(str(_build_mixed(Path(tempfile.mkdtemp(dir=tmp)))), tmp)
        for leftover in [p for p in tmp.iterdir() if p.is_dir()]:
            shutil.rmtree(leftover)
        tmp.chmod(0o755)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@functools.lru_cache(maxsize=None)
def aarch64_cuda_lib() -> Path:
    wheel = pypi_download(NVJPEG_SPEC, AARCH64_TAGS, "3.11")
    return unpacked_wheel(wheel) / "nvidia" / "cu13" / "lib" / "libnvjpeg.so.13"


@functools.lru_cache(maxsize=None)
def cuobjdump_binary() -> Path:
    """cuobjdump from the nvidia-cuda-cuobjdump wheel for this host (unzipped, never
    pip-installed): it runs here."""
    wheel = pypi_download(CUOBJDUMP_SPEC, native_wheel_tags("2014", "2_17"), "3.11")
    return unpacked_wheel(wheel) / "nvidia" / "cu13" / "bin" / "cuobjdump"


@functools.lru_cache(maxsize=None)
def nvcc_lib(flags: tuple[str, ...]) -> Path:
    """One shared object of SOURCE built with ``flags`` (e.g. a kernel plan's ``-gencode``
    flags); cached by source, flags and nvcc version like ``nvcc_libs``."""
    root = _nvcc_cache()
    key = _digest(SOURCE, flags)
    final = root / f"flags-{key}"
    with file_lock(root / f".{final.name}.lock"):
        if not final.is_dir():
            tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=root))
            try:
                shutil.move(str(_build("flags", list(flags), Path(tempfile.mkdtemp(dir=tmp)))), tmp)
                for leftover in [p for p in tmp.iterdir() if p.is_dir()]:
                    shutil.rmtree(leftover)
                tmp.chmod(0o755)
                os.replace(tmp, final)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return final / _filename("flags")


# Fatbins compressed for sure: nvcc skips compressing small entries unless told to compress all.
COMPRESSED_VARIANTS: dict[str, list[str]] = {
    "zstd": ["-Xfatbin=-compress-all"]
    + _sass("121a")
    + _sass("110f")
    + _gencode("compute_121a", "compute_121a"),
    "lz4": ["-Xfatbin=-compress-all", "--compress-mode=speed"]
    + _sass("121a")
    + _sass("110f")
    + _gencode("compute_121a", "compute_121a"),
}


@functools.lru_cache(maxsize=None)
def compressed_libs() -> dict[str, Path]:
    """``{"zstd": lib, "lz4": lib}``: every fatbin entry compressed that way; built once, cached."""
    root = _nvcc_cache()
    final = root / f"compressed-{_digest(SOURCE, sorted(COMPRESSED_VARIANTS.items()))}"
    with file_lock(root / f".{final.name}.lock"):
        if not final.is_dir():
            tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=root))
            try:
                for name, flags in COMPRESSED_VARIANTS.items():
                    shutil.move(str(_build(name, flags, Path(tempfile.mkdtemp(dir=tmp)))), tmp)
                for leftover in [p for p in tmp.iterdir() if p.is_dir()]:
                    shutil.rmtree(leftover)
                tmp.chmod(0o755)
                os.replace(tmp, final)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return {name: final / _filename(name) for name in COMPRESSED_VARIANTS}


# Real aarch64 wheels from PyPI that the verify tests read (downloaded once, cached).
WHEEL_TAGS = [
    "manylinux_2_28_aarch64",
    "manylinux_2_24_aarch64",
    "manylinux2014_aarch64",
    "manylinux_2_17_aarch64",
]
VLLM_033 = "vllm==0.33.0"
VLLM_023 = "vllm==0.23.0"
TORCH_214 = "torch==2.14.0"
FLASHINFER_CUBIN = "flashinfer-cubin==0.6.13"
BITSANDBYTES = "bitsandbytes==0.50.2"  # CUDA 11.8-12.8 builds (cubin ELF ABI 7), relocatable code


def real_wheel(spec: str) -> Path:
    """The aarch64 wheel for ``spec`` (cp312 where it matters); fails the test, naming what to
    fetch, when PyPI cannot be reached."""
    from .downloads import DownloadFailed

    try:
        return pypi_download(spec, WHEEL_TAGS, "3.12")
    except DownloadFailed as exc:
        raise AssertionError(
            f"{exc}; these tests read the real aarch64 wheel from PyPI: allow access to "
            "pypi.org or pre-fill $EDGEVLLM_TEST_CACHE (pip download --no-deps "
            "--only-binary=:all: "
            f"--platform manylinux_2_28_aarch64 --python-version 3.12 {spec})"
        ) from None


def _verify_sources_key() -> str:
    """Changes whenever the scanner, the rules or the default policy change."""
    import edgevllm.specs.cuda as cuda
    import edgevllm.verify as verify_pkg

    digest = hashlib.sha256()
    files = sorted(Path(verify_pkg.__file__).parent.glob("*.py"))
    for path in files + [Path(verify_pkg.__file__).with_name("policy.yaml"), Path(cuda.__file__)]:
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def wheel_verdict(spec: str, target: str):
    """``edgevllm.verify.verify(target, path=<wheel>)``, cached as a pickle (see module doc)."""
    import pickle

    from edgevllm.verify import verify

    wheel = real_wheel(spec)
    root = test_cache_dir("verify-verdicts")
    slot = root / f"{wheel.name}-{wheel.stat().st_size}-{target}-{_verify_sources_key()}.pickle"
    with file_lock(root / f".{slot.name}.lock"):
        if slot.is_file():
            return pickle.loads(slot.read_bytes())
        verdict = verify(target, path=wheel)
        tmp = slot.with_name(f".{slot.name}.tmp")
        tmp.write_bytes(pickle.dumps(verdict))
        os.replace(tmp, slot)
        return verdict


@functools.lru_cache(maxsize=None)
def nvcc_cubin(sm: str) -> Path:
    """A raw cubin of SOURCE for ``sm`` (``121a``): what Triton's and FlashInfer's JIT caches
    hold; built with ``nvcc -cubin`` once, cached like ``nvcc_libs``."""
    root = _nvcc_cache()
    key = _digest(SOURCE, sm)
    final = root / f"cubin-{sm}-{key}.cubin"
    with file_lock(root / f".{final.name}.lock"):
        if not final.is_file():
            work = Path(tempfile.mkdtemp(dir=root))
            try:
                (work / "k.cu").write_text(SOURCE)
                _run([str(NVCC), "-cubin", f"-arch=sm_{sm}", "-o", "k.cubin", "k.cu"], work)
                os.replace(work / "k.cubin", final)
            finally:
                shutil.rmtree(work, ignore_errors=True)
    return final


@functools.lru_cache(maxsize=None)
def planned_ptx_lib() -> Path:
    """Two units as a 12.1a compile of vLLM lays out Marlin: one with sm_121a SASS, one built
    for ``8.0+PTX`` (sm_80 SASS and compute_80 PTX: it runs on a Spark through the JIT)."""
    root = _nvcc_cache()
    final = root / f"planned-ptx-{_key()}" / "libplanned_ptx.so"
    with file_lock(root / f".planned-ptx-{_key()}.lock"):
        if not final.is_file():
            work = Path(tempfile.mkdtemp(prefix=".planned-ptx-", dir=root))
            try:
                (work / "k.cu").write_text(SOURCE)
                (work / "o.cu").write_text(OTHER_SOURCE)
                pic = ["-Xcompiler", "-fPIC", "-c"]
                _run([str(NVCC), *pic, *_sass("121a"), "-o", "k.o", "k.cu"], work)
                _run([str(NVCC), *pic, "-gencode", "arch=compute_80,code=[sm_80,compute_80]",
                      "-o", "o.o", "o.cu"], work)
                _run([str(NVCC), "-shared", "-o", final.name, "k.o", "o.o"], work)
                final.parent.mkdir(parents=True, exist_ok=True)
                os.replace(work / final.name, final)
            finally:
                shutil.rmtree(work, ignore_errors=True)
    return final
