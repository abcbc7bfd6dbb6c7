"""Bench: ``inv verify`` vs a cuobjdump loop over the same CUDA libraries, in one run.

Input: a folder or a ``.whl`` (default: the real vLLM 0.33.0 aarch64 wheel from PyPI, downloaded
once and cached under $EDGEVLLM_TEST_CACHE; a wheel is unzipped into that cache so both tools
read the same files). Printed:
- whole command: ``inv verify --target T --path DIR`` (a fresh process, start-up included) vs
  ``cuobjdump --list-elf`` + ``--list-ptx`` (``-all`` for relocatable code) on every ELF file
  with device code, one process after the other, as a user's shell loop would; and
  ``inv verify --path X.whl`` straight from the zip;
- in-process: ``edgevllm.verify.verify`` in this process (no start-up);
- peak memory (max RSS) of the verify process and of the largest cuobjdump process;
- whether both list the same arches for every library.
Run: python bench/archscan.py [PATH] [--target spark] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from edgevllm.verify import verify  # noqa: E402
from edgevllm.verify.cuobjdump import disagreement, expected_listing, run_cuobjdump  # noqa: E402
from support.cuda_libs import VLLM_033, cuobjdump_binary, real_wheel  # noqa: E402
from support.downloads import unpacked_wheel  # noqa: E402


def run_measured(argv: list[str]) -> tuple[float, int, int]:
    """(seconds, exit code, max RSS in bytes) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, NO_COLOR="1"))
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - start, proc.returncode, usage.ru_maxrss * 1024


def inv_command(target: str, path: Path) -> list[str]:
    inv = Path(sys.executable).with_name("inv")
    head = [str(inv)] if inv.exists() else [sys.executable, "-m", "invoke"]
    return head + ["verify", "--target", target, "--path", str(path)]


def device_libraries(folder: Path) -> list:
    """Reports of every file under ``folder`` with device code (what cuobjdump is run on)."""
    from edgevllm.verify import scan_path

    return [r for r in scan_path(folder) if r.has_device_code]


def cuobjdump_loop(binary: Path, folder: Path, reports) -> tuple[float, int, dict]:
    """Whole time, peak RSS, and the listings, of cuobjdump run file by file."""
    total, peak, listings = 0.0, 0, {}
    for report in reports:
        relocatable = any(e.section == "__nv_relfatbin" for e in report.entries)
        for flag in ("--list-elf", "--list-ptx"):
            extra = ["-all"] if relocatable else []
            argv = [str(binary), flag, *extra, str(folder / report.path)]
            seconds, _, rss = run_measured(argv)
            total, peak = total + seconds, max(peak, rss)
        listings[report.path] = run_cuobjdump(binary, folder / report.path, relocatable)
    return total, peak, listings


def best_of(repeat: int, fn):
    results = [fn() for _ in range(repeat)]
    return min(results, key=lambda r: r[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", help="folder or .whl (default: vLLM 0.33.0 aarch64)")
    parser.add_argument("--target", default="spark")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; the best is kept")
    args = parser.parse_args()
    given = Path(args.path) if args.path else real_wheel(VLLM_033)
    folder = unpacked_wheel(given) if given.suffix == ".whl" else given
    binary, reports = cuobjdump_binary(), device_libraries(folder)
    size = sum(r.size for r in reports)
    print(f"{folder}: {len(reports)} libraries with device code, {size / 1e6:.0f} MB")

    command = inv_command(args.target, folder)
    t_cmd, rc, rss_cmd = best_of(args.repeat, lambda: run_measured(command))
    t_tool, rss_tool, listings = best_of(args.repeat,
                                         lambda: cuobjdump_loop(binary, folder, reports))
    t_proc = min(_timed(lambda: verify(args.target, path=folder)) for _ in range(args.repeat))
    mismatches = [r.path for r in reports
                  if disagreement(expected_listing(r.entries), listings[r.path]) is not None]

    print(f"whole command: inv verify {t_cmd:.2f} s (exit {rc}), cuobjdump loop {t_tool:.2f} s "
          f"→ {t_tool / t_cmd:.1f}x")
    print(f"in-process scan: {t_proc * 1e3:.0f} ms → {t_tool / t_proc:.0f}x the cuobjdump loop")
    print(f"peak memory: inv verify {rss_cmd / 2**20:.0f} MiB, largest cuobjdump "
          f"{rss_tool / 2**20:.0f} MiB")
    if given.suffix == ".whl":
        t_whl, rc_whl, rss_whl = best_of(args.repeat,
                                         lambda: run_measured(inv_command(args.target, given)))
        print(f"from the .whl itself: inv verify {t_whl:.2f} s (exit {rc_whl}), peak "
              f"{rss_whl / 2**20:.0f} MiB (inflating the zip included)")
    print(f"identical results: {'yes' if not mismatches else 'NO: ' + ', '.join(mismatches)}")
    return 1 if mismatches else 0


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


if __name__ == "__main__":
    sys.exit(main())
