"""builder/estimate.py, preflight's compile estimate, on the cores the compile keeps busy: the
target's ``max_jobs`` compile jobs (each nvcc on as many cores as the arch list has, to
``nvcc_threads``), never more than the builder's cores. Before, it divided by the builder's
cores alone: on 16 cores a spark compile (12 jobs) read 16 min and took about 22."""

from __future__ import annotations

import re

import pytest

from edgevllm.builder.estimate import (
    compile_slots,
    cross_compile_line,
    cross_compile_minutes,
    emulated_compile_line,
    emulated_compile_minutes,
    job_threads,
)
from edgevllm.builder.pipeline import compile_estimate
from edgevllm.builder.prepared import PreparedBuild
from edgevllm.specs.buildspec import Builder, load_spec, resolve


def test_the_cores_kept_busy_are_the_jobs_that_run_at_most_the_cores():
    assert compile_slots(16, 12) == 12      # spark's max_jobs on a 16-core workstation
    assert compile_slots(2, 12) == 2        # a 2-core host: every core
    assert compile_slots(16) == 16          # no jobs named: as many as cores
    assert compile_slots(16, 12, threads=2) == 16 and compile_slots(64, 12, threads=2) == 24
    assert compile_slots(16, 0) == 1        # never a division by nothing


def test_nvcc_threads_count_where_a_unit_has_arches_to_split():
    assert job_threads(2, "12.1a") == 1     # one gencode target: one core, whatever --threads
    assert job_threads(2, "8.0;9.0;12.0") == 2
    assert job_threads(4, "8.0 9.0") == 2


def test_the_cross_line_divides_by_the_jobs_and_says_so():
    line = cross_compile_line(78, "amd64", "linux/arm64", cores=16, jobs=12)
    assert ("/ 12 cores (the compile jobs that run, max_jobs, on this 16-core builder) ≈ 22 min"
            in line), line
    assert cross_compile_minutes(78, 12) == pytest.approx(21.7, abs=0.1)
    assert "/ 16 cores ≈ 16 min" in cross_compile_line(78, "amd64", "linux/arm64", cores=16)
    few = cross_compile_line(78, "amd64", "linux/arm64", cores=2, jobs=12)
    assert "/ 2 cores ≈ 2.2 h" in few and "max_jobs" not in few  # the cores are fewer


def test_the_emulated_line_divides_by_the_jobs_too():
    line = emulated_compile_line(78, "amd64", "linux/arm64", cores=64, jobs=12)
    assert "/ 12 cores (the compile jobs that run" in line
    assert f"{emulated_compile_minutes(78, 12) / 60:.1f} h" in line


def test_preflight_asks_the_targets_jobs(tmp_path):
    """The estimate the build prints (builder/pipeline.compile_estimate) for a spark cross
    compile whose spec runs one job: one core's worth, whatever this host has."""
    eff = resolve(load_spec("spark", overrides={"mode": "compile", "max_jobs": 1}),
                  builder=Builder("amd64"))
    assert eff.toolchain == "cross" and eff.max_jobs == 1
    build = PreparedBuild(eff=eff, dockerfile="", contexts={}, stages=("wheels", "runtime"),
                          lock=None, compiles=True, compile_units=78)
    line = compile_estimate(build, Builder("amd64"), eff)
    assert "/ 1 cores" in line and "≈ 4.3 h" in line, line  # 78 units' 261 core-min on one


def test_the_docs_examples_are_what_preflight_prints():
    """docs/build-modes.md shows both estimates for spark (12 jobs): each example is the start
    of the line the functions print for its figures (78 units; 16 cores cross, 2 emulated)."""
    from edgevllm.common.paths import project_root

    text = (project_root() / "docs" / "build-modes.md").read_text()
    shown = {re.sub(r"[,;] \.\.\.$", "", line.strip()) for line in text.splitlines()
             if "78 CUDA units (inv plan)" in line}
    assert len(shown) == 2, shown
    cross = cross_compile_line(78, "amd64", "linux/arm64", cores=16, jobs=12)
    emulated = "warning: " + emulated_compile_line(78, "amd64", "linux/arm64", cores=2, jobs=12)
    assert {line for line in shown if cross.startswith(line)}
    assert {line for line in shown if emulated.startswith(line)}
