"""Where ``inv track`` starts (track/report.py ``start_of``): a spec file, a real lock file, or a
target's default spec, each read to the vLLM release the image is built from, its picks (a full
SHA known at once, a PR number not) and, for a lock, its mods and pinned packages; a start that
names no release is one line. Then what a bump drops (``retired``) and a mod's range verdict at
the edges (a pin outside before and after, a pre-release, a version that is none)."""

from __future__ import annotations

import pytest

from edgevllm.common.errors import SpecError
from edgevllm.specs.buildspec import DEFAULT_VLLM_REF
from edgevllm.specs.lock import write_lock
from edgevllm.specs.outcomes import ALREADY_APPLIED, APPLIED
from edgevllm.track import facts
from edgevllm.track.report import retired, start_of
from support.inside_locks import lock_data, make_lock, sha

SHA = "ABCDEF0123456789ABCDEF0123456789ABCDEF01"


def test_a_spec_file_starts_from_its_release_and_knows_only_full_sha_picks(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"target: thor\nvllm:\n  ref: v0.33.0\n  cherry_picks: ['40082', '{SHA}']\n")
    start = start_of(str(spec), None)
    assert (start.release, start.origin, start.spec.target) == ("0.33.0", str(spec), "thor")
    assert start.picks == [("40082", None), (SHA, SHA.lower())]
    assert start.locked_packages == {}


def test_no_start_is_the_targets_default_spec():
    start = start_of(None, "spark")
    assert start.origin == "target spark (default spec)" and start.spec.target == "spark"
    assert DEFAULT_VLLM_REF.lstrip("v").startswith(start.release)


@pytest.mark.parametrize("ref", ["main", "v0.33.0-fix", "v0.33.0rc1",
                                 "0123456789abcdef0123456789abcdef01234567"])
def test_a_spec_of_no_release_is_one_line_saying_what_track_compares(tmp_path, ref):
    """Found by this test: a ref that only began like a release (a branch v0.33.0-fix, the
    release candidate v0.33.0rc1) was tracked as the release 0.33.0."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"target: spark\nvllm:\n  ref: '{ref}'\n")
    with pytest.raises(SpecError) as raised:
        start_of(str(spec), None)
    line = str(raised.value)
    assert line.startswith(f"{spec}: vLLM ") and "is not a release" in line and "\n" not in line


def test_a_lock_starts_from_its_release_its_applied_picks_mods_and_packages(tmp_path):
    data = lock_data()
    data["vllm"]["picks"].append({**data["vllm"]["picks"][0], "spec": "40083", "pr": 40083,
                                  "head_sha": sha("skipped"), "skipped": True})
    data["mods"].append({"name": "patch:vllm-cmake-keep-121a", "version": "1"})
    data["packages"] = {"flashinfer-python": "0.7.2.post1"}
    lock = write_lock(make_lock().model_validate(data), tmp_path / "img.lock.json")
    start = start_of(str(lock), "thor")  # a lock names its own target
    assert (start.release, start.spec.target, start.origin) == ("0.33.0", "spark", str(lock))
    assert start.picks == [("40082", sha("pick-a"))]  # the skipped pick is not the image's
    assert start.spec.mods == ["fastsafetensors"]  # a source patch is not a mod
    assert start.spec.vllm.ref == "v0.33.0" and start.spec.vllm.cherry_picks == ["40082"]
    assert start.locked_packages == {"flashinfer-python": "0.7.2.post1"}


def test_a_lock_of_a_dev_build_is_one_line_and_a_local_label_is_its_release(tmp_path):
    data = lock_data()
    data["vllm"]["version"] = "0.33.1.dev12+gabcdef"
    lock = write_lock(make_lock().model_validate(data), tmp_path / "dev.lock.json")
    with pytest.raises(SpecError, match=r"the lock names no vLLM release and target \(version "
                                        r"'0.33.1.dev12\+gabcdef'\)"):
        start_of(str(lock), None)
    data["vllm"]["version"] = "0.33.0+cu130"  # a wheel's local label: still the release
    lock = write_lock(make_lock().model_validate(data), tmp_path / "cu.lock.json")
    assert start_of(str(lock), None).release == "0.33.0"


def test_a_bump_drops_retired_mods_upstream_mods_merged_picks_and_unneeded_patches():
    report = {"mods": [{"name": "a", "verdict": "retire"},
                       {"name": "b", "verdict": "applies", "applier": {"outcome": APPLIED}},
                       {"name": "c", "verdict": "applies",
                        "applier": {"outcome": ALREADY_APPLIED}},
                       {"name": "d", "verdict": "unknown", "applier": None}],
              "picks": [{"pick": "1", "retire": True}, {"pick": "2", "retire": False}],
              "patches": [{"name": "p", "retire": False}, {"name": "q", "retire": True}]}
    assert retired(report) == {"mods": ["a", "c"], "picks": ["1"], "patches": ["q"]}
    assert retired({}) == {"mods": [], "picks": [], "patches": []}


def test_a_mod_outside_its_range_before_and_after_is_not_applicable_not_retired():
    # flashinfer-sm121 applies to flashinfer-python >=0.6.9,<0.6.12
    verdict = facts.mod_verdict("flashinfer-sm121", {"flashinfer-python": "0.5.0"},
                                {"flashinfer-python": "0.5.1"})
    assert verdict.verdict == facts.NOT_APPLICABLE
    assert verdict.detail == "flashinfer-python 0.5.1 outside >=0.6.9,<0.6.12"
    assert verdict.versions == {"flashinfer-python": "0.5.0 → 0.5.1"}


def test_a_pre_release_inside_the_range_applies_and_a_version_that_is_none_is_unknown():
    assert facts.mod_verdict("flashinfer-sm121", {}, {"flashinfer-python": "0.6.11rc1"}
                             ).verdict == "applies"
    unknown = facts.mod_verdict("flashinfer-sm121", {"flashinfer-python": "0.6.10"},
                                {"flashinfer-python": "main"})
    assert unknown.verdict == "unknown"
    assert unknown.detail == "the new tree pins no exact version of flashinfer-python"
