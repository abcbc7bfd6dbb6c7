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
