"""The steps every build mode shares that need no image (``builder/steps.py``): the image's static
labels from the lock (skipped picks left out, the lock label readable back as the same lock, a
partial build's label), the lock's settings (the runtime's packages only where they differ),
pinned base images asked of no registry, the outcome labels and the mods lines a build prints,
and ``--no-verify`` recorded as skipped."""

from __future__ import annotations

import json

from edgevllm.builder.runner import Workspace
from edgevllm.builder.steps import (
    base_image_lock,
    checks_or_skip,
    lock_settings,
    outcome_labels,
    print_mods,
    static_labels,
)
from edgevllm.builder.subset import plan as subset
from edgevllm.common import labels
from edgevllm.containers.docker import DockerEngine
from edgevllm.specs.buildspec import load_spec, resolve
from edgevllm.specs.lock import LOCK_LABEL, Lock, ModLock, PickLock, SourceLock, parse_lock

SHA = "1" * 40
DIGEST = "sha256:" + "d" * 64


def pick(pr: int, skipped: bool = False) -> PickLock:
    return PickLock(spec=str(pr), kind="pr", repo="https://github.com/vllm-project/vllm", pr=pr,
                    head_sha="2" * 40, merge_base="3" * 40, diff_sha256="6" * 64,
                    skipped=skipped,
                    reason="already in the base" if skipped else "")


def lock(**changes) -> Lock:
    vllm = SourceLock(name="vllm", repo="https://github.com/vllm-project/vllm", ref="main",
                      base_sha=SHA, commit="4" * 40, tree="5" * 40, version="0.33.0",
                      picks=[pick(40082), pick(40100, skipped=True), pick(40200)])
    data = {"target": "spark", "created_at": "2026-11-29T14:00:00Z", "vllm": vllm,
            "mods": [ModLock(name="earlyoom", version="1.8"), ModLock(name="nvtop", version="3")],
            "kernel_plan": {"cuda_archs": "12.1a", "none": ["x"], "vllm_rs": "1.2",
                            "extensions": {}}, **changes}
    return Lock(**data)


def spark(**overrides):
    return resolve(load_spec("spark", overrides=overrides or None))


# -- static labels ---------------------------------------------------------------------------------
def test_static_labels_name_the_source_and_the_applied_picks_only():
    found = static_labels(spark(), lock(), "0.33.0-spark-abc")
    assert found["org.opencontainers.image.revision"] == "4" * 40
    assert found["org.opencontainers.image.version"] == "0.33.0"
    assert found["org.opencontainers.image.created"] == "2026-11-29T14:00:00Z"
    assert found[labels.VLLM_SHA] == SHA
    assert found[labels.PRS] == "40082,40200"  # the skipped pick is not in the image
    assert found[labels.MODS_VERSIONS] == "earlyoom=1.8,nvtop=3"
    assert found[labels.TAG] == "0.33.0-spark-abc"
    assert json.loads(found[labels.KERNEL_PLAN]) == {"cuda_archs": "12.1a", "none": ["x"]}
    assert found[labels.VLLM_RS] == "1.2"


def test_the_lock_label_reads_back_as_the_same_lock():
    built = lock()
    value = static_labels(spark(), built, "t")[LOCK_LABEL]
    assert parse_lock(value, "label") == built


def test_a_lock_without_sources_labels_empty_values_not_a_crash():
    found = static_labels(spark(), Lock(target="spark"), "t")
    assert found["org.opencontainers.image.source"] == ""
    assert found[labels.PRS] == "" and found[labels.MODS_VERSIONS] == ""
    assert found[labels.VLLM_RS] == "not in the tree"
    assert found["org.opencontainers.image.created"]  # now, when the lock has no time


def test_every_label_value_is_text():
    # docker labels are strings: a number or None would fail the build's --label argument
    assert all(isinstance(v, str) for v in static_labels(spark(), lock(), "t").values())


