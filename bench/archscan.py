"""Bench: edgevllm's fatbin parser vs NVIDIA cuobjdump on a corpus of real CUDA libraries.

Corpus: libnvjpeg.so.13 from the aarch64 nvidia-nvjpeg wheel (PyPI) and the nvcc-built test
libraries (tests/support/cuda_libs.py), all cached under $EDGEVLLM_TEST_CACHE. For each library
the parser and cuobjdump (--list-elf + --list-ptx, what --cuobjdump runs) must list the same
arches; the script prints both times and the ratio. Run: python bench/archscan.py [--repeat N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from edgevllm.verify import scan_file
from edgevllm.verify.cuobjdump import disagreement, expected_listing, run_cuobjdump
from support.cuda_libs import aarch64_cuda_lib, cuobjdump_binary, nvcc_libs  # noqa: E402


def corpus() -> list[Path]:
    return [aarch64_cuda_lib(), *sorted(nvcc_libs().values())]


def timed(fn, repeat: int) -> tuple[float, object]:
    start = time.perf_counter()
    for _ in range(repeat):
        result = fn()
    return (time.perf_counter() - start) / repeat, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per library and tool")
    repeat = parser.parse_args().repeat
    binary, libs = cuobjdump_binary(), corpus()
    total_parser = total_tool = 0.0
    mismatches = 0
    print(f"{'library':34} {'entries':>7} {'parser ms':>10} {'cuobjdump ms':>13} {'ratio':>7}  same")
    for lib in libs:
        t_parser, report = timed(lambda: scan_file(lib), repeat)
        t_tool, listing = timed(lambda: run_cuobjdump(binary, lib), repeat)
        same = disagreement(expected_listing(report.entries), listing) is None
        mismatches += not same
        total_parser, total_tool = total_parser + t_parser, total_tool + t_tool
        print(f"{lib.name:34} {len(report.entries):7d} {t_parser * 1e3:10.3f} {t_tool * 1e3:13.1f} "
              f"{t_tool / t_parser:6.0f}x  {'yes' if same else 'NO'}")
    print(f"total: {len(libs)} libraries, parser {total_parser * 1e3:.1f} ms, cuobjdump "
          f"{total_tool * 1e3:.1f} ms, parser is {total_tool / total_parser:.0f}x faster; "
          f"identical results: {'yes' if not mismatches else f'NO ({mismatches} differ)'}")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
