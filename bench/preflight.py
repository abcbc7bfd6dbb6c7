"""Bench: how fast a conflicting cherry-pick is found, against cloning and cherry-picking by hand.

Builds a local upstream the size of vLLM's tree (default 4,000 files; tests/support/gitfixtures.py)
with a PR that conflicts in code, then times
  1. edgevllm's preflight failing on it (mirror fetch + 3-way apply on a temporary index),
  2. the same preflight again with a warm mirror (what a second ``inv build`` pays),
  3. a full ``prepare_sources`` of a clean pick, tree exported,
  4. the by-hand way: ``git clone`` + ``git fetch pull/N/head`` + ``git cherry-pick`` in a checkout,
and prints the times and the ratios. Run: python bench/preflight.py [--files N]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from edgevllm.common.errors import CherryPickConflictError  # noqa: E402
from edgevllm.sources.prepare import SourceRequest, prepare_sources  # noqa: E402
from support.gitfixtures import add_pr, commit_to_branch, make_upstream_repo  # noqa: E402


def big_tree(root: Path, files: int) -> Path:
    for index in range(files):
        path = root / f"pkg{index % 40}" / f"mod{index}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"VALUE_{line} = {index + line}\n" for line in range(60)))
    return root


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def expect_conflict(request: SourceRequest) -> None:
    try:
        prepare_sources(request)
    except CherryPickConflictError:
        return
    raise SystemExit("bench setup error: the conflicting pick applied")


def by_hand(url: str, work: Path, number: int) -> None:
    def git(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True)

    git("clone", "--quiet", url, str(work))
    git("fetch", "--quiet", "origin", f"pull/{number}/head", cwd=work)
    git("-c", "user.name=b", "-c", "user.email=b@b", "cherry-pick", "FETCH_HEAD", cwd=work)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=4000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="edgevllm-bench-") as tmp_name:
        tmp = Path(tmp_name)
        os.environ["EDGEVLLM_CACHE"] = str(tmp / "cache")
        up = make_upstream_repo(tmp / "remote", big_tree(tmp / "tree", args.files))
        add_pr(up, 1, {"pkg0/mod0.py": "VALUE_0 = 'pr'\n"})
        add_pr(up, 2, {"pkg1/mod1.py": "VALUE_0 = 'clean'\n"})
        commit_to_branch(up, "main", {"pkg0/mod0.py": "VALUE_0 = 'main'\n"}, "main moves")
        conflict = SourceRequest.from_cli("vllm", up.url, "main", None, ["1"])
        clean = SourceRequest.from_cli("vllm", up.url, "main", None, ["2"])
        cold = timed(lambda: expect_conflict(conflict))
        warm = timed(lambda: expect_conflict(conflict))
        full = timed(lambda: prepare_sources(clean, tmp / "out"))
        hand = timed(lambda: by_hand(up.url, tmp / "by-hand", 1))
    print(f"tree: {args.files} files")
    print(f"preflight, conflicting pick, cold mirror: {cold:7.2f} s")
    print(f"preflight, conflicting pick, warm mirror: {warm:7.2f} s")
    print(f"prepare + export, clean pick (warm):      {full:7.2f} s")
    print(f"by hand: clone + fetch PR + cherry-pick:  {hand:7.2f} s")
    print(f"ratio by-hand / warm preflight:           {hand / warm:7.1f} x")


if __name__ == "__main__":
    main()
