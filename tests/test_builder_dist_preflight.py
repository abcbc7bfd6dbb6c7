"""--dist's preflight projection (builder/distpool/client.py): the local model's minutes on the
pool's cores, each job's measured overhead, and the toolchain's upload once."""

from __future__ import annotations

from edgevllm.builder.distpool import client, objcheck
from edgevllm.builder.distpool.probe import PoolStatus
from edgevllm.builder.estimate import cross_compile_minutes


def test_the_projection_counts_each_job_s_overhead_and_the_upload():
    bare = cross_compile_minutes(190, 64)
    assert client.pool_minutes(190, 64) == bare * client.JOB_OVERHEAD + client.UPLOAD_S / 60
    assert client.pool_minutes(190, 64) > bare + 0.3   # the upload alone is 20 s
    assert client.JOB_OVERHEAD > 1


def test_the_preflight_line_says_what_it_counts():
    found = client.DistClient("http://10.0.0.5:10600",
                              PoolStatus("http://10.0.0.5:10600", workers=4, cpus=64,
                                         in_progress=0), "")
    line = found.preflight_line(190)
    minutes = round(client.pool_minutes(190, 64))
    assert f"190 CUDA units projected at ~{minutes} min on the pool's 64 cores" in line
    assert f"each job x{client.JOB_OVERHEAD:.2f}" in line and "upload once" in line
    assert f"1 in {objcheck.CHECK_EVERY} units again here" in line
