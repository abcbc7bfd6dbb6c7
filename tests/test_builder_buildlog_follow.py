"""Following BuildKit's plain progress (``builder/buildlog.py``) as a real build prints it: parallel
steps interleaved, each line kept with its own step; a failure of a later parallel step named, not
the one that printed last; a build that fails before any step (a base that is not there); a
credential in a build's output never reaching the log file or the failure message; the on-stage
hook; and the elapsed time as the build summary prints it."""

from __future__ import annotations

import pytest

from edgevllm.builder.buildlog import BuildFollower, format_elapsed

# Two stages built at once, as BuildKit schedules a wheels and a runtime base in parallel.
INTERLEAVED = """\
#4 [build 1/3] RUN apt-get update
#6 [runtime 1/2] RUN apt-get install -y python3.12
#4 0.300 Get:1 http://ports.ubuntu.com noble InRelease
#6 0.410 Reading package lists...
#4 1.000 Fetched 30 MB
#4 DONE 1.2s
#8 [build 2/3] RUN pip wheel .
#6 2.000 Setting up python3.12
#8 4.000 csrc/ops.cu(12): error: identifier "half2" is undefined
#6 DONE 2.1s
#8 ERROR: process "/bin/sh -c pip wheel ." did not complete successfully: exit code: 1
"""


def follow(text: str, **kwargs) -> BuildFollower:
    follower = BuildFollower(**kwargs)
    for line in text.splitlines():
        follower.feed(line)
    return follower


def test_interleaved_steps_keep_their_own_lines():
    follower = follow(INTERLEAVED)
    assert list(follower.vertices[4].output) == [
        "Get:1 http://ports.ubuntu.com noble InRelease", "Fetched 30 MB"]
    assert list(follower.vertices[6].output) == ["Reading package lists...",
                                                 "Setting up python3.12"]
    assert follower.vertices[4].done and follower.vertices[6].done
    assert [v.stage for v in follower.ran("build")] == ["build"]  # 4 ran; 8 failed
    assert [v.what for v in follower.ran("runtime")] == [
        "RUN apt-get install -y python3.12"]


def test_the_failed_step_is_named_even_when_another_printed_after_it():
    message = follow(INTERLEAVED).failure_message(None)
    first, body, why = message.split("\n")
    assert first == "stage 'build' failed at: RUN pip wheel ."
    assert body.strip() == 'csrc/ops.cu(12): error: identifier "half2" is undefined'
    assert why.strip().endswith("exit code: 1")
    assert "Setting up python3.12" not in message


def test_the_last_of_two_failures_is_the_one_reported():
    text = INTERLEAVED + ("#9 [runtime 2/2] RUN false\n"
                          "#9 ERROR: process \"/bin/sh -c false\" did not complete: exit code: 1\n")
    assert follow(text).failure_message(None).startswith("stage 'runtime' failed at: RUN false")


def test_a_failure_before_any_step_shows_the_last_lines(tmp_path):
    text = ("#1 [internal] load build definition from Dockerfile\n#1 DONE 0.0s\n"
            "#2 [internal] load metadata for nvcr.io/nvidia/cuda:99.0-devel\n"
            "#2 ERROR: nvcr.io/nvidia/cuda:99.0-devel: not found\n")
    follower = follow(text)
    # BuildKit's metadata step is a vertex of the 'internal' stage: its error is reported there
    assert follower.failure_message(None).startswith(
        "stage 'internal' failed at: load metadata for nvcr.io/nvidia/cuda:99.0-devel")
    bare = follow("ERROR: failed to solve: failed to read dockerfile: open Dockerfile: no such "
                  "file or directory\n")
    message = bare.failure_message(tmp_path / "b.log")
    assert message.startswith("the image build failed before any stage ran: ERROR: failed to solve")
    assert message.endswith(f"; full log: {tmp_path / 'b.log'}")


def test_a_step_without_output_says_so():
    text = "#3 [build 1/1] RUN exit 3\n#3 ERROR: process did not complete: exit code: 3\n"
    assert "(no output)" in follow(text).failure_message(None)


@pytest.mark.parametrize("secret, kept", [
    ("hf_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6", "using ***"),
    ("https://user:s3cr3tpassw0rd@git.example.org/me/vllm", "git.example.org"),
])
def test_a_credential_in_the_output_never_reaches_the_log_or_the_message(tmp_path, secret, kept):
    log = tmp_path / "build.log"
    with open(log, "w") as handle:
        follower = follow(f"#5 [build 1/1] RUN fetch\n#5 1.0 using {secret}\n"
                          "#5 ERROR: process did not complete: exit code: 1\n", log_file=handle)
    message = follower.failure_message(log)
    hidden = secret.split("://")[-1].split("@")[0] if "://" in secret else secret
    assert hidden not in log.read_text() and hidden not in message
    assert "***" in log.read_text() and kept in message


def test_the_hook_hears_each_step_as_it_starts():
    heard: list[tuple[int, str]] = []
    follow(INTERLEAVED, on_stage=lambda v: heard.append((v.number, v.stage)))
    assert heard == [(4, "build"), (6, "runtime"), (8, "build")]


def test_a_step_announced_again_is_the_same_step():
    follower = follow("#5 [build 1/2] RUN make\n#5 1.0 one\n#5 [build 1/2] RUN make\n"
                      "#5 2.0 two\n")
    assert list(follower.vertices[5].output) == ["one", "two"]
    assert follower.current is follower.vertices[5]


def test_lines_of_a_step_never_announced_are_in_the_tail_only():
    follower = follow("#12 0.5 stray output\n")
    assert follower.vertices == {} and list(follower.tail) == ["#12 0.5 stray output"]


def test_the_tail_and_a_steps_lines_are_bounded():
    follower = BuildFollower()
    follower.feed("#2 [build 1/1] RUN make")
    for n in range(10_000):
        follower.feed(f"#2 1.0 line {n}")
    assert len(follower.tail) == 40 and len(follower.vertices[2].output) == 40
    assert follower.vertices[2].output[-1] == "line 9999"


@pytest.mark.parametrize("seconds, shown", [(0, "0m00s"), (59.9, "0m59s"), (61, "1m01s"),
                                            (3599, "59m59s"), (3600, "1h00m00s"),
                                            (2 * 3600 + 5 * 60 + 7, "2h05m07s")])
def test_elapsed_as_the_summary_prints_it(seconds, shown):
    assert format_elapsed(seconds) == shown
