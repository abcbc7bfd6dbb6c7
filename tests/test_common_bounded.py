"""The one runner for children that read others' data (``common/bounded.py``), with real
children (python, sh): each bound stops the child and its group with one line of the caller's
error; within the bounds the exit status, output and peak memory come back."""

from __future__ import annotations

import os
import sys
import time

import pytest

from edgevllm.common.bounded import Limits, MiB, run_bounded
from edgevllm.common.errors import PlanError, SourceError

PY = sys.executable


def run(code: str, limits: Limits, error=SourceError):
    return run_bounded([PY, "-c", code], limits, what="child", error=error)


def test_within_the_bounds_the_status_output_and_peak_come_back():
    done = run("import sys; b = bytearray(64 << 20); print('out'); print('err', file=sys.stderr);"
               " sys.exit(3)", Limits(memory=1024 * MiB))
    assert (done.returncode, done.stdout, done.stderr) == (3, b"out\n", b"err\n")
    assert done.peak_rss >= 64 * MiB and done.exceeded == ""


def test_an_allocation_past_the_memory_bound_is_one_line():
    with pytest.raises(PlanError) as info:
        run("b = bytearray(2 << 30)", Limits(memory=256 * MiB), error=PlanError)
    assert str(info.value) == ("child: stopped at the memory limit (256 MiB of address space); "
                               "what it was given asks for more")


def test_the_time_bound_kills_the_whole_group(tmp_path):
    marker = tmp_path / "grandchild-ran"
    # The grandchild would write the marker a second after the child is stopped.
    code = (f"import subprocess, time; subprocess.Popen(['sh', '-c', 'sleep 2; touch {marker}']);"
            " time.sleep(60)")
    with pytest.raises(SourceError, match=r"child: stopped after 1s \(the time limit\)"):
        run(code, Limits(seconds=1))
    time.sleep(2.5)
    assert not marker.exists()


def test_the_output_bound_stops_a_flood():
    with pytest.raises(SourceError, match=r"more than 1 MiB \(the output limit\)"):
        run("import sys\nwhile True: sys.stdout.write('x' * 65536)",
            Limits(output=1 * MiB))


def test_the_file_size_bound_stops_a_large_write(tmp_path):
    big = tmp_path / "big"
    done = run(f"open({str(big)!r}, 'wb').write(bytes(8 << 20))", Limits(file_size=1 * MiB))
    assert done.returncode != 0 and big.stat().st_size <= 1 * MiB


def test_input_reaches_the_child_and_a_missing_program_is_the_callers_to_name():
    done = run_bounded([PY, "-c", "import sys; print(len(sys.stdin.buffer.read()))"], Limits(),
                       what="child", error=SourceError, input=b"x" * (1 << 20))
    assert done.stdout == b"1048576\n"
    with pytest.raises(FileNotFoundError):
        run_bounded(["/nonexistent/tool"], Limits(), what="tool", error=SourceError)
    assert os.getpid()  # this process keeps its own limits


def test_git_reads_others_objects_through_the_runner(tmp_path, monkeypatch):
    """sources/gitcache.py runs every git call here: a blob past the output bound (a PR's file, a
    fork's object) is one line of SourceError, not a process that fills memory."""
    from edgevllm.sources import gitcache

    repo = tmp_path / "repo.git"
    gitcache.git(["init", "--bare", "-q", str(repo)])
    sha = gitcache.out(gitcache.git(["hash-object", "-w", "--stdin"], git_dir=repo,
                                    input=os.urandom(2 * MiB)))
    assert len(gitcache.git(["cat-file", "blob", sha], git_dir=repo).stdout) == 2 * MiB
    monkeypatch.setattr(gitcache, "GIT_LIMITS", Limits(memory=None, output=1 * MiB))
    with pytest.raises(SourceError, match=r"git cat-file blob: stopped after printing more than "
                                          r"1 MiB \(the output limit\)"):
        gitcache.git(["cat-file", "blob", sha], git_dir=repo)