def test_a_partial_build_says_so_in_its_label():
    settings = subset.lock_settings(["_C"], {"_vllm_fa3_C": "sm_90a only"})
    found = static_labels(spark(), lock(settings=settings), "t")
    assert json.loads(found[labels.EXTENSIONS]) == {
        "partial": True, "extensions": ["_C"], "left_out": ["_vllm_fa3_C"], "serves": False}
    assert labels.EXTENSIONS not in static_labels(spark(), lock(), "t")


# -- the lock's settings ---------------------------------------------------------------------------
def test_settings_record_what_shapes_the_image():
    eff = spark()
    found = lock_settings(eff)
    assert found["platform"] == eff.platform and found["python"] == eff.python
    assert found["max_jobs"] == eff.max_jobs
    assert found["forbidden_packages"] == eff.target.forbidden_packages
    assert "aot" not in found
    json.dumps(found)  # the lock is JSON: every setting must be


def test_runtime_packages_are_recorded_only_where_they_differ():
    eff = spark(mode="compile")  # a compile's runtime base needs fewer packages than its build
    assert eff.runtime_apt_packages != eff.apt_packages
    assert lock_settings(eff)["runtime_apt_packages"] == eff.runtime_apt_packages
    prebuilt = spark(vllm_wheel="0.33.0")
    assert prebuilt.runtime_apt_packages == prebuilt.apt_packages
    assert "runtime_apt_packages" not in lock_settings(prebuilt)


# -- base images -----------------------------------------------------------------------------------
def test_a_pinned_base_is_taken_as_written_without_asking_its_registry():
    # the engine's registry lookup would answer None here (no network): the digest is the ref's
    found = base_image_lock(f"nvcr.io/nvidia/cuda:13.0.0-runtime@{DIGEST}", DockerEngine())
    assert (found.ref, found.digest) == ("nvcr.io/nvidia/cuda:13.0.0-runtime", DIGEST)


# -- outcomes --------------------------------------------------------------------------------------
RECORD = {"mods": [{"name": "earlyoom", "version": "1.8", "outcome": "applied",
                    "detail": "binary in /usr/bin", "files": ["/usr/bin/earlyoom"]},
                   {"name": "fix", "version": "2", "outcome": "skipped"}]}


def test_outcome_labels_are_compact_json_of_what_was_found():
    found = outcome_labels(RECORD, {"passed": True}, {"passed": False, "summary": "x"})
    assert json.loads(found[labels.MODS]) == [
        {"name": "earlyoom", "version": "1.8", "outcome": "applied"},
        {"name": "fix", "version": "2", "outcome": "skipped"}]
    assert json.loads(found[labels.PROBE]) == {"passed": False, "summary": "x"}
    assert " " not in found[labels.VERIFY]
    assert labels.AOT not in found
    with_aot = outcome_labels(None, {}, {}, aot={"modules": 3})
    assert json.loads(with_aot[labels.AOT]) == {"modules": 3}
    assert json.loads(with_aot[labels.MODS]) == []


def test_print_mods_says_each_outcome_or_none(capsys):
    print_mods(RECORD)
    err = capsys.readouterr().err
    assert "mod earlyoom: applied  binary in /usr/bin" in err
    assert "mod fix: skipped" in err and "mod fix: skipped " not in err
    print_mods(None)
    assert "mods: none applied" in capsys.readouterr().err


def test_no_verify_is_recorded_as_skipped_and_said(tmp_path, capsys):
    eff = spark(verify=False)
    found = checks_or_skip(eff, None, "img:1", Workspace(tmp_path))  # type: ignore[arg-type]
    assert found == ({"skipped": True}, {"skipped": True}, None)
    assert "checks skipped (--no-verify)" in capsys.readouterr().err
    labelled = outcome_labels(None, found[0], found[1])
    assert json.loads(labelled[labels.VERIFY]) == {"skipped": True}
