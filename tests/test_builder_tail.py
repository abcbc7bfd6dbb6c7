"""The shared tail's pieces that need no image build: the final tags (their one owner) and the
kernel plan compared with what verify found, from the verdict in memory (nvcc-built libraries;
no verify.json is written or read)."""

from __future__ import annotations

import shutil

from edgevllm.builder.tail import final_tags, plan_against_binaries
from edgevllm.specs.buildspec import load_spec, resolve
from edgevllm.specs.lock import Lock
from edgevllm.verify.api import verify
from support.cuda_libs import nvcc_libs


def test_final_tags_lead_with_the_lock_tag_and_qualify_the_users():
    eff = resolve(load_spec("spark", overrides={"image_repo": "reg.example/me/vllm",
                                                "tags": ["dev", "other/repo:pinned"]}))
    assert final_tags(eff, "0.33.0-spark-abc") == [
        "reg.example/me/vllm:0.33.0-spark-abc", "reg.example/me/vllm:dev", "other/repo:pinned"]


def test_plan_against_binaries_reads_the_verdict_in_memory(tmp_path):
    folder = tmp_path / "root" / "site-packages" / "vllm"
    folder.mkdir(parents=True)
    shutil.copyfile(nvcc_libs()["sm_121a"], folder / "_C.abi3.so")
    verdict = verify("spark", path=tmp_path / "root")
    planned = Lock(kernel_plan={"extensions": {"_C": {"arches": ["12.1a"]},
                                               "_moe_C": {"arches": ["12.1a"]}}})
    assert plan_against_binaries(planned, verdict) == ["_C: plan: 12.1a; binary: sm_121a ✔"]
    wrong = Lock(kernel_plan={"extensions": {"_C": {"arches": ["11.0a"]}}})
    [line] = plan_against_binaries(wrong, verdict)
    assert line.startswith("_C: plan: 11.0a; binary: sm_121a") and "✘ differs" in line
    assert not list(tmp_path.rglob("*.json"))


def test_compile_cache_goes_to_buildx_as_a_secret_from_its_environment(tmp_path):
    """The URL is in buildx's environment only: no argument, no build arg, no label, no log."""
    from edgevllm.builder.tail import CCACHE_REMOTE_ENV, compile_cache_secret
    from edgevllm.containers.docker import BuildOptions

    url = "redis://:s3cretpw@cache.lan:6379"
    eff = resolve(load_spec("spark", overrides={"compile_cache": url}))
    secrets, env = compile_cache_secret(eff)
    assert secrets == [f"id=ccache-remote,env={CCACHE_REMOTE_ENV}"]
    assert env == {CCACHE_REMOTE_ENV: url}
    argv = BuildOptions(context=tmp_path, dockerfile=tmp_path / "Dockerfile", secrets=secrets,
                        build_args={"VLLM_VERSION": "0.1.0"}).argv()
    assert "--secret" in argv and not any("s3cretpw" in a or "cache.lan" in a for a in argv)
    assert compile_cache_secret(resolve(load_spec("spark"))) == ([], {})


def test_the_lock_records_a_shared_cache_redacted_and_its_tag_ignores_it():
    from edgevllm.common.secrets import url_without_password
    from edgevllm.specs.lock import image_tag, label_value

    lock = Lock(target="spark")
    shared = Lock(target="spark",
                  compile_cache=url_without_password("redis://:s3cretpw@cache.lan:6379"))
    assert image_tag(shared) == image_tag(lock)
    assert '"compile_cache":"redis://***@cache.lan:6379"' in label_value(shared)
    assert "s3cretpw" not in label_value(shared)
