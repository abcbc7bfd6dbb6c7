"""The shared compile cache (--compile-cache), end to end with real parts: a real redis-server
process (tests/support/redis_server) as ccache's remote storage, the fixture tree compiled
through Debian's ccache (in the test CUDA image: tests/support/images.ccache_image) in the build
stage (the host's platform, spark's arch list), on the real Docker engine, which reaches redis at
the host's bridge address.

Builder one compiles a unit no cache has seen (misses); builder two builds the same tree as a
second machine would: its own, empty local cache (another cache id) and none of builder one's
BuildKit layers (--rerun-steps: every step runs again, so its compile step really runs), with the
same shared cache: it compiles nothing (0 misses, every unit a hit from redis). The URL carries a
password, which appears in no log line, lock, Dockerfile, label or layer history.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from e2e.conftest import hermetic_spec
from support.platforms import native_platform

PASSWORD = "s3cret-" + uuid.uuid4().hex[:8]


def compile_step(log: Path) -> str:
    """The build log's lines of the wheels stage's compile step (the one printing the counters)."""
    from edgevllm.common.labels import CCACHE_STATS_MARKER

    lines = log.read_text().splitlines()
    marked = [line for line in lines if CCACHE_STATS_MARKER in line]
    assert marked, f"{log}: the compile step printed no ccache counters"
    step = marked[0].split()[0]  # BuildKit's "#12" prefix of that step
    return "\n".join(line for line in lines if line.startswith(step + " "))


@pytest.fixture(scope="module")
def redis_url(engine):
    from support.redis_server import redis_server

    with redis_server(engine, PASSWORD) as url:
        yield url


def builder_spec(base_image, upstream, url: str, ref: str, **extra) -> dict:
    # A cache id no build has used: this builder's local ccache starts empty, as on a new machine.
    spec = hermetic_spec("spark", base_image, upstream, platform=native_platform(),
                         mods=[], verify=False, compile_cache=url,
                         compile_cache_id=f"ccache-e2e-{uuid.uuid4().hex[:12]}", **extra)
    spec["vllm"]["ref"] = ref
    return spec


def salted_tree(upstream) -> str:
    """A branch whose compile unit no cache has seen."""
    from e2e.conftest import FIXTURE_TREE, KERNELS
    from support.gitfixtures import commit, head

    salt = uuid.uuid4().hex
    kernels = (FIXTURE_TREE / KERNELS).read_text() + f"\n// compile cache test {salt}\n"
    commit(upstream, [head(upstream)], {KERNELS: kernels}, "unit no cache has seen",
           ref=f"refs/heads/ccache-{salt}")
    return f"ccache-{salt}"


@pytest.fixture(scope="module")
def ccache_image_native(engine):
    from support.images import ccache_image

    return ccache_image(engine)   # this host's platform


def test_a_second_builder_compiles_nothing_from_the_shared_cache(
        redis_url, engine, ccache_image_native, fake_upstream, tmp_path):
    from edgevllm.builder.pipeline import build
    from edgevllm.specs.buildspec import spec_from_dict

    tree = salted_tree(fake_upstream)
    first = build(spec_from_dict(builder_spec(ccache_image_native, fake_upstream,
                                              redis_url, tree)), tmp_path / "one", engine)
    assert first.compiled and first.compile_cache is not None, "the compile printed no counters"
    assert first.compile_cache["misses"] > 0 and first.compile_cache["remote"] is True
    assert first.compile_cache["remote_errors"] == 0, first.compile_cache

    second = build(spec_from_dict(builder_spec(ccache_image_native, fake_upstream,
                                               redis_url, tree, rerun_steps=True)),
                   tmp_path / "two", engine)
    assert second.compiled, "the second builder must run its compile (its own empty cache)"
    assert "CACHED" not in compile_step(second.log_path), "BuildKit served the compile step"
    cache = second.compile_cache
    assert cache is not None and cache["misses"] == 0 and cache["hits"] > 0, cache
    assert cache["remote_hits"] == cache["hits"], cache

    for result in (first, second):
        lock = result.lock_path.read_text()
        assert json.loads(lock)["compile_cache"].startswith("redis://***@")
        texts = [lock, result.log_path.read_text(),
                 (result.lock_path.parent / "context" / "Dockerfile").read_text(),
                 engine.run_cli(["image", "inspect", result.image]).stdout.decode(),
                 engine.run_cli(["history", "--no-trunc", result.image]).stdout.decode()]
        assert not [t for t in texts if PASSWORD in t], "the cache password leaked"
