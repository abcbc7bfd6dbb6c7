"""Following buildx plain progress: stages, cached steps, and a failure naming its stage."""

from __future__ import annotations

from edgevllm.builder.buildlog import BuildFollower

SAMPLE = """\
#1 [internal] load build definition from Dockerfile
#1 DONE 0.0s
#5 [base 2/4] RUN python3 -m venv /opt/venv
#5 CACHED
#7 [linux/arm64 build 1/1] RUN --mount=type=bind,from=vllm-src,target=/src/vllm,rw cd /src/vllm && pip wheel .
#7 0.512 nvcc: /usr/local/cuda/bin/nvcc -gencode arch=compute_110a,code=sm_110a
#7 3.101 csrc/kernels.cu(40): error: this declaration has no storage class or type specifier
#7 3.102 1 error detected in the compilation of "csrc/kernels.cu".
#7 ERROR: process "/bin/sh -c cd /src/vllm && pip wheel ." did not complete successfully: exit code: 1
------
 > [build 1/1] RUN ...:
------
"""


def test_failure_names_the_stage_and_shows_its_lines(tmp_path):
    follower = BuildFollower()
    for line in SAMPLE.splitlines():
        follower.feed(line)
    message = follower.failure_message(tmp_path / "build.log")
    assert message.startswith("stage 'build' failed at: RUN --mount=type=bind,from=vllm-src")
    assert "kernels.cu(40): error" in message
    assert "exit code: 1" in message and str(tmp_path / "build.log") in message
    assert follower.vertices[5].cached and not follower.ran("base")


def test_log_file_gets_every_line_and_ran_counts_executed_steps(tmp_path):
    log = tmp_path / "log"
    with open(log, "w") as handle:
        follower = BuildFollower(log_file=handle)
        for line in ["#3 [build 1/1] RUN make", "#3 1.0 ok", "#3 DONE 1.0s"]:
            follower.feed(line)
    assert log.read_text().count("\n") == 3
    assert [v.what for v in follower.ran("build")] == ["RUN make"]
    assert follower.failed_vertex() is None


def test_ccache_counters_from_the_compile_step_make_the_summary():
    from edgevllm.builder.buildlog import compile_cache_summary, describe_compile_cache

    follower = BuildFollower()
    follower.feed("#9 [build 2/2] RUN --mount=type=bind,from=vllm-src ...")
    for key, value in [("direct_cache_hit", 5), ("preprocessed_cache_hit", 1), ("cache_miss", 2),
                       ("remote_storage_hit", 4), ("remote_storage_miss", 2)]:
        follower.feed(f"#9 12.5 edgevllm-ccache-stats {key}\t{value}")
    follower.feed("#9 12.6 edgevllm-ccache-stats stats_updated_timestamp\tsoon")  # not a count
    follower.feed("#9 12.6 some compiler output cache_miss 7")
    assert follower.ccache == {"direct_cache_hit": 5, "preprocessed_cache_hit": 1,
                               "cache_miss": 2, "remote_storage_hit": 4, "remote_storage_miss": 2}
    summary = compile_cache_summary(follower.ccache, remote=True)
    assert summary == {"hits": 6, "misses": 2, "remote": True, "remote_hits": 4,
                       "remote_misses": 2, "remote_errors": 0}
    assert describe_compile_cache(summary) == (
        "compile cache: 6 hits, 2 misses (shared: 4 hits, 2 misses, 0 errors)")
    local = compile_cache_summary({"cache_miss": 3}, remote=False)
    assert describe_compile_cache(local) == "compile cache: 0 hits, 3 misses"


def test_elapsed_stops_when_the_build_finishes(monkeypatch):
    """The image's build time is the build's, not the checks run on the image afterwards."""
    import edgevllm.builder.buildlog as buildlog

    clock = iter([100.0, 160.0, 900.0, 1000.0])
    monkeypatch.setattr(buildlog.time, "monotonic", lambda: next(clock))
    follower = BuildFollower()          # started at 100
    assert follower.elapsed() == 60.0   # still running: counts to now
    follower.finish()                   # ended at 900
    follower.finish()                   # a second call keeps the first end
    assert follower.elapsed() == 800.0


def test_an_edgevllm_step_s_own_error_line_leads_the_failure_however_much_followed(tmp_path):
    follower = BuildFollower()
    follower.feed("#9 [build 2/3] RUN pip wheel .")
    follower.feed("#9 3.1 edgevllm cross: error: the tree's build runs /b/tr, a program built for "
                  "the target (aarch64)")
    for n in range(60):   # CMake's and pip's lines after it: more than the tail keeps
        follower.feed(f"#9 3.{n} traceback line {n}")
    follower.feed("#9 ERROR: process did not complete successfully: exit code: 1")
    message = follower.failure_message(None)
    assert message.startswith("edgevllm cross: error: the tree's build runs /b/tr, a program "
                              "built for the target (aarch64)\n  stage 'build' failed at: RUN")
    assert "traceback line 59" in message and "traceback line 0\n" not in message
