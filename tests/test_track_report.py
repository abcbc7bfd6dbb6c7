"""inv track on real data: vLLM 0.32.0 → 0.33.0 from PyPI's sdists (downloaded once into the test
cache by tests/support/sdists.py and handed to track's own cache by sha256), for Spark, with
this project's shipped patch and mods; the facts below were read by hand from the two sdists.
Also a lock as the start, a mod's range verdicts and the plan's change rows on small real data."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from pathlib import Path

import pytest
import yaml

from edgevllm.cli import program
from edgevllm.common.paths import cache_dir
from edgevllm.specs.buildspec import load_spec_file
from edgevllm.specs.lock import Lock, ModLock, PickLock, SourceLock, write_lock
from edgevllm.track import facts
from edgevllm.track.render import markdown, rows, write_spec
from edgevllm.track.report import FIX_BROKEN, REBUILD_RECOMMENDED, start_of, track
from support.pypiindex import sdist_entry, serve_index, tarball
from support.sdists import into_track_cache, sdist_tree_cached


@pytest.fixture(scope="module")
def report_032_033(tmp_path_factory):
    root = tmp_path_factory.mktemp("track")
    saved = os.environ.get("EDGEVLLM_CACHE")
    os.environ["EDGEVLLM_CACHE"] = str(root / "cache")
    try:
        for version in ("0.32.0", "0.33.0"):
            into_track_cache("vllm", version)
        spec = root / "spec.yaml"
        spec.write_text("target: spark\nvllm:\n  ref: v0.32.0\n")
        start = start_of(str(spec), None)
        yield start, track(start, "0.33.0", 7), root
    finally:
        if saved is None:
            os.environ.pop("EDGEVLLM_CACHE", None)
        else:
            os.environ["EDGEVLLM_CACHE"] = saved


def test_032_to_033_for_spark_per_item(report_032_033):
    _, report, _ = report_032_033
    assert report["exit_code"] == REBUILD_RECOMMENDED, report["verdict"]
    assert report["to"]["vllm"] == "0.33.0"
    patch = {p["name"]: p for p in report["patches"]}["vllm-cmake-keep-121a"]
    assert (patch["old"], patch["new"], patch["retire"]) == ("applied", "applied", False)
    pins = {p["pin"]: (p["old"], p["new"]) for p in report["pins"]}
    assert pins["torch"] == ("2.13.0", "2.14.0")
    assert pins["FlashInfer"] == ("0.7.0.post1", "0.7.2.post1")
    assert pins["CUTLASS"] == ("v4.7.1", "v4.7.1")
    assert pins["FlashMLA"] == ("0eee43b12f034b657133cf2afca6a72ebb6efccf",
                                "e2afa5fd8c220fbd05fe03fc24c9d5e64c24641b")
    assert pins["DeepGEMM"][1] == "0820030756945b2daec208e8e8255268360f337d"
    mods = {m["name"]: m["verdict"] for m in report["mods"]}
    assert mods["cutlass-dsl-gb10"] == "not-applicable"  # CuTe DSL 4.8.0 is past <4.6
    assert mods["flashinfer-sm121"] == "not-applicable"  # FlashInfer 0.7.2.post1 past <0.6.12
    assert mods["spark-runtime"] == "no-range"
    # the applier's own decision on the new pins' wheels (PyPI's, by sha256): its range check
    # stops at the version, as in the image; a mod with no edit step has nothing to judge
    judged = {m["name"]: m["applier"] for m in report["mods"]}
    assert judged["flashinfer-sm121"]["outcome"] == "not-applicable"
    assert judged["flashinfer-sm121"]["detail"] == ("flashinfer-python 0.7.2.post1 is outside "
                                                    ">=0.6.9,<0.6.12")
    assert judged["cutlass-dsl-gb10"]["detail"] == "nvidia-cutlass-dsl 4.8.0 is outside >=4.4,<4.6"
    assert judged["spark-runtime"] is None
    changes = {(c["name"], c["change"]) for c in report["plan"]["changes"]}
    assert ("BEAM_KERNEL_ARCHS", "added") in changes
    assert not report["plan"]["new_gap"] and not report["broken"]
    mode = report["mode"]
    assert mode["old"]["mode"] == mode["new"]["mode"] and "0.33.0" in mode["new"]["why"]


def test_the_report_for_people_and_the_bumped_spec(report_032_033):
    start, report, root = report_032_033
    text = markdown(report)
    assert "| patch | vllm-cmake-keep-121a | applied → applied |" in text
    assert "| pin | torch | 2.13.0 → 2.14.0 |" in text
    assert len(rows(report)) == text.count("\n| ") - 1
    out = root / "bumped.yaml"
    assert write_spec(report, start, out) == {"mods": [], "picks": [], "patches": []}
    assert yaml.safe_load(out.read_text())["vllm"]["ref"] == "v0.33.0"
    assert load_spec_file(out).vllm.ref == "v0.33.0"


def test_a_lock_starts_from_its_release_mods_and_picks(tmp_path):
    source = SourceLock(name="vllm", repo="https://github.com/vllm-project/vllm.git",
                        base_sha="a" * 40, commit="b" * 40, tree="c" * 40,
                        version="0.32.0+3.gabcdef1")
    source.picks = [PickLock(spec="40082", kind="pr", repo=source.repo, pr=40082,
                             head_sha="d" * 40, merge_base="e" * 40, diff_sha256="f" * 64)]
    lock = Lock(target="spark", vllm=source, mods=[ModLock(name="flashinfer-sm121", version="1"),
                                                   ModLock(name="patch:x", version="1")])
    path = write_lock(lock, tmp_path / "edgevllm.lock.json")
    start = start_of(str(path), None)
    assert (start.release, start.spec.target, start.spec.mods) == ("0.32.0", "spark",
                                                                   ["flashinfer-sm121"])
    assert start.picks == [("40082", "d" * 40)] and start.spec.vllm.cherry_picks == ["40082"]


def test_a_mods_range_verdict_against_old_and_new_pins():
    assert facts.mod_verdict("flashinfer-sm121", {"flashinfer-python": "0.6.10"},
                             {"flashinfer-python": "0.7.2.post1"}).verdict == "retire"
    assert facts.mod_verdict("flashinfer-sm121", {"flashinfer-python": "0.6.10"},
                             {"flashinfer-python": "0.6.11"}).verdict == "applies"
    assert facts.mod_verdict("flashinfer-sm121", {}, {}).verdict == "unknown"
    assert facts.mod_verdict("earlyoom", {}, {}).verdict == "no-range"


def test_plan_change_rows():
    old = {"extensions": {"_C": {"arches": ["12.1a"], "kind": "native"},
                          "_moe_C": {"arches": ["12.1a"], "kind": "native"}},
           "groups": {"FP4_ARCHS": {"gets": ["12.1a"], "kind": "native"}}}
    new = {"extensions": {"_C": {"arches": ["12.0f"], "kind": "family"}},
           "groups": {"FP4_ARCHS": {"gets": ["12.1a"], "kind": "native"},
                      "NEW_ARCHS": {"gets": [], "kind": "none"}}}
    got = {(r["name"], r["change"], r["new"]) for r in facts.plan_changes(old, new)}
    assert got == {("_C", "changed", "12.0f (family)"), ("_moe_C", "removed", "-"),
                   ("NEW_ARCHS", "added", "none (none)")}


def test_cmake_pins_are_read_through_the_variable_a_git_tag_names(tmp_path: Path):
    ext = tmp_path / "cmake" / "external_projects"
    ext.mkdir(parents=True)
    (ext / "deepgemm.cmake").write_text('set(_DEEPGEMM_UPSTREAM_TAG "abc123")\n'
                                        '  GIT_TAG "${_DEEPGEMM_UPSTREAM_TAG}"\n')
    (ext / "flashmla.cmake").write_text("  GIT_TAG 0eee43b1\n")
    assert facts.cmake_pin(tmp_path, "cmake/external_projects/deepgemm.cmake") == "abc123"
    assert facts.cmake_pin(tmp_path, "cmake/external_projects/flashmla.cmake") == "0eee43b1"
    assert facts.cmake_pin(tmp_path, "cmake/external_projects/none.cmake") == facts.NOT_PINNED


def _real_files(anchor_to: str | None = None) -> dict[str, bytes]:
    """vLLM 0.33.0's CMake and requirement files (PyPI's sdist); with ``anchor_to``, the line the
    Spark CMake patch anchors on rewritten as a release could rewrite it."""
    tree = sdist_tree_cached("vllm", "0.33.0", TRACK_FILES)
    files = {p.relative_to(tree).as_posix(): p.read_bytes()
             for p in sorted(tree.rglob("*")) if p.is_file()}
    if anchor_to is not None:
        text = files["CMakeLists.txt"].decode()
        assert ANCHOR in text
        files["CMakeLists.txt"] = text.replace(ANCHOR, anchor_to).encode()
    return files


TRACK_FILES = ["CMakeLists.txt", "cmake/", "requirements/", "setup.py", "pyproject.toml",
               "rust-toolchain.toml", "rust/Cargo.toml"]
ANCHOR = 'set(CUDA_SUPPORTED_ARCHS "7.5;8.0;8.6;8.7;8.9;9.0;10.0;11.0;12.0")'


def test_a_patch_that_no_longer_applies_is_a_broken_fix_exit_21(tmp_path, monkeypatch, capsys):
    """A release whose CMake line moved under the patch's anchor (and does not keep 12.1 either):
    the report names the patch, exits FIX_BROKEN, and --write-spec still writes the bump."""
    now = dt.datetime.now(dt.timezone.utc)
    old = tarball(_real_files(), "vllm-0.33.0")
    new = tarball(_real_files(ANCHOR.replace('12.0")', '12.0;13.0")')), "vllm-0.33.1")
    releases = {"0.33.0": sdist_entry("vllm", "0.33.0", now - dt.timedelta(days=30), old),
                "0.33.1": sdist_entry("vllm", "0.33.1", now - dt.timedelta(days=8), new)}
    files = {"vllm-0.33.0.tar.gz": old, "vllm-0.33.1.tar.gz": new}
    spec = tmp_path / "spec.yaml"
    spec.write_text("target: spark\nvllm:\n  ref: v0.33.0\n")
    with serve_index("vllm", releases, files) as url:
        monkeypatch.setenv("EDGEVLLM_PYPI_URL", url)
        monkeypatch.setenv("EDGEVLLM_CACHE", str(tmp_path / "cache"))
        with pytest.raises(SystemExit) as exc:
            program().run(["edgevllm", "track", "--from", str(spec), "--json"])
    assert exc.value.code == FIX_BROKEN == 21
    report = json.loads(capsys.readouterr().out)
    patch = {p["name"]: p for p in report["patches"]}["vllm-cmake-keep-121a"]
    assert (patch["old"], patch["new"]) == ("applied", "failed")
    assert "CMakeLists.txt" in patch["detail"] and "vllm 0.33.1" in patch["detail"]
    assert report["broken"][0].startswith("patch vllm-cmake-keep-121a fails")


def test_a_picks_fate_from_the_git_cache_alone(tmp_path, monkeypatch):
    """A real mirror (sources/gitcache) of a local upstream: PR 106 merged by v0.2.0 retires, PR
    101 is not in it, PR 102 squash-merged is not in it as-is; no mirror, no SHA: unknown."""
    from edgevllm.sources.gitcache import open_mirror
    from support.gitfixtures import PR_CLEAN, PR_MERGED, make_upstream_repo

    monkeypatch.setenv("EDGEVLLM_CACHE", str(tmp_path / "cache"))
    upstream = make_upstream_repo(tmp_path / "up")
    assert facts.pick_verdict(upstream.url, upstream.prs[106], "0.2.0")[1] is False  # no mirror
    mirror = open_mirror(upstream.url)
    with mirror.locked():
        mirror.fetch_ref("v0.2.0")
        for number in (106, PR_CLEAN, PR_MERGED):
            mirror.fetch_pr(number)
    merged = facts.pick_verdict(upstream.url, upstream.prs[106], "0.2.0")
    assert merged[1] is True and merged[0].startswith("merged:")
    for number in (PR_CLEAN, PR_MERGED):
        text, retire = facts.pick_verdict(upstream.url, upstream.prs[number], "0.2.0")
        assert not retire and text.startswith("not in v0.2.0"), text
    assert facts.pick_verdict(upstream.url, upstream.prs[106], "0.9.0")[0].endswith(
        "lacks tag v0.9.0")
    assert facts.pick_verdict(upstream.url, None, "0.2.0") == (facts.NO_GITHUB, False)
